/**
 * Lua scripts of the Redis limit backend, registered once per client with `defineCommand`
 * (EVALSHA, with ioredis' EVAL fallback after a SCRIPT FLUSH or a restart).
 *
 * Both keys of one (tool, caller) share a hash tag (see `redis-backend.ts`), so the scripts run
 * unchanged on Redis Cluster. Time is the Redis server's (`TIME`), one clock for every instance;
 * scripts that read it and then write are replicated by their effects (Redis ≥ 5).
 *
 * The bucket is a GCRA token bucket: one string holding the theoretical arrival time (TAT, µs),
 * the moment the bucket is full again. A call is allowed when TAT + interval − now ≤ burst ×
 * interval; taking a token moves TAT on by one interval. The key expires at TAT (PX), when a
 * missing key and the stored one mean the same: a full bucket. Integer microseconds stay exact in
 * Lua's doubles (below 2^53 until the year 2255) and are written with `%.0f` (Lua's own number
 * formatting keeps 14 digits only).
 */

/**
 * What the limit backend calls on a Redis client (structural: an ioredis 5 or 6 client or
 * Cluster, whichever copy of ioredis made it; the plugin's `RedisClientLike` is one).
 */
export interface RedisLimitClient {
  /** ioredis' connection status (`'ready'` when connected, `'end'` once closed). */
  readonly status: string
  defineCommand (name: string, definition: { lua: string, numberOfKeys?: number, readOnly?: boolean }): void
  zrem (key: string, ...members: string[]): Promise<number>
  on (event: string, listener: (...args: any[]) => void): unknown
  off (event: string, listener: (...args: any[]) => void): unknown
  quit (): Promise<unknown>
  disconnect (): void
}

/** The scripts {@link defineLimitScripts} adds to a client. */
export interface LimitScripts {
  mcpLimitAcquire (bucket: string, leases: string, intervalUs: number, burst: number, concurrency: number,
    leaseMs: number, callId: string): Promise<[1] | [0, 'rate' | 'concurrency', number]>
  mcpLimitRenew (leases: string, callId: string, leaseMs: number): Promise<0 | 1>
}

/**
 * One check: refuses on an empty bucket or a full cap, else takes a token and a lease. Returns
 * {1} when allowed, {0, 'rate' | 'concurrency', retry after (ms)} when refused (nothing taken).
 *   KEYS[1] bucket: string, the theoretical arrival time (µs, server clock); absent = full
 *   KEYS[2] leases: sorted set, call id → lease expiry (µs, server clock)
 *   ARGV[1] interval between two tokens (µs; 0 = no rate limit)
 *   ARGV[2] burst: tokens of a full bucket
 *   ARGV[3] cap of calls in flight (0 = none: no lease is taken)
 *   ARGV[4] lease lifetime (ms)
 *   ARGV[5] call id (the lease's member)
 */
export const LIMIT_ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local cap = tonumber(ARGV[3])
local tat = now
local wait = 0
if interval > 0 then
  local stored = redis.call('GET', KEYS[1])
  if stored then tat = math.max(tonumber(stored), now) end
  wait = tat + interval - now - interval * tonumber(ARGV[2])
end
local busy = false
if cap > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  busy = redis.call('ZCARD', KEYS[2]) >= cap
end
if wait > 0 then return {0, 'rate', math.ceil(wait / 1000)} end
if busy then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, 'concurrency', math.ceil((tonumber(first[2]) - now) / 1000)}
end
if interval > 0 then
  tat = tat + interval
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
end
if cap > 0 then
  local lease = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[2], string.format('%.0f', now + lease * 1000), ARGV[5])
  redis.call('PEXPIRE', KEYS[2], lease)
end
return {1}
`

/**
 * Extends a lease that is still live; one that expired is removed, never revived (its slot may
 * have been given to another call). Every lease gets the same lifetime, so the set's own expiry
 * moved to a lifetime from now outlives all its members. Returns 1, or 0 when the lease is gone.
 *   KEYS[1] leases: sorted set, call id → lease expiry (µs, server clock)
 *   ARGV[1] call id
 *   ARGV[2] lease lifetime (ms)
 */
export const LIMIT_RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expires then return 0 end
if tonumber(expires) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], string.format('%.0f', now + lease * 1000), ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease)
return 1
`

/** Name → definition of every script; the names are prefixed to stay clear of the app's own. */
const SCRIPTS = {
  mcpLimitAcquire: { numberOfKeys: 2, lua: LIMIT_ACQUIRE },
  mcpLimitRenew: { numberOfKeys: 1, lua: LIMIT_RENEW }
} as const

/**
 * Registers the scripts on a client, once (a client shared with another backend keeps them).
 * Returns the same client, typed with its scripts.
 */
export function defineLimitScripts<C extends RedisLimitClient> (client: C): C & LimitScripts {
  const scripted = client as C & Partial<LimitScripts>
  if (typeof scripted.mcpLimitAcquire !== 'function') {
    for (const [name, definition] of Object.entries(SCRIPTS)) client.defineCommand(name, definition)
  }
  return client as C & LimitScripts
}
