/**
 * The ioredis clients the plugin makes: how a client that must fail fast is configured (and
 * reports its connection errors instead of letting ioredis print them), and how any client is told
 * apart from connection options.
 */
import { Redis, type RedisOptions } from 'ioredis'
import type { RedisClient } from './scripts.js'

/**
 * ioredis options of a lock client that fails fast: no offline queue (a command sent while
 * disconnected fails at once), no per-command retries, a 500 ms command timeout (a hung server),
 * and reconnection within a second once Redis is back. Commands issued in the same tick go out in
 * one write (auto-pipelining): under load each request's two scripts would otherwise cost a
 * socket write each, which was the largest single cost of a locked request.
 */
export const LOCK_CLIENT_OPTIONS = {
  enableAutoPipelining: true,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: 500,
  retryStrategy: (times: number): number => Math.min(50 * times, 1000)
} as const satisfies RedisOptions

/** Creates a fail-fast lock client (see {@link LOCK_CLIENT_OPTIONS}) from a URL or options. */
export function createLockClient (connection: string | RedisOptions = {}): Redis {
  return typeof connection === 'string'
    ? new Redis(connection, { ...LOCK_CLIENT_OPTIONS })
    : new Redis({ ...connection, ...LOCK_CLIENT_OPTIONS })
}

/** Where {@link createRedisClient} reports connection errors (a Fastify/pino logger fits). */
export interface RedisClientLogger {
  warn (obj: object, msg: string): void
  info? (obj: object, msg: string): void
  debug? (obj: object, msg: string): void
}

/** Options of {@link createRedisClient}. */
export interface CreateRedisClientOptions {
  /**
   * Where connection errors go: the first error of an outage at warn level, the retries of the
   * same outage at debug, and the reconnection at info. Without it, errors are not printed (the
   * requests they fail are answered 503 and logged by the plugin).
   */
  log?: RedisClientLogger
}

/**
 * Creates an ioredis client for the session store, the lock or the `redis` option that fails fast
 * while Redis is down ({@link LOCK_CLIENT_OPTIONS}: a request then gets a 503 at once instead of
 * waiting for ioredis' offline queue and retries, about 73 s with its defaults), and has an
 * `'error'` listener (without one ioredis prints "[ioredis] Unhandled error event" on stderr for
 * every failed reconnect). The caller owns the client: `quit()` it when done.
 * @param connection a `redis://` / `rediss://` URL, or ioredis options (fail-fast settings win)
 */
export function createRedisClient (connection: string | RedisOptions = {}, options: CreateRedisClientOptions = {}): Redis {
  const client = createLockClient(connection)
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

/** Whether `value` is an ioredis client (standalone, Sentinel or Cluster) rather than options or a URL. */
export function isRedisClient (value: unknown): value is RedisClient {
  return typeof value === 'object' && value !== null &&
    typeof (value as RedisClient).defineCommand === 'function' && typeof (value as RedisClient).set === 'function'
}
