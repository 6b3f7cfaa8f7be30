/**
 * `RedisLimitBackend`: buckets and leases of tool calls in Redis, shared by every instance. One
 * check is one script (`mcpLimitAcquire`: bucket and cap together, one round trip); a renewal is
 * one script; a release is one `ZREM`.
 *
 * Keys, per (tool, caller) key `k`, both under the hash tag `{k}` (one Cluster slot):
 * - `<prefix>{k}:b` the bucket (a string; expires when the bucket is full again),
 * - `<prefix>{k}:c` the leases (a sorted set; expires a lease lifetime after its newest lease,
 *   and Redis deletes it when its last lease is released).
 * Nothing is kept without an expiry, so a flood of distinct callers leaves no keys behind once
 * their buckets are full again.
 *
 * Failing fast: a check that takes longer than `timeout` rejects (the limiter then applies its
 * `onBackendError`); a lease it may still have taken is released when the late answer arrives.
 * Pass a URL or options and the backend creates a fail-fast client (no offline queue, see
 * `LOCK_CLIENT_OPTIONS`) that `close()` closes; an injected client is never closed.
 */
import { createLockClient } from '../redis/client.js'
import { DEFAULT_KEY_PREFIX, assertKeyPrefix } from '../redis/keys.js'
import type { RedisConnectionOptions } from '../redis/scripts.js'
import { ALLOWED, type LimitBackend, type LimitDecision, type LimitSpec } from './backend.js'
import { defineLimitScripts, type LimitScripts, type RedisLimitClient } from './redis-scripts.js'
import { settleWithin } from '../util/settle.js'
import { LimitBackendTimeoutError, bounded } from './bounded.js'

/** Options of {@link RedisLimitBackend}. */
export interface RedisLimitBackendOptions {
  /**
   * An ioredis (5 or 6) client (standalone, Sentinel or Cluster), never closed by the backend; or
   * a URL or ioredis options, from which it creates a fail-fast client (of the app's ioredis) that
   * `close()` closes.
   */
  redis: RedisLimitClient | string | RedisConnectionOptions
  /** Key prefix (default `'mcp:'`); no braces. */
  prefix?: string
  /** Milliseconds a check may take before it counts as a backend failure (default 1,000; 0 = unbounded). */
  timeout?: number
}

/** The bucket and lease keys of a (tool, caller) key (which must not start with `}`). */
export function limitKeys (prefix: string, key: string): { bucket: string, leases: string } {
  return { bucket: `${prefix}{${key}}:b`, leases: `${prefix}{${key}}:c` }
}

export { LimitBackendTimeoutError }

const CLOSE_TIMEOUT = 1000

/** Whether the `redis` option is a client (rather than a URL or connection options). */
function isLimitClient (value: RedisLimitBackendOptions['redis']): value is RedisLimitClient {
  return typeof value === 'object' && value !== null &&
    typeof (value as Partial<RedisLimitClient>).defineCommand === 'function' && typeof (value as Partial<RedisLimitClient>).zrem === 'function'
}

/** Buckets and leases in Redis (see the module doc). */
export class RedisLimitBackend implements LimitBackend {
  readonly prefix: string
  readonly timeout: number
  readonly #client: RedisLimitClient & LimitScripts
  readonly #ownsClient: boolean

  /** @throws {TypeError} for a prefix with braces; {RangeError} for a negative timeout. */
  constructor (options: RedisLimitBackendOptions) {
    const prefix = options.prefix ?? DEFAULT_KEY_PREFIX
    assertKeyPrefix(prefix)
    this.prefix = prefix
    const timeout = options.timeout ?? 1000
    if (!Number.isInteger(timeout) || timeout < 0) throw new RangeError('timeout must be an integer greater than or equal to 0.')
    this.timeout = timeout
    let client: RedisLimitClient
    if (isLimitClient(options.redis)) {
      client = options.redis
      this.#ownsClient = false
    } else {
      client = createLockClient(options.redis)
      this.#ownsClient = true
      // The limiter reports outages (once each); ioredis would print every failed reconnect.
      client.on('error', () => {})
    }
    this.#client = defineLimitScripts(client)
  }

  /** The ioredis client in use. */
  get client (): RedisLimitClient { return this.#client }

  async acquire (key: string, spec: LimitSpec, callId: string): Promise<LimitDecision> {
    const { bucket, leases } = limitKeys(this.prefix, key)
    const work = this.#client.mcpLimitAcquire(bucket, leases, spec.intervalUs, spec.burst, spec.concurrency, spec.leaseMs, callId)
    const reply = await bounded(work, this.timeout, (late) => {
      // Answered after we gave up on it: a lease it took is nobody's.
      if (late[0] === 1 && spec.concurrency > 0) this.#client.zrem(leases, callId).catch(() => {})
    })
    if (reply[0] === 1) return ALLOWED
    return { ok: false, limit: reply[1], retryAfterMs: Number(reply[2]) }
  }

  async renew (key: string, callId: string, leaseMs: number): Promise<boolean> {
    return await this.#client.mcpLimitRenew(limitKeys(this.prefix, key).leases, callId, leaseMs) === 1
  }

  async release (key: string, callId: string): Promise<void> {
    await this.#client.zrem(limitKeys(this.prefix, key).leases, callId)
  }

  /** Resolves once the client is connected (at most `timeout` ms); rejects otherwise. */
  async ready (timeout = 5000): Promise<void> {
    const client = this.#client
    if (client.status === 'ready') return
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { done(); reject(new Error('Redis did not become ready in time')) }, timeout)
      const onReady = (): void => { done(); resolve() }
      const done = (): void => { clearTimeout(timer); client.off('ready', onReady) }
      client.on('ready', onReady)
    })
  }

  /** Closes the client if the backend created it. Bounded; never throws. */
  async close (): Promise<void> {
    if (!this.#ownsClient || this.#client.status === 'end') return
    const client = this.#client
    await settleWithin(client.quit(), CLOSE_TIMEOUT, { keepAlive: false })
    client.disconnect()
  }
}
