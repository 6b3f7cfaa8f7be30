/**
 * The ioredis clients the plugin makes: how a client that must fail fast is configured (and
 * reports its connection errors instead of letting ioredis print them), and how any client is
 * told apart from connection options. The app's ioredis is loaded (`ioredis-module.ts`) on the
 * first client the plugin makes from a URL or options; a client the app passes in is used as it
 * is, whichever ioredis version made it.
 */
import type { RedisOptions } from 'ioredis'
import { coalesceWrites } from './coalesce.js'
import { loadIoredis } from './ioredis-module.js'
import { replicaAckOf, requireReplicaAck } from './replica-ack.js'
import type { RedisClientLike, RedisConnectionOptions } from './scripts.js'
import { SENTINEL_CLIENT_OPTIONS, isSentinelConnection, type RedisSentinelConnection } from './sentinel.js' // eslint-disable-line @typescript-eslint/no-unused-vars -- named by the {@link}s below
import { redisUrlProblem } from '../util/url-shape.js'

/**
 * ioredis options of a lock client that fails fast: no offline queue (a command sent while
 * disconnected fails at once), no per-command retries, a 500 ms command timeout (a hung server),
 * and reconnection within a second once Redis is back. No auto-pipelining: its Pipeline object per
 * batch cost more than the commands at low concurrency; a client the plugin makes coalesces the
 * writes of a turn of the event loop itself instead (`coalesce.ts`).
 */
export const LOCK_CLIENT_OPTIONS = {
  enableAutoPipelining: false,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: 500,
  retryStrategy: (times: number): number => Math.min(50 * times, 1000)
} as const satisfies RedisOptions

/**
 * Creates a client of the app's ioredis from a URL or options, with `overrides` applied over them
 * (and, for a Sentinel connection, {@link SENTINEL_CLIENT_OPTIONS} under the app's own options).
 */
function newRedisClient (connection: string | RedisConnectionOptions = {}, overrides: Record<string, unknown> = {}): RedisClientLike {
  const { Redis } = loadIoredis()
  if (typeof connection === 'string') {
    const problem = redisUrlProblem(connection)
    if (problem !== null) throw new TypeError(`Redis URL ${problem}`)
    return new Redis(connection, { ...overrides }) as RedisClientLike
  }
  if (!isSentinelConnection(connection)) return new Redis({ ...connection, ...overrides }) as RedisClientLike
  const client = new Redis({ ...SENTINEL_CLIENT_OPTIONS, ...connection, ...overrides }) as RedisClientLike
  followForever(client)
  return client
}

/** How long a Sentinel client that ioredis gave up on waits before it asks the sentinels again (ms). */
const REVIVE_DELAY = 1000

/**
 * Keeps a Sentinel client following the primary until its owner closes it. ioredis ends a
 * Sentinel client for good when one connection attempt fails as a whole (every sentinel
 * unreachable, none naming a reachable primary, or the attempt cut by ioredis' own
 * `disconnect(true)`, as in the seconds of a failover): it is connected again after a second,
 * unless its owner called `quit()` or `disconnect()`. ioredis itself calls `disconnect(true)` to
 * reconnect (a READONLY reply, a node whose role is not the primary's, a fatal reply error): that
 * is not a close. When it does end, the failover detector's connections to the sentinels go with
 * it (ioredis' QUIT leaves them reconnecting forever, keeping the process alive).
 */
function followForever (client: RedisClientLike): void {
  let closed = false
  const target = client as RedisClientLike & { connect?: () => Promise<void>, connector?: { disconnect?: () => void } }
  const quit = client.quit.bind(client)
  const disconnect = client.disconnect.bind(client)
  target.quit = async () => { closed = true; return await quit() }
  target.disconnect = (reconnect?: boolean) => {
    if (reconnect !== true) closed = true
    disconnect(reconnect)
  }
  client.on('end', () => {
    if (closed || typeof target.connect !== 'function') {
      target.connector?.disconnect?.()
      return
    }
    setTimeout(() => { if (!closed && client.status === 'end') target.connect?.().catch(() => {}) }, REVIVE_DELAY).unref()
  })
}

/** Replica acknowledgement of the writes of a client the plugin makes (see `replica-ack.ts`). */
export interface ReplicaAckOptions {
  /**
   * Replicas that must acknowledge each write of the plugin's scripts (a session, handle or task
   * written, a lease taken or renewed) before it is reported as kept. Default 0: none (Redis'
   * own asynchronous replication).
   */
  waitReplicas?: number
  /** How long each write waits for them, in ms (default 200). Commands then time out after it plus 500 ms. */
  waitTimeoutMs?: number
}

/**
 * Creates a fail-fast lock client (see {@link LOCK_CLIENT_OPTIONS}) of the app's ioredis from a URL
 * or options (a {@link RedisSentinelConnection} included); the commands it sends in one turn of the
 * event loop leave in one socket write. With `waitReplicas`, its write scripts wait for that many
 * replicas, and its command timeout covers the wait.
 * @throws {RangeError} for bad `waitReplicas` / `waitTimeoutMs`.
 */
export function createLockClient (connection: string | RedisConnectionOptions = {}, options: ReplicaAckOptions = {}): RedisClientLike {
  const ack = replicaAckOf(options)
  const overrides = ack === undefined ? LOCK_CLIENT_OPTIONS : { ...LOCK_CLIENT_OPTIONS, commandTimeout: LOCK_CLIENT_OPTIONS.commandTimeout + ack.timeoutMs }
  return requireReplicaAck(coalesceWrites(newRedisClient(connection, overrides)), ack)
}

/** Where {@link createRedisClient} reports connection errors (a Fastify/pino logger fits). */
export interface RedisClientLogger {
  warn (obj: object, msg: string): void
  info? (obj: object, msg: string): void
  debug? (obj: object, msg: string): void
}

/** Options of {@link createRedisClient}. */
export interface CreateRedisClientOptions extends ReplicaAckOptions {
  /**
   * Where connection errors go: the first error of an outage at warn level, the retries of the
   * same outage at debug, and the reconnection at info. Without it, errors are not printed (the
   * requests they fail are answered 503 and logged by the plugin).
   */
  log?: RedisClientLogger
}

/**
 * Creates an ioredis client (of the app's ioredis) for the session store, the lock or the `redis`
 * option that fails fast while Redis is down ({@link LOCK_CLIENT_OPTIONS}: a request then gets a
 * 503 at once instead of waiting for ioredis' offline queue and retries, about 73 s with its
 * defaults), and has an `'error'` listener (without one ioredis prints "[ioredis] Unhandled error
 * event" on stderr for every failed reconnect). The caller owns the client: `quit()` it when done.
 * @param connection a `redis://` / `rediss://` URL, ioredis options (fail-fast settings win), or a
 *   {@link RedisSentinelConnection} (`{ sentinels, name, …ioredis options }`): the client then follows
 *   the primary the sentinels name, through every failover.
 */
export function createRedisClient (connection: string | RedisConnectionOptions = {}, options: CreateRedisClientOptions = {}): RedisClientLike {
  const client = createLockClient(connection, options)
  const log = options.log
  let down = false
  client.on('error', (err: Error) => {
    if (log === undefined) return
    if (!down) {
      down = true
      log.warn({ err }, 'redis connection error')
    } else {
      log.debug?.({ err }, 'redis connection error (still down)')
    }
  })
  client.on('ready', () => {
    if (!down) return
    down = false
    log?.info?.({}, 'redis connection restored')
  })
  return client
}

/** Whether `value` is a Redis client (standalone, Sentinel or Cluster) rather than options or a URL. */
export function isRedisClient<T> (value: T): value is Extract<T, RedisClientLike> {
  return typeof value === 'object' && value !== null &&
    typeof (value as Partial<RedisClientLike>).defineCommand === 'function' && typeof (value as Partial<RedisClientLike>).set === 'function'
}
