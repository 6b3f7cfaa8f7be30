/**
 * The options of `fastify.register(mcp, opts)` as users write them: the public types, documented
 * option by option. `options.ts` validates them into the resolved form the plugin reads (and
 * re-exports these types, which the entry exports from there).
 */
import type { FastifyRequest } from 'fastify'
import type { McpPrincipal } from './context.js'
import type { SessionStore } from './sessions/session-store.js'
import type { SessionLock } from './locks/session-lock.js'
import type { Bus } from './bus/bus.js'
import type { EventLog } from './bus/event-log.js'
import type { RedisClientLike } from './redis/scripts.js'
import type { PgPoolLike } from './postgres/pool.js'
import type { RedisSentinelConnection } from './redis/sentinel.js'
import type { CacheOptions } from './features/cache-hints.js'
import type { ResourceServerOptions } from './auth/resource-server.js'
import type { ToolLimitsOptions } from './limits/policy.js'
import type { TelemetryOption } from './telemetry/index.js'

/** Identity of this server (`serverInfo`). */
export interface Implementation {
  name: string
  version: string
  title?: string
  description?: string
  websiteUrl?: string
  icons?: Array<{ src: string, mimeType?: string, sizes?: string[] }>
}

/**
 * Where state lives and how work on it is serialized: handshake-era sessions, and the state
 * handles and tasks of both eras (kept in the same store under the same lock).
 */
export interface SessionOptions {
  /**
   * Where sessions, state handles and tasks live. Default: a new bounded `MemorySessionStore` (one
   * process only); with `postgres`, a `PgSessionStore` on its pool and prefix.
   */
  store?: SessionStore
  /**
   * The lock that serializes the requests on one session or state handle (and holds a task's
   * runner). Default: the lock matching the store — `MemorySessionLock` for the memory store,
   * `FileSessionLock` on the file store's `lockDir`, `RedisSessionLock` on the Redis store's client
   * and prefix, `PgSessionLock` on the PostgreSQL store's pool and prefix; a store of the app's own gets `MemorySessionLock` (one process only; a warning at
   * start-up). `false`: no lock — requests on one session or handle run concurrently, and of two
   * that change the same state the last save wins (lost updates). See docs/sessions-and-lock.md.
   */
  lock?: SessionLock | false
  /**
   * Milliseconds a request keeps its lease (on its session or state handle) after it was
   * cancelled or its client left, when its handler ignores `ctx.signal`: then the lease is
   * released (no longer renewed), the next request on that session or handle runs, and whatever
   * the handler saves later is dropped (logged at warn). Checked a few times a second: released
   * within `cancelGraceMs` plus a quarter of it (at most 1 s more). Default 5,000; 0 releases at the
   * first check. At most 1 hour.
   */
  cancelGraceMs?: number
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
  unusedTtlMs?: number
}

/**
 * The `auth` option with a check of the app's own (a session cookie, mTLS, an API key, a token
 * scheme other than the resource server's).
 */
export interface AuthenticateOptions {
  /** Authenticates a request: a principal, or `null` when anonymous. */
  authenticate: (request: FastifyRequest) => McpPrincipal | null | Promise<McpPrincipal | null>
  /** Reject anonymous requests (`authenticate` returned null) with 401. Default true. */
  required?: boolean
  /** `WWW-Authenticate` value sent with 401. Default `Bearer`. */
  wwwAuthenticate?: string
  /** Not with `authenticate`: the resource-server form is the other form of `auth`. */
  resource?: never
}

/**
 * The `auth` option: a check of the app's own ({@link AuthenticateOptions}), or the endpoint as
 * an OAuth 2.0 protected resource ({@link ResourceServerOptions}: bearer tokens verified against
 * the authorization server's JWKS or by `verify`, Protected Resource Metadata served at the RFC
 * 9728 well-known URIs, `resource_metadata` in every challenge). One or the other: with both it
 * would be unclear which one a 401 came from and which principal a session is bound to.
 */
export type AuthOptions = AuthenticateOptions | ResourceServerOptions

/** The `idempotency` option (see docs/retries-and-idempotency.md). */
export interface IdempotencyOptions {
  /** Records one session or handle keeps, the newest (default 16; 1–1,000). An older key then runs again. */
  maxPerState?: number
  /**
   * The largest result recorded, in bytes of its JSON (default 16,384; at most 1 MiB). A larger
   * result is recorded as applied without it: a copy is told so instead of getting it.
   */
  maxResultBytes?: number
  /** How long the record of a keyed call on no session and no handle lives, in ms (default 24 h). */
  ttlMs?: number
  /**
   * Off by default. For clients that send no key and are known to send a call twice: an
   * identical call (same principal, state, tool and arguments) within `windowMs` gets the first
   * one's result as a replay — an identical call meant to run again within the window is absorbed
   * too. `tools` limits it to those tools.
   */
  dedupe?: { windowMs: number, tools?: string[] } | false
}

/**
 * Options of `fastify.register(mcp, opts)`. Their names follow one rule: every duration ends in
 * `Ms` (milliseconds), and the options of one subject are grouped under that subject's name. An
 * option renamed to follow it is refused by its old name (`renamed-options.ts`).
 */
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
  /**
   * Who makes a request, in one of two forms (see {@link AuthOptions}): your own check
   * (`{ authenticate, required?, wwwAuthenticate? }`), or the endpoint as an OAuth 2.0 protected
   * resource (`{ resource, authorizationServers, jwt | verify, …, required? }`). Default: none,
   * every request anonymous.
   */
  auth?: AuthOptions
  /** Largest accepted body in bytes (413 beyond). Default 4 MiB. */
  bodyLimit?: number
  /** Milliseconds a request to the client (elicitation, sampling, roots) may wait. Default 60,000. */
  clientRequestTimeoutMs?: number
  /** Milliseconds between SSE keep-alive comments on GET streams. Default 15,000; 0 disables. */
  keepAliveIntervalMs?: number
  /** `retry` (ms) sent before the server closes an SSE connection deliberately. Default 1,000. */
  retryIntervalMs?: number
  /**
   * Milliseconds `app.close()` lets requests already running finish before it stops them with an
   * error (new requests get 503 meanwhile). Default 10,000; 0 stops them at once. At most 1 hour.
   */
  drainTimeoutMs?: number
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
   * The sealed `requestState` of multi-round-trip requests (2026-07-28). `secret` seals it (at
   * least 16 characters); every instance behind one load balancer needs the same. Default: a
   * random secret per process (logged once). To rotate it without failing requests in flight,
   * give a list (at most 3): the first seals, every one opens
   * (docs/production.md#rotating-requeststatesecret). `ttlMs`: how long a sealed state stays
   * valid. Default 600,000 (10 min).
   */
  requestState?: { secret?: string | readonly string[], ttlMs?: number }
  /**
   * Cache hints (`ttlMs`, `cacheScope`) of `server/discover`, the lists and `resources/read`
   * (2026-07-28). Per resource: `cache` in its definition. Defaults: discover and lists 60 s,
   * reads 0; scope `private` when `auth` is set (results may depend on the caller), else `public`.
   */
  cache?: CacheOptions
  /**
   * Idempotency keys on `tools/call` (docs/retries-and-idempotency.md). A call carrying a key
   * (`params.idempotencyKey`, `_meta["fastify-mcp-http/idempotencyKey"]`, or the `Idempotency-Key`
   * header) runs once: its result is recorded in the same save as its changes, and a copy gets
   * that result, marked as a replay. On by default; `false` ignores keys.
   */
  idempotency?: IdempotencyOptions | false
  /**
   * Open `subscriptions/listen` streams. `max`: allowed per process (default 1,000).
   * `maxPerClient`: allowed per client and process, per principal (`auth`), else per
   * remote address (`request.ip`, which follows the app's `trustProxy`); past it → 429 (default 10).
   */
  listen?: { max?: number, maxPerClient?: number }
  /**
   * Redis for many instances: an ioredis (5 or 6) client, Cluster, a URL, or a Sentinel deployment
   * (`{ sentinels: [{ host, port }, …], name, …ioredis options }`: the client follows the primary
   * the sentinels name through every failover). From a URL or Sentinel the plugin creates the
   * client and closes it on `app.close()`; a client you pass is never closed. Turns on the Redis
   * bus (pub/sub on a dedicated subscriber connection; sharded on Cluster) and the Redis Streams
   * event log, unless `bus` / `eventLog.store` are given. `{ client, prefix }` gives any of these
   * with the key and channel prefix of what the plugin keeps in Redis (default `mcp:`).
   */
  redis?: RedisClientLike | string | RedisSentinelConnection | { client: RedisClientLike | string | RedisSentinelConnection, prefix?: string }
  /**
   * PostgreSQL for many instances: a pg Pool, or a connection string (then the plugin makes a pool
   * of the app's `pg` with bounded waits, see docs/postgresql.md, and ends it on `app.close()`; a
   * pool you pass is never ended). Builds on it the session store, the session lock (lease rows),
   * the bus (LISTEN/NOTIFY on one connection of the pool), the event log and the tool limits,
   * unless `sessions.store`, `sessions.lock`, `bus`, `eventLog.store` or `limits.backend` name
   * others. Not together with `redis`. `{ pool, prefix }` gives either with the table-name prefix
   * of what the plugin keeps in PostgreSQL (default `mcp_`).
   */
  postgres?: PgPoolLike | string | { pool: PgPoolLike | string, prefix?: string }
  /** The bus (default: in-process). */
  bus?: Bus
  /**
   * The event log of resumable streams. `store`: where it lives (default: in-process, Redis with
   * `redis`, PostgreSQL with `postgres`); `maxEvents`: events kept per stream (default 1,000);
   * `ttlMs`: how long a stream is kept after its last event (default 300,000). The bounds apply
   * to the event log the plugin makes, not to a `store` of yours.
   */
  eventLog?: { store?: EventLog, maxEvents?: number, ttlMs?: number }
  /**
   * Rate and concurrency limits of tool calls per tool and caller (the principal, or the address
   * when anonymous); shared by every instance through `redis` when given. Default: none.
   */
  limits?: ToolLimitsOptions
  /**
   * Tool calls as tasks (2026-07-28 Tasks extension; a tool opts in with `taskSupport`). `ttlMs`:
   * how long a finished task stays readable (default 3,600,000; 1,000 to 86,400,000), the `ttlMs`
   * clients see; `pollIntervalMs`: the `pollIntervalMs` suggested (default 1,000; 100 to 60,000);
   * `maxPerPrincipal`: tasks running at once per principal (per address when anonymous), past it
   * 429 (default 100).
   */
  tasks?: { ttlMs?: number, pollIntervalMs?: number, maxPerPrincipal?: number }
  /**
   * OpenTelemetry spans and metrics (docs/observability.md): `true` (default) uses the providers
   * the app registered globally (no-op without an SDK), an object names its own, `false` turns
   * them off.
   */
  telemetry?: TelemetryOption
  /**
   * Serves `GET <statusRoute>`: this instance's counts (`app.mcp.status()`: sessions held, lock
   * waiters, streams, pending client requests, requests in flight, running tasks, whether it
   * drains) as JSON, never an id or a principal. Default: off.
   */
  statusRoute?: string | false
  /**
   * Serves `GET <readinessRoute>` for a load balancer: 200 `{ ready: true }`, or 503
   * `{ ready: false, reason }` with Retry-After while `app.close()` drains this instance or its
   * sessions' store does not answer (docs/production.md#health-and-readiness). Default: off.
   */
  readinessRoute?: string | false
}
