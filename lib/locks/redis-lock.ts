/**
 * `RedisSessionLock`: the per-session lock of many machines, a Redis lease.
 *
 * - Acquire: `SET <prefix>{<sid>}:lock <token> NX PX <ttl>` with a fresh random 128-bit token per
 *   acquisition. In front of it, an in-process FIFO, so only one request per process contends in
 *   Redis; while the lease is busy, polls with exponential backoff and full jitter (cap 50 ms).
 * - Release: compare-and-delete (a Lua script), so a holder whose lease ran out never frees the
 *   next holder's lease.
 * - Renewal: every ttl/3, compare-and-PEXPIRE; it never re-creates a lease that expired. "Not
 *   ours any more" aborts `lease.signal` at once; transport errors are retried until the local
 *   deadline (when the lease would have expired in Redis, measured from the last renewal sent),
 *   then the signal aborts.
 * - Fencing: `lease.fence` (`{key, token}`) lets the Redis store refuse the save of a holder whose
 *   lease was lost once someone else took it or wrote the session.
 *
 * Failing fast: a lock must answer "Redis is down" at once, not after queueing and retrying for
 * seconds. Give it a dedicated client with {@link LOCK_CLIENT_OPTIONS} (or pass a URL/options and
 * the lock creates such a client itself, and closes it on `close()`); an injected client is never
 * closed. Its backend errors reject `acquire()` with a `SessionLockError` (cause kept).
 */
import { newLeaseToken } from './lease-token.js'
import { createLockClient, isRedisClient } from '../redis/client.js'
import { DEFAULT_KEY_PREFIX, assertKeyPrefix, lockKey } from '../redis/keys.js'
import { confirmed, replicaAckFor, replicaAckOf, requireReplicaAck, sendWait } from '../redis/replica-ack.js'
import { defineScripts, type RedisClient, type RedisClientLike, type RedisConnectionOptions } from '../redis/scripts.js'
import { BackendSessionLock, leaseEngine } from './backend-lock.js'
import { LEASE_BUSY, adoptAny, leaseTtl, type BackendLeases, type LeaseBackend } from './backend-leases.js'
import { SessionLockError } from './errors.js'
import { RedisLease } from './redis-lease.js'
import { DEFAULT_LOCK_TIMEOUT, checkTimeout } from './wait.js'
import { roundTrip } from '../telemetry/index.js'
import { settleWithin } from '../util/settle.js'

export { LOCK_CLIENT_OPTIONS, createLockClient } from '../redis/client.js'

/** Options of {@link RedisSessionLock}. */
export interface RedisSessionLockOptions {
  /**
   * An ioredis (5 or 6) client (standalone, Sentinel or Cluster), never closed by the lock; or a
   * URL or ioredis options, from which the lock creates a fail-fast client of the app's ioredis
   * that `close()` closes.
   * An injected client should use {@link LOCK_CLIENT_OPTIONS}, or acquire may hang while Redis is
   * down instead of failing.
   */
  redis: RedisClientLike | string | RedisConnectionOptions
  /** Default acquire timeout in milliseconds (default 30,000; `0` tries once). Must be >= 0. */
  timeout?: number
  /** Lease time-to-live in milliseconds (default 30,000), renewed every ttl/3 while held. */
  ttl?: number
  /** Key prefix (default `'mcp:'`); the lease is `<prefix>{<sid>}:lock`. */
  prefix?: string
  /**
   * Replicas that must acknowledge a lease (taken or renewed) and, on the store + lock fast path,
   * each save, before it counts (Redis `WAIT`; default 0: none). A lease too few replicas hold
   * is released and `acquire()` rejects with a `SessionLockError` whose cause is an
   * `UnconfirmedLeaseError` (nothing ran under it); a renewal too few hold counts as a failed
   * one. Not on a Cluster. A `RedisSessionStore` used with this lock must have the same setting
   * (the plugin refuses to start otherwise: the store's saves run on this lock's client).
   */
  waitReplicas?: number
  /** How long each of those waits for the replicas, in ms (default 200). */
  waitTimeoutMs?: number
}

/** How long close() waits for the client's QUIT (ms). */
const CLOSE_TIMEOUT = 1000

/** The Redis commands of a lock's leases, on its client. */
function redisBackend (client: RedisClient, prefix: string): LeaseBackend<RedisClient> {
  return {
    handle: client,
    // One connection: Redis runs a release and the next holder's take in the order sent.
    ordered: true,
    keyOf: id => lockKey(prefix, id),
    newToken: newLeaseToken,
    newLease: (home, id, key, token, slot, passes, sentAt, read, readBy) => new RedisLease(id, home, key, token, slot, passes, sentAt, read, readBy),
    release: (key, token) => client.mcpLockRelease(key, token)
  }
}

/** Session lock backed by a Redis lease. */
export class RedisSessionLock extends BackendSessionLock<RedisClient> {
  /** Key prefix. */
  readonly prefix: string
  readonly #client: RedisClient
  readonly #ownsClient: boolean

  /**
   * @throws {RangeError} for a negative `timeout` or a `ttl` that is not positive.
   */
  constructor (options: RedisSessionLockOptions) {
    const timeout = checkTimeout(options.timeout ?? DEFAULT_LOCK_TIMEOUT)
    const ttl = leaseTtl(options.ttl)
    const prefix = options.prefix ?? DEFAULT_KEY_PREFIX
    assertKeyPrefix(prefix)
    // A client marked already (a store's, with its waitReplicas) lends its numbers: the default
    // lock on the store's client confirms its leases as the store confirms its writes.
    const ack = replicaAckOf(options) ?? (isRedisClient(options.redis) ? replicaAckFor(options.redis) : undefined)
    const owned = !isRedisClient(options.redis)
    const client = defineScripts(isRedisClient(options.redis)
      ? requireReplicaAck(options.redis, ack)
      : createLockClient(options.redis, options))
    // Without a listener ioredis reports every failed reconnect on stderr; acquire() already
    // reports the failures that matter to the request that hit them.
    if (owned) client.on('error', () => {})
    super(timeout, ttl, redisBackend(client, prefix), async (client, key, token) => {
      roundTrip()
      const set = client.set(key, token, 'PX', ttl, 'NX')
      if (ack === undefined) return await set === 'OK' ? undefined : LEASE_BUSY
      // WAIT right behind the SET, on the same connection: one round trip for both.
      const acknowledged = sendWait(client, ack)
      // Handled now: it may time out before the SET's reply comes, and is awaited after it.
      acknowledged.catch(() => {})
      const reply = await set
      return confirmed(reply, await acknowledged, ack, r => r === 'OK', true) === 'OK' ? undefined : LEASE_BUSY
    }, adoptAny) // a lease passed on is as good as a fresh one here
    this.prefix = prefix
    this.#client = client
    this.#ownsClient = owned
  }

  /** The ioredis client this lock uses (its own fail-fast one, or the injected one). */
  get client (): RedisClient {
    return this.#client
  }

  /**
   * Resolves once the client is connected (at most `timeout` ms): a fail-fast client refuses
   * commands until then, so await this before serving.
   */
  async ready (timeout = 5000): Promise<void> {
    const client = this.#client
    if (client.status === 'ready') return
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { done(); reject(new SessionLockError('Redis did not become ready in time')) }, timeout)
      const onReady = (): void => { done(); resolve() }
      const onEnd = (): void => { done(); reject(new SessionLockError('The Redis connection was closed')) }
      const done = (): void => {
        clearTimeout(timer)
        client.off('ready', onReady)
        client.off('end', onEnd)
      }
      client.on('ready', onReady)
      client.on('end', onEnd)
    })
  }

  /** Closes the client if the lock created it (its leases were released before: see `close()`). */
  protected async closeBackend (): Promise<void> {
    if (!this.#ownsClient || this.#client.status === 'end') return
    const client = this.#client
    const ended = new Promise(resolve => client.once('end', resolve))
    await settleWithin(client.quit(), CLOSE_TIMEOUT, { keepAlive: false })
    client.disconnect() // after a QUIT that timed out (hung server), or while reconnecting
    await settleWithin(ended, CLOSE_TIMEOUT, { keepAlive: false })
  }
}

/**
 * @internal The lease machinery of `lock`, for the store + lock fast path that takes and releases
 * its leases in its own scripts (`state/pairings/redis-pairing.ts`).
 */
export function redisLeaseEngine (lock: RedisSessionLock): BackendLeases<RedisClient> {
  return leaseEngine(lock)
}
