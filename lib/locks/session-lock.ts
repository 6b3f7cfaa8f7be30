/**
 * The lock contract. A lock serializes the work on one record of the store — a session, a state
 * handle, a task: a request holds a lease from before it reads the record until it has saved it.
 * Implementations: `MemorySessionLock` (one process), `FileSessionLock` (workers of one machine),
 * `RedisSessionLock` and `PgSessionLock` (many machines). One contract suite
 * (`lib/testing/contracts/lock-contract.ts`, exported as the test kit) runs against all of them.
 */

/** Opaque proof of a lock lease, which a store able to check it (Redis, PostgreSQL) uses to fence a save. */
export interface LeaseFence {
  /** The lock key of the lease (a Redis key for the Redis lock, the lease row's key for the PostgreSQL one). */
  readonly key: string
  /** The random token of this acquisition. */
  readonly token: string
}

/** Options of {@link SessionLock.acquire}. */
export interface AcquireOptions {
  /** Milliseconds to wait for the lock; `0` tries once. Defaults to the lock's `timeout`. */
  timeout?: number
  /** Aborting it stops the wait with the signal's reason. */
  signal?: AbortSignal
  /**
   * Who asks (e.g. the request). Acquiring a session lock its owner already holds is an error
   * ("already held") instead of a deadlock.
   */
  owner?: object
  /**
   * Goes before the other waiters of this process (a holder taking back a lock it released to
   * wait for the client, so that newer requests do not overtake the one already under way).
   * Locks may ignore it; the bundled ones honour it within one process, not across processes.
   */
  priority?: boolean
}

/**
 * A cancellation whose `AbortSignal` is made only when someone asks for it (a request's: making a
 * signal costs more than the rest of an uncontended acquire). The plugin hands one to the bundled
 * locks in place of `signal` (they ask for the signal only when they have to wait); a custom lock
 * gets a plain `AbortSignal` (see {@link AcquireOptions.signal}). Not part of the package's API:
 * the bundled locks' public `acquire` takes {@link AcquireOptions}.
 */
export interface AbortSource {
  readonly aborted: boolean
  readonly reason: unknown
  readonly signal: AbortSignal
}

/**
 * What the bundled locks' `acquire` accepts from the plugin: {@link AcquireOptions}, whose `signal`
 * may also be an {@link AbortSource}. Not part of the package's API (see {@link AbortSource}).
 */
export interface LocalAcquireOptions extends Omit<AcquireOptions, 'signal'> {
  signal?: AbortSignal | AbortSource
}

/** @internal The `AbortSignal` of a signal or an {@link AbortSource} (made now for the latter). */
export function signalOf (cancel: AbortSignal | AbortSource | undefined): AbortSignal | undefined {
  return cancel === undefined || cancel instanceof AbortSignal ? cancel : cancel.signal
}

/** One acquisition of a session's lock. */
export interface SessionLease {
  /** The session id. */
  readonly id: string
  /** Aborted when the lease is lost (a Redis or PostgreSQL lease that could not be renewed in time). */
  readonly signal: AbortSignal
  /** Proof of this acquisition for fenced saves, when the backend supports it. */
  readonly fence?: LeaseFence
  /** Releases the lease. Releasing twice rejects with a `SessionLockError` ("not held"). */
  release (): Promise<void>
}

/** The lock contract. */
export interface SessionLock {
  /** Default acquire timeout in milliseconds. */
  readonly timeout: number
  /**
   * Waits for the session's lock. Rejects with `SessionLockTimeoutError` after the timeout, with
   * `SessionLockError` when the backend fails (at once, not after the timeout), or with the
   * signal's reason when aborted.
   */
  acquire (id: string, options?: AcquireOptions): Promise<SessionLease>
  /** Takes the lock if it is free right now; `null` when busy. Never waits. */
  tryAcquire (id: string, options?: Pick<AcquireOptions, 'owner'>): Promise<SessionLease | null>
  /** Resolves once the backend is reachable (the plugin awaits it at start-up); optional. */
  ready? (): Promise<void>
  /** Releases resources the lock created (timers, connections it opened); held leases are released. */
  close? (): Promise<void>
}
