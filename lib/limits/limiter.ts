/**
 * `ToolLimiter`: the rate and concurrency limits of tool calls, per tool and caller, over a
 * {@link LimitBackend}. `acquire()` runs before a tool's handler: it resolves a permit (released
 * when the handler is done) or throws a {@link ToolLimitError} (429, or 503 while the backend
 * fails and the tool's `onBackendError` is `'closed'`).
 *
 * - A call is counted against `<tool>|<subject>`: the principal's id, or the caller's address
 *   when anonymous (see `limitSubject`). Only registered tools reach the limiter, so unknown
 *   names create nothing.
 * - A permit with a concurrency cap holds a lease in the backend; one timer of the limiter renews
 *   every held lease each third of `leaseMs`, so a call may run longer than the lease while a
 *   crashed instance's calls give their slots back within `leaseMs`. A lease found gone (the
 *   backend lost it) is no longer renewed; the call goes on.
 * - Backend failures (Redis down, a check that timed out): the tool's `onBackendError` decides
 *   (`'open'`: the call runs unchecked, `'closed'`: 503). The first failure logs a warning, the
 *   first success after it an info line: one pair per outage. While failing, the backend is
 *   probed by at most one check per second; the others apply the policy at once.
 */
import { randomBytes } from 'node:crypto'
import type { LimitBackend } from './backend.js'
import { ToolLimitError } from './errors.js'
import { MemoryLimitBackend } from './memory-backend.js'
import { limitSubject, toolPolicy, type ResolvedToolLimits, type ToolLimit, type ToolPolicy } from './policy.js'
import { RedisLimitBackend } from './redis-backend.js'
import { PgLimitBackend } from './pg-backend.js'
import type { PgPoolLike } from '../postgres/pool.js'
import type { RedisLimitClient } from './redis-scripts.js'
import { settleWithin } from '../util/settle.js'

/** Where the limiter reports outages (a Fastify/pino logger fits). */
export interface LimiterLog {
  warn (obj: object, msg: string): void
  info (obj: object, msg: string): void
}

/** One tool call to check. */
export interface ToolCall {
  tool: string
  /** The authenticated principal, or null (then `ip` is the subject). */
  principal: { id: string } | null
  /** The caller's address (Fastify's `request.ip`, which honours `trustProxy`). */
  ip: string | undefined
  /** The tool definition's own limits, if it has some. */
  limits?: ToolLimit | false
}

/** What a call holds while it runs; `release()` when the handler is done (idempotent, never throws). */
export interface ToolPermit {
  release (): void
}

/** The permit of a call that holds nothing in the backend (no cap, or the backend failing open). */
const NO_PERMIT: ToolPermit = Object.freeze({ release: () => {} })

/** While the backend fails, at most one check per this many ms goes to it. */
const PROBE_INTERVAL = 1000

/** Policies cached per tool name at most (names come from the registry: a small set). */
const MAX_CACHED_POLICIES = 10_000

/** Options of {@link ToolLimiter}. */
export interface ToolLimiterOptions {
  /** The validated `limits` option (`resolveToolLimits`). */
  limits: ResolvedToolLimits
  backend: LimitBackend
  log: LimiterLog
  /** Whether `close()` closes the backend too. Default false. */
  ownsBackend?: boolean
}

class Permit implements ToolPermit {
  readonly key: string
  readonly callId: string
  readonly #limiter: ToolLimiter
  #released = false

  constructor (limiter: ToolLimiter, key: string, callId: string) {
    this.#limiter = limiter
    this.key = key
    this.callId = callId
  }

  release (): void {
    if (this.#released) return
    this.#released = true
    this.#limiter.dropPermit(this, true)
  }
}

/** Rate and concurrency limits of tool calls (see the module doc). */
export class ToolLimiter {
  readonly limits: ResolvedToolLimits
  readonly #backend: LimitBackend
  readonly #log: LimiterLog
  readonly #ownsBackend: boolean
  readonly #policies = new Map<string, { own: ToolLimit | false | undefined, policy: ToolPolicy | null }>()
  readonly #held = new Set<Permit>()
  readonly #instance = randomBytes(6).toString('base64url')
  #seq = 0
  #renewer: NodeJS.Timeout | undefined
  #down = false
  #nextProbe = 0

  constructor (options: ToolLimiterOptions) {
    this.limits = options.limits
    this.#backend = options.backend
    this.#log = options.log
    this.#ownsBackend = options.ownsBackend ?? false
  }

  /**
   * Resolves once the backend can answer (rejects after `timeout` ms when it cannot), so that the
   * first calls after start-up are checked rather than run under `onBackendError`.
   */
  async ready (timeout?: number): Promise<void> {
    await this.#backend.ready?.(timeout)
  }

  /** Calls of this process holding a lease right now. */
  get held (): number { return this.#held.size }

  /** The backend (the task slots of `lib/tasks/` live there too). */
  get backend (): LimitBackend { return this.#backend }

  /** Whether the backend is failing (between the warning and the recovery line). */
  get backendDown (): boolean { return this.#down }

  /**
   * The one key a caller is counted under, for every per-client bound (tool limits, task slots,
   * listen streams, sessions and handles): its principal, else its address — IPv6 grouped by
   * network of `ipv6PrefixLength` bits (see {@link limitSubject}).
   */
  clientKey (principal: { id: string } | null, ip: string | undefined): string {
    return limitSubject(principal, ip ?? 'unknown', this.limits.ipv6PrefixLength)
  }

  /** The policy of `tool` (with the definition's own limits `own`), null when unlimited. */
  policy (tool: string, own?: ToolLimit | false): ToolPolicy | null {
    const cached = this.#policies.get(tool)
    if (cached !== undefined && cached.own === own) return cached.policy
    if (this.#policies.size >= MAX_CACHED_POLICIES) this.#policies.clear()
    const policy = toolPolicy(this.limits, tool, own)
    this.#policies.set(tool, { own, policy })
    return policy
  }

  /**
   * Checks a call against its tool's limits and takes what it holds while it runs.
   * @throws {ToolLimitError} when a limit refuses it, or the backend fails with `'closed'`.
   */
  async acquire (call: ToolCall): Promise<ToolPermit> {
    const policy = this.policy(call.tool, call.limits)
    if (policy === null) return NO_PERMIT
    if (this.#down) {
      const now = performance.now()
      if (now < this.#nextProbe) return this.#failed(call.tool, policy, null)
      this.#nextProbe = now + PROBE_INTERVAL
    }
    const key = `${call.tool}|${limitSubject(call.principal, call.ip ?? 'unknown', this.limits.ipv6PrefixLength)}`
    const callId = `${this.#instance}.${(++this.#seq).toString(36)}`
    let decision
    try {
      decision = await this.#backend.acquire(key, policy.spec, callId)
    } catch (err) {
      return this.#failed(call.tool, policy, err)
    }
    if (this.#down) {
      this.#down = false
      this.#log.info({ tool: call.tool }, 'Tool limit backend answers again: tool calls are limited again')
    }
    if (!decision.ok) {
      const wait = decision.limit === 'concurrency' ? Math.min(decision.retryAfterMs, this.limits.busyRetryMs) : decision.retryAfterMs
      throw new ToolLimitError(call.tool, decision.limit, wait)
    }
    if (policy.spec.concurrency === 0) return NO_PERMIT
    const permit = new Permit(this, key, callId)
    this.#held.add(permit)
    this.#renewer ??= setInterval(() => { this.#renewAll() }, Math.max(10, Math.floor(this.limits.leaseMs / 3))).unref()
    return permit
  }

  /** The backend failed (`err`), or is known to be failing (`err` null): apply the tool's policy. */
  #failed (tool: string, policy: ToolPolicy, err: unknown): ToolPermit {
    if (err !== null) {
      this.#nextProbe = performance.now() + PROBE_INTERVAL
      if (!this.#down) {
        this.#down = true
        this.#log.warn({ err, tool, onBackendError: policy.onBackendError },
          'Tool limit backend failed: until it answers again, limited tool calls run unchecked ("open") or are refused with 503 ("closed")')
      }
    }
    if (policy.onBackendError === 'closed') throw new ToolLimitError(tool, 'unavailable', this.limits.busyRetryMs)
    return NO_PERMIT
  }

  /** @internal A permit is done (released, or its lease is gone): stop renewing it. */
  dropPermit (permit: Permit, release: boolean): void {
    this.#held.delete(permit)
    if (this.#held.size === 0 && this.#renewer !== undefined) {
      clearInterval(this.#renewer)
      this.#renewer = undefined
    }
    // A release that fails leaves the lease to expire after leaseMs.
    if (release) this.#backend.release(permit.key, permit.callId).catch(() => {})
  }

  #renewAll (): void {
    const leaseMs = this.limits.leaseMs
    for (const permit of this.#held) {
      this.#backend.renew(permit.key, permit.callId, leaseMs).then(
        (live) => { if (!live) this.dropPermit(permit, false) },
        () => {}) // transient: the next tick tries again; a lease that ran out meanwhile is gone
    }
  }

  /** Stops renewing and releases what this process holds (bounded); closes the backend if owned. */
  async close (): Promise<void> {
    const releases = [...this.#held].map(async p => await this.#backend.release(p.key, p.callId).catch(() => {}))
    this.#held.clear()
    clearInterval(this.#renewer)
    this.#renewer = undefined
    await settleWithin(Promise.all(releases), 1000, { keepAlive: false })
    if (this.#ownsBackend) await settleWithin(this.#backend.close?.() ?? Promise.resolve(), 2000, { keepAlive: false })
  }
}

/** What {@link buildToolLimiter} needs besides the option. */
export interface BuildToolLimiterOptions {
  /** The plugin's Redis client (its `redis` option, or the client made from its URL). */
  redis?: RedisLimitClient
  /** The plugin's `redis.prefix`; limit keys live under `<prefix>rl:`. */
  prefix?: string
  /** The plugin's PostgreSQL pool (its `postgres` option), and its table prefix. */
  postgres?: { pool: PgPoolLike, prefix: string }
  log: LimiterLog
}

/**
 * The limiter of the `limits` option: its `backend`, else a `RedisLimitBackend` on the plugin's
 * Redis client, a `PgLimitBackend` on its PostgreSQL pool, else a `MemoryLimitBackend`. `close()` closes only a backend made here.
 */
export function buildToolLimiter (limits: ResolvedToolLimits, options: BuildToolLimiterOptions): ToolLimiter {
  if (limits.backend !== undefined) return new ToolLimiter({ limits, backend: limits.backend, log: options.log })
  const backend = options.redis !== undefined
    ? new RedisLimitBackend({ redis: options.redis, prefix: `${options.prefix ?? 'mcp:'}rl:` })
    : options.postgres !== undefined
      ? new PgLimitBackend(options.postgres)
      : new MemoryLimitBackend()
  return new ToolLimiter({ limits, backend, log: options.log, ownsBackend: true })
}
