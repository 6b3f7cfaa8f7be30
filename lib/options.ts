/**
 * Plugin options: register-time validation (fail fast with `FST_ERR_MCP_INVALID_OPTION` naming
 * the option) and the frozen resolved form used at run time. The public types are written in
 * `plugin-options.ts` and exported from here.
 */
import type { SessionStore } from './sessions/session-store.js'
import type { SessionLock } from './locks/session-lock.js'
import type { Bus } from './bus/bus.js'
import type { EventLog } from './bus/event-log.js'
import type { RedisClientLike } from './redis/scripts.js'
import { isPgPool, type PgPoolLike } from './postgres/pool.js'
import { DEFAULT_PG_PREFIX, checkPgPrefix } from './postgres/schema.js'
import { DEFAULT_KEY_PREFIX } from './redis/keys.js'
import { isSentinelConnection, type RedisSentinelConnection } from './redis/sentinel.js'
import type { CacheOptions } from './features/cache-hints.js'
import type { ResolvedIdempotency } from './state/idempotency.js'
import {
  appIdentity, boundedInt, checkCache, checkIdempotency, checkKnownKeys, checkNestedKeys, checkPostgresUrl,
  checkListen, checkRedisUrl, checkHosts, checkOrigins, checkRequestState, checkStatusRoute, checkTasks, fail, nonNegativeInt, optionObject
} from './option-checks.js'
import { RESOURCE_SERVER_KEYS, resolveAuth, type ResolvedAuth, type ResourceServerOptions } from './auth/resource-server.js'
import { resolveToolLimits, type ResolvedToolLimits } from './limits/policy.js'
import { refuseRenamed } from './renamed-options.js'
import { resolveTelemetry, type ResolvedTelemetry } from './telemetry/index.js'
import type { AuthenticateOptions, AuthOptions, IdempotencyOptions, Implementation, McpPluginOptions, SessionOptions } from './plugin-options.js'

export type { AuthenticateOptions, AuthOptions, IdempotencyOptions, Implementation, McpPluginOptions, SessionOptions }

/** The backends the options name (validated; `undefined` where the plugin makes its own). */
export interface ResolvedBackends {
  store: SessionStore | undefined
  /** `undefined`: the lock matching the store (`state/pairings/matching-lock.ts`); `false`: none. */
  lock: SessionLock | false | undefined
  /** `redis` in its object form (a short form is its `client`), or `undefined` without it. */
  redis: { client: RedisClientLike | string | RedisSentinelConnection, prefix: string } | undefined
  /** `postgres` in its object form (a short form is its `pool`), or `undefined` without it. */
  postgres: { pool: PgPoolLike | string, prefix: string } | undefined
  bus: Bus | undefined
  /** `eventLog`: the app's own `store`, or the bounds of the one the plugin makes. */
  eventLog: { store: EventLog | undefined, maxEvents: number, ttlMs: number }
  /** The validated `limits` option, or null without one. */
  limits: ResolvedToolLimits | null
}

export interface ResolvedOptions {
  path: string
  /** The plugin's own route prefix (`undefined`: only the enclosing context's). */
  prefix: string | undefined
  serverInfo: Implementation
  instructions: string | undefined
  gcProbability: number
  gcDivisor: number
  /** Refuse a handshake-era request without `Mcp-Session-Id` with 400 (else: served without a session). */
  requireSessionId: boolean
  /** Idle TTL of a session until its first use after `initialize` (ms). */
  unusedTtlMs: number
  /** See {@link SessionOptions.cancelGraceMs}. */
  cancelGraceMs: number
  backends: ResolvedBackends
  allowedOrigins: (origin: string) => boolean
  allowedHosts: (host: string) => boolean
  /** The check of a request a trusted proxy forwarded (its `request.host`); `null` when `allowedHosts` is not set. */
  forwardedHosts: ((host: string) => boolean) | null
  /** `auth.authenticate`, or the resource server's token check; `undefined` without `auth`. */
  authenticate: AuthenticateOptions['authenticate'] | undefined
  /** The resolved resource-server form of `auth`, or `null`. */
  auth: ResolvedAuth | null
  /** `auth.required`: an anonymous request gets 401. */
  authRequired: boolean
  /** The 401's challenge: `auth.wwwAuthenticate`, or the resource server's. */
  wwwAuthenticate: string
  bodyLimit: number
  clientRequestTimeoutMs: number
  keepAliveIntervalMs: number
  retryIntervalMs: number
  drainTimeoutMs: number
  pageSize: number
  maxPendingClientRequests: number
  maxBatchSize: number
  maxStreamsPerSession: number
  /** `secret`: one, or a list whose first seals and every one opens; `undefined`: a random one. */
  requestState: { secret: string | readonly string[] | undefined, ttlMs: number }
  cache: CacheOptions
  /** How keyed tool calls are recorded, or `null` (`idempotency: false`): keys are ignored. */
  idempotency: ResolvedIdempotency | null
  listen: { max: number, maxPerClient: number }
  tasks: { ttlMs: number, pollIntervalMs: number, maxPerPrincipal: number }
  telemetry: ResolvedTelemetry
  /** The path of the status route, or null when off. */
  statusRoute: string | null
  /** The path of the readiness route, or null when off. */
  readinessRoute: string | null
}

/** A short form of `redis`: an ioredis client or Cluster, a URL, or Sentinel options. */
function isRedisConnection (v: unknown): v is RedisClientLike | string | RedisSentinelConnection {
  return typeof v === 'string' || isSentinelConnection(v) || (typeof v === 'object' && v !== null && typeof (v as { publish?: unknown }).publish === 'function')
}

/** `redis` in its object form: a short form is its `client`. */
function checkRedis (r: unknown): ResolvedBackends['redis'] {
  if (r === undefined) return undefined
  const short = isRedisConnection(r)
  if (!short && (typeof r !== 'object' || r === null || !('client' in r))) {
    fail('redis', 'must be an ioredis client, Cluster, URL or { sentinels, name }, or { client, prefix? } with one of them as client')
  }
  const o = (short ? { client: r } : r) as Record<string, unknown>
  if (!short) checkNestedKeys(o, ['client', 'prefix'], 'redis')
  const client = o.client
  if (!isRedisConnection(client)) fail('redis.client', 'must be an ioredis client, Cluster, URL or { sentinels, name }')
  if (typeof client === 'string') checkRedisUrl(client, short ? 'redis' : 'redis.client')
  const prefix = o.prefix ?? DEFAULT_KEY_PREFIX
  if (typeof prefix !== 'string' || /[{}]/.test(prefix)) fail('redis.prefix', 'must be a string without braces')
  return { client, prefix }
}

/** `postgres` in its object form: a short form (a pool, a connection string) is its `pool`. */
function checkPostgres (p: unknown): ResolvedBackends['postgres'] {
  if (p === undefined) return undefined
  const short = typeof p === 'string' || isPgPool(p)
  if (!short && (typeof p !== 'object' || p === null || !('pool' in p))) {
    fail('postgres', 'must be a pg Pool or a connection string, or { pool, prefix? } with one of them as pool')
  }
  const o = (short ? { pool: p } : p) as Record<string, unknown>
  if (!short) checkNestedKeys(o, ['pool', 'prefix'], 'postgres')
  const pool = o.pool
  if (typeof pool !== 'string' && !isPgPool(pool)) fail('postgres.pool', 'must be a pg Pool or a connection string')
  if (typeof pool === 'string') checkPostgresUrl(pool, short ? 'postgres' : 'postgres.pool')
  const prefix = o.prefix ?? DEFAULT_PG_PREFIX
  try { checkPgPrefix(prefix as string) } catch { fail('postgres.prefix', 'must be lower-case letters, digits and underscores (at most 40), not starting with a digit') }
  return { pool, prefix: prefix as string }
}

/** `eventLog`: the app's own `store`, and the bounds of the one the plugin makes. */
function checkEventLog (e: unknown): ResolvedBackends['eventLog'] {
  const o = optionObject(e, 'eventLog', ['store', 'maxEvents', 'ttlMs'])
  const store = o.store as EventLog | undefined
  if (store !== undefined && (typeof store !== 'object' || store === null || typeof store.append !== 'function')) fail('eventLog.store', 'must implement the EventLog contract')
  return {
    store,
    maxEvents: nonNegativeInt(o, 'maxEvents', 1000, 1, 'eventLog.maxEvents'),
    ttlMs: nonNegativeInt(o, 'ttlMs', 300_000, 1, 'eventLog.ttlMs')
  }
}

/** `redis`, `postgres`, `bus`, `eventLog`, and the session store and lock. */
function checkBackends (opts: McpPluginOptions, s: SessionOptions): ResolvedBackends {
  if (s.store !== undefined && (typeof s.store !== 'object' || typeof s.store.load !== 'function' || typeof s.store.save !== 'function')) {
    fail('sessions.store', 'must implement the SessionStore contract')
  }
  if (s.lock !== undefined && s.lock !== false && (typeof s.lock !== 'object' || s.lock === null || typeof s.lock.acquire !== 'function' || typeof s.lock.tryAcquire !== 'function')) {
    fail('sessions.lock', 'must implement the SessionLock contract, or be false')
  }
  if (opts.bus !== undefined && (typeof opts.bus !== 'object' || typeof opts.bus.publish !== 'function')) fail('bus', 'must implement the Bus contract')
  const redis = checkRedis(opts.redis)
  const postgres = checkPostgres(opts.postgres)
  if (postgres !== undefined && redis !== undefined) fail('postgres', 'cannot be combined with redis: pick one engine')
  return {
    store: s.store,
    lock: s.lock,
    redis,
    postgres,
    bus: opts.bus,
    eventLog: checkEventLog(opts.eventLog),
    limits: opts.limits === undefined ? null : resolveToolLimits(opts.limits, fail)
  }
}

function checkIdentity (opts: McpPluginOptions, defaultVersion: string): Pick<ResolvedOptions, 'path' | 'prefix' | 'serverInfo' | 'instructions'> {
  const path = opts.path ?? '/mcp'
  if (typeof path !== 'string' || !path.startsWith('/')) fail('path', 'must be a string starting with "/"')
  const prefix = opts.prefix
  if (prefix !== undefined && typeof prefix !== 'string') fail('prefix', 'must be a string')
  const serverInfo = opts.serverInfo ?? appIdentity({ name: 'fastify-mcp-http', version: defaultVersion })
  if (typeof serverInfo !== 'object' || typeof serverInfo.name !== 'string' || typeof serverInfo.version !== 'string') {
    fail('serverInfo', 'must be { name: string, version: string }')
  }
  if (opts.instructions !== undefined && typeof opts.instructions !== 'string') fail('instructions', 'must be a string')
  return { path, prefix: prefix === '' ? undefined : prefix, serverInfo: { ...serverInfo }, instructions: opts.instructions }
}

function checkSessions (s: SessionOptions): { gcProbability: number, gcDivisor: number, requireSessionId: boolean, unusedTtlMs: number, cancelGraceMs: number } {
  if (typeof s !== 'object' || s === null) fail('sessions', 'must be an object')
  const gcProbability = s.gcProbability ?? 1
  const gcDivisor = s.gcDivisor ?? 100
  if (typeof gcProbability !== 'number' || !(gcProbability >= 0)) fail('sessions.gcProbability', 'gcProbability must be greater than or equal to 0.')
  if (typeof gcDivisor !== 'number' || !(gcDivisor >= 1)) fail('sessions.gcDivisor', 'gcDivisor must be greater than or equal to 1.')
  const requireSessionId = s.requireSessionId ?? false
  if (typeof requireSessionId !== 'boolean') fail('sessions.requireSessionId', 'must be a boolean')
  const unusedTtlMs = nonNegativeInt(s as Record<string, unknown>, 'unusedTtlMs', 120_000, 1, 'sessions.unusedTtlMs')
  const cancelGraceMs = boundedInt(s as Record<string, unknown>, 'cancelGraceMs', 5000, 0, 3_600_000, 'sessions.cancelGraceMs')
  return { gcProbability, gcDivisor, requireSessionId, unusedTtlMs, cancelGraceMs }
}

/**
 * `auth` in one of its two forms, never both: `{ authenticate, required?, wwwAuthenticate? }` or
 * the resource-server form `{ resource, authorizationServers, jwt | verify, …, required? }`. With
 * both it would be unclear which one a 401 came from and which principal a session is bound to
 * (a custom token check is `auth.verify`; other schemes, cookies, mTLS, are `auth.authenticate`).
 * The resource server builds the challenge (with `resource_metadata`), so `wwwAuthenticate` goes
 * with `authenticate` only. The resolved `authenticate` and `wwwAuthenticate` are the resource
 * server's in its form, so the routes run either the same way.
 */
function checkAuth (raw: unknown): Pick<ResolvedOptions, 'authenticate' | 'auth' | 'authRequired' | 'wwwAuthenticate'> {
  if (raw === undefined) return { auth: null, authenticate: undefined, authRequired: false, wwwAuthenticate: 'Bearer' }
  if (typeof raw !== 'object' || raw === null) fail('auth', 'must be { authenticate, required?, wwwAuthenticate? } or { resource, authorizationServers, jwt | verify, … }')
  const a = raw as Record<string, unknown>
  if (a.required !== undefined && typeof a.required !== 'boolean') fail('auth.required', 'must be a boolean')
  const authRequired = (a.required as boolean | undefined) ?? true
  if (a.authenticate !== undefined) {
    const mixed = Object.keys(a).filter(k => k !== 'required' && RESOURCE_SERVER_KEYS.includes(k))
    if (mixed.length > 0) {
      fail('auth', `takes authenticate or the resource-server form (resource, authorizationServers, jwt | verify, …), not both: ${mixed.join(', ')} ` +
        'with authenticate (auth.verify is the resource server\'s own token check)')
    }
    checkNestedKeys(a, ['authenticate', 'required', 'wwwAuthenticate'], 'auth')
    if (typeof a.authenticate !== 'function') fail('auth.authenticate', 'must be a function')
    if (a.wwwAuthenticate !== undefined && typeof a.wwwAuthenticate !== 'string') fail('auth.wwwAuthenticate', 'must be a string')
    return {
      auth: null,
      authenticate: a.authenticate as AuthenticateOptions['authenticate'],
      authRequired,
      wwwAuthenticate: (a.wwwAuthenticate as string | undefined) ?? 'Bearer'
    }
  }
  if (a.wwwAuthenticate !== undefined) fail('auth.wwwAuthenticate', 'is built by the resource server (with resource_metadata); remove it, or give auth.authenticate')
  const auth = resolveAuth(raw as ResourceServerOptions, fail)
  return { auth, authenticate: auth.authenticate, authRequired, wwwAuthenticate: auth.challenge }
}

/**
 * Validates every option at register time and returns the frozen resolved form: the plugin reads
 * only this, never the raw options.
 */
export function resolveOptions (opts: McpPluginOptions, defaultVersion: string): ResolvedOptions {
  if (typeof opts !== 'object' || opts === null) fail('options', 'must be an object')
  const o = opts as Record<string, unknown>
  refuseRenamed(o)
  checkKnownKeys(o)
  const sessions = (opts.sessions ?? {}) as SessionOptions
  return Object.freeze({
    ...checkIdentity(opts, defaultVersion),
    ...checkSessions(sessions),
    backends: checkBackends(opts, sessions),
    allowedOrigins: checkOrigins(opts.allowedOrigins),
    allowedHosts: checkHosts(opts.allowedHosts),
    forwardedHosts: opts.allowedHosts === undefined ? null : checkHosts(opts.allowedHosts),
    ...checkAuth(opts.auth),
    bodyLimit: nonNegativeInt(o, 'bodyLimit', 4 * 1024 * 1024, 1),
    clientRequestTimeoutMs: nonNegativeInt(o, 'clientRequestTimeoutMs', 60_000, 1),
    keepAliveIntervalMs: nonNegativeInt(o, 'keepAliveIntervalMs', 15_000),
    retryIntervalMs: nonNegativeInt(o, 'retryIntervalMs', 1000),
    drainTimeoutMs: boundedInt(o, 'drainTimeoutMs', 10_000, 0, 3_600_000, 'drainTimeoutMs'),
    pageSize: nonNegativeInt(o, 'pageSize', 100, 1),
    maxPendingClientRequests: nonNegativeInt(o, 'maxPendingClientRequests', 32, 1),
    maxBatchSize: nonNegativeInt(o, 'maxBatchSize', 64, 1),
    maxStreamsPerSession: nonNegativeInt(o, 'maxStreamsPerSession', 64, 1),
    requestState: checkRequestState(opts.requestState),
    cache: checkCache(opts.cache),
    idempotency: checkIdempotency(opts.idempotency),
    listen: checkListen(opts.listen),
    tasks: checkTasks(opts.tasks),
    telemetry: resolveTelemetry(opts.telemetry, fail),
    statusRoute: checkStatusRoute(opts.statusRoute),
    readinessRoute: checkStatusRoute(opts.readinessRoute, 'readinessRoute')
  })
}
