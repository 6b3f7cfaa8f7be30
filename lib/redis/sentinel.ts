/**
 * Redis behind Sentinel: the connection options of a client that asks the sentinels where the
 * primary is, and follows it when they promote a replica.
 *
 * ioredis does the asking (its `sentinels` + `name` options). What the plugin adds to a client it
 * makes: `failoverDetector` (the client listens for the sentinels' `+switch-master` and reconnects
 * at once, rather than when its socket to the old primary breaks), and a reconnection on a
 * `READONLY` error (a write that reached a primary demoted under it fails, and the client asks the
 * sentinels again). Every other client the plugin derives from it (the bus subscriber is a
 * `duplicate()`) inherits both.
 */

/** A Sentinel deployment: where the sentinels are and which master to follow, plus any ioredis option. */
export interface RedisSentinelConnection {
  /** The sentinels' addresses (any reachable one answers; ioredis tries them in turn). */
  readonly sentinels: ReadonlyArray<{ readonly host: string, readonly port: number }>
  /** The master name the sentinels monitor (`sentinel monitor <name> …`). */
  readonly name: string
  /** Other ioredis options (password, sentinelPassword, tls, db, …). */
  readonly [option: string]: unknown
}

/** Whether `value` is a {@link RedisSentinelConnection}. */
export function isSentinelConnection (value: unknown): value is RedisSentinelConnection {
  return typeof value === 'object' && value !== null && Array.isArray((value as { sentinels?: unknown }).sentinels) &&
    typeof (value as { name?: unknown }).name === 'string'
}

/** What a client the plugin makes adds to a Sentinel connection (see the module doc). */
export const SENTINEL_CLIENT_OPTIONS = {
  failoverDetector: true,
  reconnectOnError: (err: Error): 1 | false => err.message.startsWith('READONLY') ? 1 : false
} as const

/**
 * The sentinels of `host:port,host:port,…` (the demo's `MCP_REDIS_SENTINELS`).
 * @throws {RangeError} for an empty list or an entry that is not `host:port`.
 */
export function parseSentinels (list: string): Array<{ host: string, port: number }> {
  const out = list.split(',').map(s => s.trim()).filter(s => s !== '').map(entry => {
    const at = entry.lastIndexOf(':')
    const host = entry.slice(0, at).replace(/^\[(.*)\]$/, '$1')
    const port = Number(entry.slice(at + 1))
    if (at <= 0 || host === '' || !Number.isInteger(port) || port < 1 || port > 65535) {
      throw new RangeError(`sentinel address must be host:port, got ${JSON.stringify(entry.slice(0, 100))}`)
    }
    return { host, port }
  })
  if (out.length === 0) throw new RangeError('at least one sentinel address (host:port) is needed')
  return out
}
