/**
 * The limit backend contract: where the token buckets and the concurrency leases of tool calls
 * live. `MemoryLimitBackend` (one process) and `RedisLimitBackend` (every instance on one Redis)
 * implement it; the contract suite in `test/limits` runs against both.
 *
 * One check is one atomic step per (tool, caller) key: refuse when the bucket is empty (`rate`,
 * with the wait until the next token) or when the cap of calls in flight is reached
 * (`concurrency`); otherwise take a token and a lease. A refusal takes nothing. A lease expires
 * `leaseMs` after it was taken or last renewed, so the slot of a call whose instance died is given
 * back after at most that long; a lease that expired is never revived.
 */

/** What one check asks for (built from a tool's policy). */
export interface LimitSpec {
  /**
   * Microseconds between two tokens (the bucket refills one token per interval); 0 = no rate
   * limit. An integer ≥ 1 otherwise.
   */
  readonly intervalUs: number
  /** Tokens the bucket holds when full (calls allowed at once). Ignored without a rate limit. */
  readonly burst: number
  /** Calls in flight per key; 0 = no cap (then no lease is taken). */
  readonly concurrency: number
  /** Lifetime of a lease in ms, from when it is taken or renewed. */
  readonly leaseMs: number
}

/** Which limit refused a call. */
export type LimitKind = 'rate' | 'concurrency'

/** The answer of one check. */
export type LimitDecision =
  | { readonly ok: true }
  /**
   * `retryAfterMs`: for `rate`, when the next token is there; for `concurrency`, when the lease
   * that ends first would expire if not renewed or released (an upper bound: a release is sooner).
   */
  | { readonly ok: false, readonly limit: LimitKind, readonly retryAfterMs: number }

/** Where buckets and leases live (see the module doc). */
export interface LimitBackend {
  /**
   * Checks `key` against `spec`; when allowed, takes a token (with a rate limit) and a lease named
   * `callId` (with a cap). Rejects when the backend fails (nothing is known then).
   */
  acquire (key: string, spec: LimitSpec, callId: string): Promise<LimitDecision>
  /**
   * Extends a held lease to `leaseMs` from now. Resolves false when the lease is gone (expired or
   * released): it is not re-created.
   */
  renew (key: string, callId: string, leaseMs: number): Promise<boolean>
  /** Gives a lease back (nothing when it is gone). */
  release (key: string, callId: string): Promise<void>
  /** Stops timers; closes what the backend made (never an injected client). */
  close? (): Promise<void>
  /** Resolves once the backend can answer (a Redis connection is up), rejects after `timeout` ms. */
  ready? (timeout?: number): Promise<void>
}

/** The decision that allows a call. */
export const ALLOWED: LimitDecision = Object.freeze({ ok: true })
