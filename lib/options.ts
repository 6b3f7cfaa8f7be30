/**
 * Plugin options: the public type, register-time validation (fail fast with
 * `FST_ERR_MCP_INVALID_OPTION` naming the option) and the frozen resolved form used at run time.
 */
import type { FastifyRequest } from 'fastify'
import type { McpPrincipal } from './context.js'
import type { SessionStore } from './sessions/session-store.js'
import type { SessionLock } from './locks/session-lock.js'
import type { Bus } from './bus/bus.js'
import type { EventLog } from './bus/event-log.js'
import type { RedisClientLike } from './redis/scripts.js'
import { isPgPool, type PgPoolLike } from './postgres/pool.js'
import { DEFAULT_PG_PREFIX, checkPgPrefix } from './postgres/schema.js'
import { isSentinelConnection, type RedisSentinelConnection } from './redis/sentinel.js'
import type { CacheOptions } from './features/cache-hints.js'
import { appIdentity, boundedInt, checkCache, checkKnownKeys, checkRedisUrl, checkHosts, checkOrigins, checkSecret, checkStatusRoute, checkTasks, fail, nonNegativeInt } from './option-checks.js'
import { resolveAuth, type AuthOptions, type ResolvedAuth } from './auth/resource-server.js'
import { resolveToolLimits, type ResolvedToolLimits, type ToolLimitsOptions } from './limits/policy.js'
import { resolveTelemetry, type ResolvedTelemetry, type TelemetryOption } from './telemetry/index.js'

/** Identity of this server (`serverInfo`). */
export interface Implementation {
  name: string
  version: string
  title?: string
  description?: string
  websiteUrl?: string
  icons?: Array<{ src: string, mimeType?: string, sizes?: string[] }>
}

/** Session options (handshake-era clients). */
export interface SessionOptions {
  /** Where sessions live. Default: a new bounded `MemorySessionStore` (one process only). */
  store?: SessionStore
  /**
   * The lock that serializes the requests on one session or state handle (and holds a task's
   * runner). Default: the lock matching the store — `MemorySessionLock` for the memory store,
   * `FileSessionLock` on the file store's `lockDir`, `RedisSessionLock` on the Redis store's client
   * and prefix; a store of the app's own gets `MemorySessionLock` (one process only; a warning at
   * start-up). `false`: no lock — requests on one session or handle run concurrently, and of two
   * that change the same state the last save wins (lost updates). See docs/sessions-and-lock.md.
   */
  lock?: SessionLock | false
  /**
   * Milliseconds a request keeps its lease (on its session or state handle) after it was
   * cancelled or its client left, when its handler ignores `ctx.signal`: then the lease is
   * released (no longer renewed), the next request on that session or handle runs, and whatever
   * the handler saves later is dropped (logged at warn). Checked a few times a second: released
   * within `cancelGrace` plus a quarter of it (at most 1 s more). Default 5,000; 0 releases at the
   * first check. At most 1 hour.
   */
  cancelGrace?: number
  /** Probability numerator of running `store.gc()` on a request. Default 1; 0 disables. */
  gcProbability?: number
  /** Probability denominator. Default 100; must be ≥ 1. */
  gcDivisor?: number
  /**
   * Answer a handshake-era request other than `initialize` that carries no `Mcp-Session-Id` with
   * 400, as before. Default false: such a request is served without a session (`ctx.session`
   * null; a tool declared `session: 'required'` answers `isError`, requests to the client fail);
   * some clients in use never send the id back (docs/clients.md).
   */
  requireSessionId?: boolean
  /**
   * Idle TTL in ms of a session until its first use after `initialize` (a client that never sends
   * its id back, or starts a session per call, leaves only such sessions): they expire this soon,
   * and the memory store evicts them first. After its first request the store's TTL applies.
   * Default 120,000 (2 minutes), capped at the store's TTL.
   */
  unusedTtl?: number
}

/** Options of `fastify.register(mcp, opts)`. */
export interface McpPluginOptions {
  /** Endpoint path. Default `/mcp`. */
  path?: string
  /**
   * Route prefix, as for any Fastify plugin: `register(mcp, { prefix: '/api' })` serves
   * `/api/mcp`. It adds to the prefix of the context the plugin is registered in.
   */
  prefix?: string
  /**
   * `serverInfo` sent to clients. Default: the `name` and `version` of the app's `package.json`
   * (read from the working directory at register time), else `{ name: 'fastify-mcp-http', version: <plugin version> }`.
   */
  serverInfo?: Implementation
  /** Instructions returned by `initialize`. */
  instructions?: string
  sessions?: SessionOptions
  /**
   * Origins allowed to call the endpoint (a request without `Origin` is always allowed; a present,
   * disallowed one gets 403). Default: loopback origins only (`http(s)://localhost|127.0.0.1|[::1]`).
   * A function decides per origin. An origin the app's CORS plugin approved for the request (it
   * echoed it in `Access-Control-Allow-Origin` before the route ran) is allowed as well.
   */
  allowedOrigins?: string[] | ((origin: string) => boolean)
  /**
   * Host header values accepted on connections that arrived on a loopback address (protection
   * against DNS rebinding). Default: `localhost`, `127.0.0.1`, `[::1]`, any port. Requests on
   * non-loopback addresses are not restricted by Host. A request forwarded by a proxy the app
   * trusts (Fastify's `trustProxy`) is checked by its forwarded host (`request.host`), and only
   * when this option is set.
   */
  allowedHosts?: string[]
  /** Authenticates a request: a principal, or `null` when anonymous. */
  authenticate?: (request: FastifyRequest) => McpPrincipal | null | Promise<McpPrincipal | null>
  /**
   * The endpoint as an OAuth 2.0 protected resource (MCP authorization): bearer tokens verified
   * against the authorization server's JWKS (`jwt`) or by `verify`, Protected Resource Metadata
   * served at the RFC 9728 well-known URIs, `resource_metadata` in every challenge. Exclusive with
   * `authenticate` and `wwwAuthenticate`.
   */
  auth?: AuthOptions
  /**
   * Reject anonymous requests with 401 when `authenticate` returns null (with `auth`: a request
   * without a token). Default true when `authenticate` or `auth` is set. A request with an invalid
   * token is refused either way.
   */
  requireAuth?: boolean
  /** `WWW-Authenticate` value sent with 401 (not with `auth`, which builds its own). Default `Bearer`. */
  wwwAuthenticate?: string
  /** Largest accepted body in bytes (413 beyond). Default 4 MiB. */
  bodyLimit?: number
  /** Milliseconds a request to the client (elicitation, sampling, roots) may wait. Default 60,000. */
  clientRequestTimeout?: number
  /** Milliseconds between SSE keep-alive comments on GET streams. Default 15,000; 0 disables. */
  keepAliveInterval?: number
  /** `retry` (ms) sent before the server closes an SSE connection deliberately. Default 1,000. */
  retryInterval?: number
  /**
   * Milliseconds `app.close()` lets requests already running finish before it stops them with an
   * error (new requests get 503 meanwhile). Default 10,000; 0 stops them at once. At most 1 hour.
   */
  drainTimeout?: number
  /** Items per page of the list methods. Default 100. */
  pageSize?: number
  /** Pending requests to the client allowed per session. Default 32. */
  maxPendingClientRequests?: number
  /** Messages allowed in one JSON-RPC batch (2025-03-26 sessions); a larger batch gets 400. Default 64. */
  maxBatchSize?: number
  /**
   * Requests in flight plus open streams (GET, resumed) allowed per session on one instance; past
   * it a request gets 429. Default 64.
   */
  maxStreamsPerSession?: number
  /**
   * Secret that seals `requestState` of multi-round-trip requests (2026-07-28); every instance
   * behind one load balancer needs the same. Default: a random secret per process (logged once).
   */
  requestStateSecret?: string
  /** Milliseconds a sealed `requestState` stays valid. Default 600,000 (10 min). */
  requestStateTtl?: number
  /**
   * Cache hints (`ttlMs`, `cacheScope`) of `server/discover`, the lists and `resources/read`
   * (2026-07-28). Per resource: `cache` in its definition. Defaults: discover and lists 60 s,
   * reads 0; scope `private` when `authenticate` is set (results may depend on the caller), else `public`.
   */
  cache?: CacheOptions
  /** Open `subscriptions/listen` streams allowed per process. Default 1,000. */
  maxListenStreams?: number
  /**
   * Open `subscriptions/listen` streams allowed per client and process: per authenticated
   * principal (`authenticate`), else per remote address (`request.ip`, which follows the app's
   * `trustProxy`). Past it → 429. Default 10.
   */
  maxListenStreamsPerClient?: number
  /**
   * Redis for many instances: an ioredis (5 or 6) client, Cluster, a URL, or a Sentinel deployment
   * (`{ sentinels: [{ host, port }, …], name, …ioredis options }`: the client follows the primary
   * the sentinels name through every failover). From a URL or Sentinel the plugin creates the
   * client and closes it on `app.close()`; a client you pass is never closed. Turns on the Redis
   * bus (pub/sub on a dedicated subscriber connection; sharded on Cluster) and the Redis Streams
   * event log, unless `bus` / `eventLog` are given.
   */
  redis?: RedisClientLike | string | RedisSentinelConnection
  /**
   * PostgreSQL for many instances: a pg Pool, or a connection string (then the plugin makes a pool
   * of the app's `pg` with bounded waits, see docs/postgresql.md, and ends it on `app.close()`; a
   * pool you pass is never ended). Builds on it the session store, the session lock (lease rows),
   * the bus (LISTEN/NOTIFY on one connection of the pool), the event log and the tool limits,
   * unless `sessions.store`, `sessions.lock`, `bus`, `eventLog` or `limits.backend` name others.
   * Not together with `redis`.
   */
  postgres?: PgPoolLike | string
  /** Table-name prefix of what the plugin keeps in PostgreSQL. Default `mcp_`. */
  postgresPrefix?: string
  /** Event log bounds: events per stream and age in ms. Defaults 1,000 and 300,000. */
  eventLogOptions?: { maxEvents?: number, ttl?: number }
  /** Key and channel prefix for what the plugin keeps in Redis. Default `mcp:`. */
  redisPrefix?: string
  /** The bus (default: in-process). */
  bus?: Bus
  /** The event log for resumable streams (default: in-process, bounded). */
  eventLog?: EventLog
  /**
   * Rate and concurrency limits of tool calls per tool and caller (the principal, or the address
   * when anonymous); shared by every instance through `redis` when given. Default: none.
   */
  limits?: ToolLimitsOptions
  /**
   * Tool calls as tasks (2026-07-28 Tasks extension; a tool opts in with `taskSupport`). `ttl`: how
   * long a finished task stays readable, ms (default 3,600,000; 1,000 to 86,400,000), the `ttlMs`
   * clients see; `pollInterval`: the `pollIntervalMs` suggested (default 1,000; 100 to 60,000);
   * `maxPerPrincipal`: tasks running at once per principal (per address when anonymous), past it
   * 429 (default 100).
   */
  tasks?: { ttl?: number, pollInterval?: number, maxPerPrincipal?: number }
  /**
   * OpenTelemetry spans and metrics (docs/observability.md): `true` (default) uses the providers
   * the app registered globally (no-op without an SDK), an object names its own, `false` turns
   * them off.
   */
  telemetry?: TelemetryOption
  /**
   * Serves `GET <statusRoute>`: this instance's counts (sessions held, lock waiters, streams,
   * pending client requests) as JSON, never an id or a principal. Default: off.
   */
  statusRoute?: string | false
}

/** The backends the options name (validated; `undefined` where the plugin makes its own). */
export interface ResolvedBackends {
  store: SessionStore | undefined
  /** `undefined`: the lock matching the store (`state/matching-lock.ts`); `false`: none. */
  lock: SessionLock | false | undefined
  redis: RedisClientLike | string | RedisSentinelConnection | undefined
  postgres: PgPoolLike | string | undefined
  postgresPrefix: string
  redisPrefix: string
  bus: Bus | undefined
  eventLog: EventLog | undefined
  eventLogOptions: { maxEvents: number, ttl: number }
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
  unusedTtl: number
  /** See {@link SessionOptions.cancelGrace}. */
  cancelGrace: number
  backends: ResolvedBackends
  allowedOrigins: (origin: string) => boolean
  allowedHosts: (host: string) => boolean
  /** The check of a request a trusted proxy forwarded (its `request.host`); `null` when `allowedHosts` is not set. */
  forwardedHosts: ((host: string) => boolean) | null
  authenticate: McpPluginOptions['authenticate']
  /** The resolved `auth` option, or `null`. */
  auth: ResolvedAuth | null
  requireAuth: boolean
  wwwAuthenticate: string
  bodyLimit: number
  clientRequestTimeout: number
  keepAliveInterval: number
  retryInterval: number
  drainTimeout: number
  pageSize: number
  maxPendingClientRequests: number
  maxBatchSize: number
  maxStreamsPerSession: number
  requestStateSecret: string | undefined
  requestStateTtl: number
  cache: CacheOptions
  maxListenStreams: number
  maxListenStreamsPerClient: number
  tasks: { ttl: number, pollInterval: number, maxPerPrincipal: number }
  telemetry: ResolvedTelemetry
  /** The path of the status route, or null when off. */
  statusRoute: string | null
}

/** `redis`, `bus`, `eventLog` and their options, and the session store and lock. */
function checkBackends (opts: McpPluginOptions, s: SessionOptions): ResolvedBackends {
  if (s.store !== undefined && (typeof s.store !== 'object' || typeof s.store.load !== 'function' || typeof s.store.save !== 'function')) {
    fail('sessions.store', 'must implement the SessionStore contract')
  }
  if (s.lock !== undefined && s.lock !== false && (typeof s.lock !== 'object' || s.lock === null || typeof s.lock.acquire !== 'function' || typeof s.lock.tryAcquire !== 'function')) {
    fail('sessions.lock', 'must implement the SessionLock contract, or be false')
  }
  if (opts.bus !== undefined && (typeof opts.bus !== 'object' || typeof opts.bus.publish !== 'function')) fail('bus', 'must implement the Bus contract')
  if (opts.redis !== undefined && typeof opts.redis !== 'string' && !isSentinelConnection(opts.redis) &&
    (typeof opts.redis !== 'object' || opts.redis === null || typeof (opts.redis as { publish?: unknown }).publish !== 'function')) {
    fail('redis', 'must be an ioredis client, Cluster, URL or { sentinels, name }')
  }
  if (typeof opts.redis === 'string') checkRedisUrl(opts.redis)
  if (opts.postgres !== undefined && typeof opts.postgres !== 'string' && !isPgPool(opts.postgres)) fail('postgres', 'must be a pg Pool or a connection string')
  if (opts.postgres !== undefined && opts.redis !== undefined) fail('postgres', 'cannot be combined with redis: pick one engine')
  if (opts.postgresPrefix !== undefined) {
    try { checkPgPrefix(opts.postgresPrefix) } catch { fail('postgresPrefix', 'must be lower-case letters, digits and underscores (at most 40), not starting with a digit') }
  }
  if (opts.redisPrefix !== undefined && (typeof opts.redisPrefix !== 'string' || /[{}]/.test(opts.redisPrefix))) fail('redisPrefix', 'must be a string without braces')
  if (opts.eventLog !== undefined && (typeof opts.eventLog !== 'object' || typeof opts.eventLog.append !== 'function')) fail('eventLog', 'must implement the EventLog contract')
  const el = opts.eventLogOptions ?? {}
  if (typeof el !== 'object' || el === null) fail('eventLogOptions', 'must be { maxEvents?, ttl? }')
  const elo = el as Record<string, unknown>
  return {
    store: s.store,
    lock: s.lock,
    redis: opts.redis,
    postgres: opts.postgres,
    postgresPrefix: opts.postgresPrefix ?? DEFAULT_PG_PREFIX,
    redisPrefix: opts.redisPrefix ?? 'mcp:',
    bus: opts.bus,
    eventLog: opts.eventLog,
    eventLogOptions: {
      maxEvents: nonNegativeInt(elo, 'maxEvents', 1000, 1, 'eventLogOptions.maxEvents'),
      ttl: nonNegativeInt(elo, 'ttl', 300_000, 1, 'eventLogOptions.ttl')
    },
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

function checkSessions (s: SessionOptions): { gcProbability: number, gcDivisor: number, requireSessionId: boolean, unusedTtl: number, cancelGrace: number } {
  if (typeof s !== 'object' || s === null) fail('sessions', 'must be an object')
  const gcProbability = s.gcProbability ?? 1
  const gcDivisor = s.gcDivisor ?? 100
  if (typeof gcProbability !== 'number' || !(gcProbability >= 0)) fail('sessions.gcProbability', 'gcProbability must be greater than or equal to 0.')
  if (typeof gcDivisor !== 'number' || !(gcDivisor >= 1)) fail('sessions.gcDivisor', 'gcDivisor must be greater than or equal to 1.')
  const requireSessionId = s.requireSessionId ?? false
  if (typeof requireSessionId !== 'boolean') fail('sessions.requireSessionId', 'must be a boolean')
  const unusedTtl = nonNegativeInt(s as Record<string, unknown>, 'unusedTtl', 120_000, 1, 'sessions.unusedTtl')
  const cancelGrace = boundedInt(s as Record<string, unknown>, 'cancelGrace', 5000, 0, 3_600_000, 'sessions.cancelGrace')
  return { gcProbability, gcDivisor, requireSessionId, unusedTtl, cancelGrace }
}

/**
 * `authenticate` or `auth`, never both: with both it would be unclear which one a 401 came from
 * and which principal a session is bound to (a custom token check is `auth.verify`; other
 * schemes, cookies, mTLS, stay `authenticate`). `auth` builds the challenge (with
 * `resource_metadata`), so `wwwAuthenticate` goes with `authenticate` only. The resolved
 * `authenticate` and `wwwAuthenticate` are `auth`'s, so the routes run either the same way.
 */
function checkAuth (opts: McpPluginOptions): Pick<ResolvedOptions, 'authenticate' | 'auth' | 'requireAuth' | 'wwwAuthenticate'> {
  if (opts.authenticate !== undefined && typeof opts.authenticate !== 'function') fail('authenticate', 'must be a function')
  if (opts.requireAuth !== undefined && typeof opts.requireAuth !== 'boolean') fail('requireAuth', 'must be a boolean')
  if (opts.wwwAuthenticate !== undefined && typeof opts.wwwAuthenticate !== 'string') fail('wwwAuthenticate', 'must be a string')
  if (opts.auth !== undefined) {
    if (opts.authenticate !== undefined) fail('auth', 'cannot be combined with authenticate (use auth.verify for your own token check)')
    if (opts.wwwAuthenticate !== undefined) fail('wwwAuthenticate', 'is built by auth (with resource_metadata); remove it')
    const auth = resolveAuth(opts.auth, fail)
    return { auth, authenticate: auth.authenticate, requireAuth: opts.requireAuth ?? true, wwwAuthenticate: auth.challenge }
  }
  return {
    auth: null,
    authenticate: opts.authenticate,
    requireAuth: opts.requireAuth ?? opts.authenticate !== undefined,
    wwwAuthenticate: opts.wwwAuthenticate ?? 'Bearer'
  }
}

/**
 * Validates every option at register time and returns the frozen resolved form: the plugin reads
 * only this, never the raw options.
 */
export function resolveOptions (opts: McpPluginOptions, defaultVersion: string): ResolvedOptions {
  if (typeof opts !== 'object' || opts === null) fail('options', 'must be an object')
  const o = opts as Record<string, unknown>
  checkKnownKeys(o)
  const sessions = (opts.sessions ?? {}) as SessionOptions
  return Object.freeze({
    ...checkIdentity(opts, defaultVersion),
    ...checkSessions(sessions),
    backends: checkBackends(opts, sessions),
    allowedOrigins: checkOrigins(opts.allowedOrigins),
    allowedHosts: checkHosts(opts.allowedHosts),
    forwardedHosts: opts.allowedHosts === undefined ? null : checkHosts(opts.allowedHosts),
    ...checkAuth(opts),
    bodyLimit: nonNegativeInt(o, 'bodyLimit', 4 * 1024 * 1024, 1),
    clientRequestTimeout: nonNegativeInt(o, 'clientRequestTimeout', 60_000, 1),
    keepAliveInterval: nonNegativeInt(o, 'keepAliveInterval', 15_000),
    retryInterval: nonNegativeInt(o, 'retryInterval', 1000),
    drainTimeout: boundedInt(o, 'drainTimeout', 10_000, 0, 3_600_000, 'drainTimeout'),
    pageSize: nonNegativeInt(o, 'pageSize', 100, 1),
    maxPendingClientRequests: nonNegativeInt(o, 'maxPendingClientRequests', 32, 1),
    maxBatchSize: nonNegativeInt(o, 'maxBatchSize', 64, 1),
    maxStreamsPerSession: nonNegativeInt(o, 'maxStreamsPerSession', 64, 1),
    requestStateSecret: checkSecret(opts.requestStateSecret),
    requestStateTtl: nonNegativeInt(o, 'requestStateTtl', 600_000, 1),
    cache: checkCache(opts.cache),
    maxListenStreams: nonNegativeInt(o, 'maxListenStreams', 1000, 1),
    maxListenStreamsPerClient: nonNegativeInt(o, 'maxListenStreamsPerClient', 10, 1),
    tasks: checkTasks(opts.tasks),
    telemetry: resolveTelemetry(opts.telemetry, fail),
    statusRoute: checkStatusRoute(opts.statusRoute)
  })
}
