/**
 * The ioredis clients the plugin makes: how a client that must fail fast is configured, and how
 * any client is told apart from connection options.
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

/** Whether `value` is an ioredis client (standalone, Sentinel or Cluster) rather than options or a URL. */
export function isRedisClient (value: unknown): value is RedisClient {
  return typeof value === 'object' && value !== null &&
    typeof (value as RedisClient).defineCommand === 'function' && typeof (value as RedisClient).set === 'function'
}
