/**
 * Building and closing what the plugin owns. What the options name (a store, a lock, a bus, an
 * event log, an ioredis client) belongs to the caller and is never closed here; what the plugin
 * makes (the default memory store, the default lock, a Redis client from a URL, the bus and event log over it) it
 * closes on `app.close()`, each step bounded and never throwing.
 *
 * With the `postgres` option everything the options do not name is built on one pool: the store,
 * the lock (a lease row; the store and the lock then take and read, and save and release, in one
 * call each), the bus, the event log (its writes checked against the session's row) and the
 * limits.
 */
import type { FastifyBaseLogger } from 'fastify'
import { MemoryBus, type Bus } from './bus/bus.js'
import { MemoryEventLog, type EventLog } from './bus/event-log.js'
import { RedisBus } from './bus/redis-bus.js'
import { RedisEventLog } from './bus/redis-event-log.js'
import { buildToolLimiter, type ToolLimiter } from './limits/limiter.js'
import { resolveToolLimits } from './limits/policy.js'
import { RedisSessionLock } from './locks/redis-lock.js'
import type { SessionLock } from './locks/session-lock.js'
import type { ResolvedBackends } from './options.js'
import { createRedisClient } from './redis/client.js'
import { DEFAULT_KEY_PREFIX, sessionKey } from './redis/keys.js'
import { replicaAckFor, type ReplicaAck } from './redis/replica-ack.js'
import type { RedisClientLike } from './redis/scripts.js'
import { isSentinelConnection } from './redis/sentinel.js'
import { MemorySessionStore } from './sessions/memory-store.js'
import { RedisSessionStore } from './sessions/redis-store.js'
import type { SessionStore } from './sessions/session-store.js'
import { settleWithin } from './util/settle.js'
import { PgBus } from './bus/pg-bus.js'
import { PgEventLog } from './bus/pg-event-log.js'
import { createPgPool, type PgPoolLike } from './postgres/pool.js'
import { PgSessionStore } from './sessions/pg-store.js'
import { matchingLock } from './state/pairings/matching-lock.js'
import { FST_ERR_MCP_INVALID_OPTION } from './errors.js'
import { postgresProbe, redisProbe, type EngineProbe } from './engine-probe.js'

/** How long `close()` waits for the stores and the bus, and for the Redis client's QUIT (ms). */
const CLOSE_TIMEOUT = 5000
const QUIT_TIMEOUT = 1000

/** The limits without a `limits` option: none but those of the definitions. */
const NO_LIMITS = resolveToolLimits({})

/** The plugin's backends, ready to use. */
export interface Backends {
  store: SessionStore
  lock: SessionLock | null
  bus: Bus
  eventLog: EventLog
  /**
   * The tool call limits: the `limits` option's, and those of tool definitions (which apply
   * without the option too).
   */
  limiter: ToolLimiter
  /** The shared engine (`redis` or `postgres`), probed once at start-up; `null` without one. */
  engine: EngineProbe | null
  /** Closes what the plugin made (see the module doc). Bounded; never throws. */
  close: () => Promise<void>
}

/** Makes the backends the options do not name. */
export function buildBackends (b: ResolvedBackends, log: FastifyBaseLogger): Backends {
  if (b.postgres !== undefined) return buildPgBackends(b, b.postgres.pool, b.postgres.prefix, log)
  // The store and its lock first: a lock that cannot be made fails the registration before
  // anything needing a close exists.
  const store = b.store ?? new MemorySessionStore()
  checkReplicaAcks(store, b.lock)
  const ownLock = b.lock === undefined ? defaultLock(store, log) : undefined
  const lock = b.lock === false ? null : (b.lock ?? ownLock ?? null)
  // `redis` alone shares the bus, the event log and the limits; sessions, state handles and tasks
  // would stay in this process's memory, which another instance behind the balancer never sees.
  if (b.store === undefined && b.redis !== undefined) log.warn(MEMORY_STATE_WARNING)
  // A URL makes a client we own; it fails fast while Redis is down (the request gets a 503 at
  // once) rather than queueing commands. It is a client of the app's ioredis (an optional peer
  // dependency, loaded only when the plugin makes a client).
  // Sentinel options make one too, which follows the promoted primary (`redis/sentinel.ts`).
  const connection = b.redis?.client
  const ownRedis = typeof connection === 'string' || isSentinelConnection(connection) ? createRedisClient(connection, { log }) : undefined
  const redis: RedisClientLike | undefined = ownRedis ?? (typeof connection === 'object' ? connection as RedisClientLike : undefined)
  const prefix = b.redis?.prefix ?? DEFAULT_KEY_PREFIX
  const bus = b.bus ?? (redis !== undefined ? new RedisBus({ redis, prefix, log }) : new MemoryBus())
  // With the sessions in Redis under the same prefix, a write to the log checks the session's hash
  // (same hash tag, same slot): an ended session's streams are never created again, and no mark of
  // the end is kept. (The store and `redis` must then be the same Redis, as for the bus.)
  const sessionKeys = store instanceof RedisSessionStore && store.prefix === prefix ? (sid: string) => sessionKey(prefix, sid) : undefined
  const bounds = { maxEvents: b.eventLog.maxEvents, ttl: b.eventLog.ttlMs }
  const eventLog = b.eventLog.store ??
    (redis !== undefined ? new RedisEventLog({ redis, prefix, sessionKey: sessionKeys, ...bounds }) : new MemoryEventLog(bounds))
  // Limits on Redis share the plugin's client (keys under `<redis.prefix>rl:`), so every instance
  // counts the same calls; without Redis, in this process's memory. A `limits.backend` of the
  // app's own is never closed here. Built without the option too: a tool definition's own
  // `limits` must not be ignored silently (the backend is only used by limited tools).
  const limiter = buildToolLimiter(b.limits ?? NO_LIMITS, { redis, prefix, log })
  const engine = redis === undefined || connection === undefined ? null : redisProbe(connection, redis)
  return assembled(b, { store, lock, ownLock, bus, eventLog, limiter, engine }, async () => {
    if (ownRedis === undefined) return
    await settleWithin(ownRedis.quit(), QUIT_TIMEOUT, { keepAlive: false })
    ownRedis.disconnect()
  })
}

/** The backends on PostgreSQL (see the module doc). */
function buildPgBackends (b: ResolvedBackends, postgres: PgPoolLike | string, prefix: string, log: FastifyBaseLogger): Backends {
  const ownPool = typeof postgres === 'string' ? createPgPool(postgres) : undefined
  const pool = ownPool ?? (postgres as PgPoolLike)
  const store = b.store ?? new PgSessionStore({ pool, prefix })
  checkReplicaAcks(store, b.lock)
  // The store's lock unless one is named: a PgSessionStore's is a lease row on its pool.
  const ownLock = b.lock === undefined ? defaultLock(store, log) : undefined
  const lock = b.lock === false ? null : (b.lock ?? ownLock ?? null)
  const bus = b.bus ?? new PgBus({ pool, prefix, log })
  // With the sessions in this database under the same prefix, a write to the log checks the
  // session's row: an ended session's streams are never created again, and no mark is kept.
  const guardByStore = store instanceof PgSessionStore && store.pool === pool && store.prefix === prefix
  const eventLog = b.eventLog.store ?? new PgEventLog({ pool, prefix, guardByStore, maxEvents: b.eventLog.maxEvents, ttl: b.eventLog.ttlMs })
  const limiter = buildToolLimiter(b.limits ?? NO_LIMITS, { postgres: { pool, prefix }, log })
  return assembled(b, { store, lock, ownLock, bus, eventLog, limiter, engine: postgresProbe(postgres, pool) }, async () => {
    if (ownPool !== undefined) await settleWithin(ownPool.end(), QUIT_TIMEOUT, { keepAlive: false })
  })
}

/**
 * The backends and their `close()`: what the plugin made is closed (the limiter first: it releases
 * the leases it holds, on the connection `endConnection` ends last); what the options named is not.
 */
function assembled (b: ResolvedBackends, parts: Omit<Backends, 'close'> & { ownLock: SessionLock | undefined },
  endConnection: () => Promise<void>): Backends {
  const { ownLock, ...backends } = parts
  return {
    ...backends,
    close: async () => {
      const steps: Array<Promise<unknown> | undefined> = [parts.limiter.close()]
      if (b.store === undefined) steps.push(parts.store.close?.())
      if (ownLock !== undefined) steps.push(ownLock.close?.())
      if (b.bus === undefined) steps.push(parts.bus.close())
      await settleWithin(Promise.allSettled(steps), CLOSE_TIMEOUT, { keepAlive: false })
      await endConnection()
    }
  }
}

/** Logged at start-up when `redis` is given and the sessions' store is the default memory store. */
export const MEMORY_STATE_WARNING = 'fastify-mcp-http: the redis option shares the message bus, the event log and the tool limits, ' +
  'but sessions, state handles and tasks stay in this process\'s memory (no sessions.store): another instance will not find them. ' +
  'Give sessions.store a RedisSessionStore on the same Redis to share them.'

/**
 * Refuses a `RedisSessionStore` and an explicit `RedisSessionLock` whose replica acknowledgement
 * (`waitReplicas`, `waitTimeoutMs`) differs. The two run as one pairing whose save script runs on
 * the lock's client: a store that waits for replicas with a lock that does not would answer its
 * saves as kept unacknowledged, and the reverse would confirm saves while the store's creates go
 * unconfirmed. Refused rather than reconciled: a client's scripts are set up once with its own
 * setting, and which of the two the app meant cannot be guessed.
 */
function checkReplicaAcks (store: SessionStore, lock: SessionLock | false | undefined): void {
  if (!(store instanceof RedisSessionStore) || !(lock instanceof RedisSessionLock)) return
  const a = replicaAckFor(store.client)
  const b = replicaAckFor(lock.client)
  if (a?.replicas === b?.replicas && a?.timeoutMs === b?.timeoutMs) return
  const shown = (ack: ReplicaAck | undefined): string => ack === undefined ? 'none' : `waitReplicas ${ack.replicas}, waitTimeoutMs ${ack.timeoutMs}`
  throw new FST_ERR_MCP_INVALID_OPTION('sessions.lock', `the RedisSessionLock's replica acknowledgement (${shown(b)}) differs from the ` +
    `RedisSessionStore's (${shown(a)}); the store's saves run on the lock's client, so give both the same waitReplicas and waitTimeoutMs ` +
    '(or leave sessions.lock out: the default lock uses the store\'s client)')
}

/** The lock matching the store (no `sessions.lock` option), its warning logged once. */
function defaultLock (store: SessionStore, log: FastifyBaseLogger): SessionLock {
  let matched
  try {
    matched = matchingLock(store)
  } catch (err) {
    throw new FST_ERR_MCP_INVALID_OPTION('sessions.lock', `the file store's default lock cannot be made (${(err as Error).message}); ` +
      'install fs-native-extensions, or give a lock (lock: false runs requests on one session concurrently)')
  }
  if (matched.warning !== undefined) log.warn(matched.warning)
  return matched.lock
}
