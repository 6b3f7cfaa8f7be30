/**
 * fastify-mcp-http: serves the Model Context Protocol over Streamable HTTP inside a Fastify app.
 *
 *   await app.register(mcp, { path: '/mcp' })
 *   app.mcp.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) },
 *     async ({ text }) => text)
 *
 * The entry only assembles: options (`options.ts`), what the plugin owns (`backends.ts`), what the
 * engine runs on (`compose.ts`: the state engine, tasks, telemetry), the engine
 * (`protocol/engine.ts`), the routes (`http/routes.ts`). `lib/README.md` maps the rest.
 */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import fp from 'fastify-plugin'
import { registerProtectedResourceMetadata } from './auth/metadata.js'
import type { ResolvedAuth } from './auth/resource-server.js'
import { buildBackends } from './backends.js'
import { composeEngineParts } from './compose.js'
import { PluginDecorator } from './decorator.js'
import { serveReadiness } from './http/readiness.js'
import { mcpRoutes } from './http/routes.js'
import { MemoryBus } from './bus/bus.js'
import { MemoryEventLog } from './bus/event-log.js'
import { FST_ERR_MCP_INVALID_OPTION } from './errors.js'
import { MemorySessionLock } from './locks/memory-lock.js'
import { resolveOptions, type McpPluginOptions, type ResolvedBackends } from './options.js'
import { McpEngine } from './protocol/engine.js'
import { MemorySessionStore } from './sessions/memory-store.js'
import { recordEndpoint } from './testing/inject-client.js'

const VERSION = '0.1.0'
/** How long `app.ready()` waits for the shared engine to answer before it logs that it does not (the app starts anyway). */
const ENGINE_PROBE_TIMEOUT = 5000

/**
 * Whether the options say that several processes share sessions: Redis, PostgreSQL, or a store, lock, bus or
 * event log other than the in-process ones (a file store serves the workers of one machine).
 */
function sharedDeployment (b: ResolvedBackends): boolean {
  return b.redis !== undefined || b.postgres !== undefined ||
    (b.store !== undefined && !(b.store instanceof MemorySessionStore)) ||
    (b.lock !== undefined && b.lock !== false && !(b.lock instanceof MemorySessionLock)) ||
    (b.bus !== undefined && !(b.bus instanceof MemoryBus)) ||
    (b.eventLog.store !== undefined && !(b.eventLog.store instanceof MemoryEventLog))
}

/**
 * Serves the Protected Resource Metadata of `auth` (RFC 9728). Its well-known URIs are absolute
 * paths on the host, formed from `auth.resource`: `https://host/api/mcp` has its document at
 * `/.well-known/oauth-protected-resource/api/mcp` (and at the root form), never under the
 * endpoint's prefix (`/api/.well-known/…`, where no client looks). The plugin's own `prefix` only
 * prefixes the endpoint, so these routes go on the instance the plugin is registered on; that
 * instance's context prefix would be prepended to them, so a context with a prefix is refused
 * (register at the root and move that prefix into the plugin's `prefix`, which is the same
 * endpoint).
 */
function serveMetadata (fastify: FastifyInstance, auth: ResolvedAuth, registry: PluginDecorator): void {
  if (fastify.prefix !== '') {
    throw new FST_ERR_MCP_INVALID_OPTION('auth', `needs the plugin registered outside any route prefix: the context prefix "${fastify.prefix}" ` +
      `would move the Protected Resource Metadata away from ${auth.metadataPaths[0]}, where RFC 9728 puts it; register the plugin ` +
      `at the app's root and give the whole path in its own prefix option (prefix: "${fastify.prefix}/…")`)
  }
  registerProtectedResourceMetadata(fastify, { paths: auth.metadataPaths, document: () => auth.document(registry.declaredScopes()) })
}

/**
 * The operators' status route (`statusRoute`): this instance's counts, the same as
 * `app.mcp.status()`. Read-only, constant size, no session id, principal or name in it; fresh on
 * every call (`no-store`). It is as public as the app makes it: put it behind the app's own
 * authentication hook or network policy when the counts are nobody's business.
 */
function serveStatus (fastify: FastifyInstance, path: string, registry: PluginDecorator): void {
  fastify.get(path, async (_request, reply) => {
    reply.header('cache-control', 'no-store')
    return registry.status()
  })
}

/**
 * Fastify's own `return503OnClosing` (on by default) answers every request that arrives while the
 * app closes with a bare 503 before any hook runs: no `Retry-After`, no JSON-RPC body, and the
 * plugin's drain never sees it. That matters only when the app closes with MCP work running (the
 * drain waits for it while new requests arrive): then, and only then, a warning says what to set.
 * The option is not public; it is read where Fastify keeps its options; nothing is said when it
 * cannot be read.
 */
function fastifyAnswersWhileClosing (fastify: FastifyInstance): boolean {
  let options: { return503OnClosing?: unknown } | undefined
  for (let o: object | null = fastify; o !== null && options === undefined; o = Object.getPrototypeOf(o)) {
    const key = Object.getOwnPropertySymbols(o).find(k => k.description === 'fastify.options')
    if (key !== undefined) options = (o as Record<symbol, typeof options>)[key]
  }
  return options !== undefined && options.return503OnClosing !== false
}

/** The drain's warning (see {@link fastifyAnswersWhileClosing}), when requests or streams are running as the app closes. */
function warnIfDrainMatters (fastify: FastifyInstance, engine: McpEngine, drainTimeoutMs: number): void {
  const s = engine.status()
  if (drainTimeoutMs === 0 || s.inflightRequests + s.getStreams + s.listenStreams + s.runningTasks === 0) return
  fastify.log.warn('fastify-mcp-http: the app closes with MCP requests running; set Fastify({ return503OnClosing: false }) so that ' +
    'requests arriving meanwhile get the plugin\'s 503 with Retry-After and a JSON-RPC error (Fastify\'s own 503 has neither)')
}

async function mcpPlugin (fastify: FastifyInstance, options: McpPluginOptions): Promise<void> {
  const opts = resolveOptions(options ?? {}, VERSION)
  const backends = buildBackends(opts.backends, fastify.log)
  if (opts.requestState.secret === undefined) {
    // A random secret is right for one process; it breaks 2026-07-28 multi-round requests only
    // when another instance serves the retry, which is what a shared backend suggests.
    if (sharedDeployment(opts.backends)) {
      fastify.log.warn('fastify-mcp-http: no requestState.secret configured; using a random one. ' +
        'Deployments with more than one instance must configure the same secret on every instance.')
    } else {
      fastify.log.info('fastify-mcp-http: no requestState.secret configured; using a random one (fine for a single process; ' +
        'instances behind one load balancer need the same secret).')
    }
  }
  const registry = new PluginDecorator()
  const parts = composeEngineParts(opts, registry, backends, fastify.log)
  const engine = new McpEngine({ opts, registry, ...parts, bus: backends.bus, eventLog: backends.eventLog, limiter: backends.limiter, logger: fastify.log })
  registry.attach(engine)
  fastify.decorate('mcp', registry)
  fastify.decorateRequest('mcpSession', null)
  fastify.decorateRequest('mcpPrincipal', null)
  if (opts.auth !== null) serveMetadata(fastify, opts.auth, registry)
  if (opts.statusRoute !== null) serveStatus(fastify, opts.statusRoute, registry)
  if (opts.readinessRoute !== null) {
    serveReadiness(fastify, opts.readinessRoute, { store: backends.store, draining: () => registry.status().draining },
      Math.max(1, Math.ceil(opts.retryIntervalMs / 1000)))
  }
  let endpoint: string | undefined
  // The plugin is not encapsulated (fastify-plugin: `app.mcp` must reach the app), so Fastify
  // does not apply a `prefix` given to it: the routes, an encapsulated child, take it instead.
  await fastify.register(mcpRoutes, {
    opts,
    engine,
    access: registry,
    prefix: opts.prefix,
    onEndpoint: (url) => { endpoint ??= url; recordEndpoint(registry, url) }
  })
  const resourcePath = opts.auth === null ? undefined : new URL(opts.auth.resource).pathname
  if (resourcePath !== undefined && endpoint !== undefined && resourcePath !== endpoint) {
    // Right only behind a proxy that maps one path onto the other (the metadata is served for the public one).
    fastify.log.warn({ resource: opts.auth?.resource, endpoint }, 'fastify-mcp-http: auth.resource names another path than the endpoint\'s; ' +
      'clients check that the metadata\'s resource is the URL they use')
  }

  fastify.addHook('onReady', async () => {
    registry.start()
    if (opts.authenticate === undefined && registry.declaredScopes().length > 0) {
      fastify.log.warn('fastify-mcp-http: definitions declare scopes but auth is not set; calls to them get a 401 no client can satisfy')
    }
    // A fail-fast lock client refuses commands until connected: wait for it, but do not keep the
    // app from starting when the backend is down (requests then get a 503 until it is back). The
    // shared engine is probed meanwhile: one line names it and its host when it does not answer.
    const engine = backends.engine
    await Promise.all([
      engine?.probe(ENGINE_PROBE_TIMEOUT).catch((err: unknown) => fastify.log.error({ err, backend: engine.backend, host: engine.host },
        `fastify-mcp-http: ${engine.backend} at ${engine.host} not reachable at start-up; requests that need it get 503 until it answers`)),
      backends.lock?.ready?.().catch((err: unknown) => fastify.log.error({ err }, 'session lock backend not reachable at start-up'))
    ])
    // Likewise the limit backend (the plugin's Redis client), when anything is limited: until it
    // answers, calls would run under `onBackendError` (and log an outage at every start).
    // Tasks keep their per-principal slots there too.
    const limited = opts.backends.limits !== null ||
      [...registry.tools.values()].some(tool => (tool.limits !== undefined && tool.limits !== false) || tool.taskSupport !== 'forbidden')
    if (limited) await backends.limiter.ready().catch((err: unknown) => fastify.log.error({ err }, 'tool limit backend not reachable at start-up'))
  })
  const fastify503 = fastifyAnswersWhileClosing(fastify)
  // Drain first (running requests finish, new ones get 503), then end what is left.
  fastify.addHook('preClose', async () => {
    if (fastify503) warnIfDrainMatters(fastify, engine, opts.drainTimeoutMs)
    await engine.drain(opts.drainTimeoutMs, opts.retryIntervalMs)
    await engine.close(opts.retryIntervalMs)
  })
  fastify.addHook('onClose', async () => { await backends.close() })
}

/** The plugin: `fastify.register(fastifyMcp, options)`. */
export const fastifyMcp: FastifyPluginAsync<McpPluginOptions> = fp(mcpPlugin, { fastify: '5.x', name: 'fastify-mcp-http' })
export default fastifyMcp

// Named exports only: what is listed here is the package's API (test/package/declarations.test.ts
// holds the list and checks that no exported type names one that is not in it).
export type { McpDecorator, McpRegistry, McpStatus, HandleAdmin } from './decorator.js'
export type { HandleKind, HandleKindOptions } from './state/handles.js'
export type { ToolHandleOption } from './features/tool-state.js'
export type { Validator, Checked } from './features/schema.js'
export type { CompiledTemplate } from './features/uri-template.js'
export type { CacheOptions } from './features/cache-hints.js'
export type { CacheKind } from './features/method-table.js'
export type { JsonRpcErrorObject } from './jsonrpc/errors.js'
export type { AuthFailureReason, ExtraMetadata } from './auth/index.js'
export type { BusListener } from './bus/bus.js'
export type { RedisPubSubClient } from './bus/redis-bus.js'
export type { RedisStreamsClient } from './bus/redis-event-log.js'
export type { ExpiryListener } from './sessions/expiry-listeners.js'
export type { GcLogger } from './sessions/gc.js'
export type { BackendSessionLock } from './locks/backend-lock.js'
/** The MCP log levels, least severe first (`LogLevel`). */
export { LOG_LEVELS } from './context.js'
export type { McpPluginOptions, SessionOptions, Implementation, IdempotencyOptions, AuthOptions, AuthenticateOptions } from './options.js'
export type { TelemetryOption, TelemetryOptions, SessionIdAttribute } from './telemetry/index.js'
/** How spans show a session id by default (`telemetry.sessionId: 'hashed'`): find a session's spans from its id. */
export { hashSessionId } from './telemetry/index.js'
export type {
  LogLevel, McpPrincipal, FormElicitParams, UrlElicitParams, ElicitResult, SamplingParams, SamplingResult, Root, ProgressUpdate,
  HandleMinter, McpContext
} from './context.js'
export type {
  Icon, ToolAnnotations, ContentBlock, CallToolResult, ResourceContents, ToolDefinition, TaskSupport, ToolReturn, StructuredToolResult,
  ToolResultFor, ToolHandler, ToolUpdate, ToolHandle, Completer, ResourceDefinition, ResourceTemplateDefinition, ResourceReturn,
  ResourceHandler, TemplateHandler, PromptArgument, PromptDefinition, PromptMessage, GetPromptResult, PromptHandler, ToolEntry,
  ResourceEntry, TemplateEntry, PromptEntry, ResourceHandle, ResourceTemplateHandle, PromptHandle, ListKind, ToolArgs, ToolSchema,
  ToolStructured, SchemaStatic, FromJsonSchema, StandardSchemaV1, StandardSchemaV1Props, StandardJsonSchemaConverter, StandardResult
} from './features/definitions.js'
export { McpError, ErrorCode } from './jsonrpc/errors.js'
export { AuthError, hasScopes, principalScopes, DEFAULT_ALGORITHMS } from './auth/index.js'
export type { ResourceServerOptions, AuthPrincipal, AccessFields, AccessRule, ProtectedResourceMetadata, VerifyToken, JwtVerifierOptions } from './auth/index.js'
export type { ToolLimitsOptions, ToolLimit, RateLimit, BackendFailurePolicy } from './limits/policy.js'
export type { LimitBackend, LimitSpec, LimitDecision, LimitKind } from './limits/backend.js'
export { ToolLimitError, type ToolLimitErrorData, type RefusalKind } from './limits/errors.js'
export { MemoryLimitBackend, type MemoryLimitBackendOptions } from './limits/memory-backend.js'
export { RedisLimitBackend, type RedisLimitBackendOptions } from './limits/redis-backend.js'
export type { RedisLimitClient } from './limits/redis-scripts.js'
export {
  FST_ERR_MCP_INVALID_OPTION, FST_ERR_MCP_INVALID_DEFINITION, FST_ERR_MCP_CAPABILITY, FST_ERR_MCP_CLIENT_TIMEOUT, FST_ERR_MCP_CLIENT_REQUEST,
  FST_ERR_MCP_NO_SESSION, FST_ERR_MCP_SESSION_BUSY, FST_ERR_MCP_SERVER_CLOSING, OutcomeUnknownError
} from './errors.js'
export { InternalToolError } from './tool-error.js'
export { injectClient, type InjectClient, type InjectClientOptions, type InjectNotification, type InjectRequestOptions, type InjectToolResult } from './testing/inject-client.js'
export { SessionHandle, ReadOnlyStateError } from './sessions/session-handle.js'
export type {
  JsonValue, SessionRecord, SessionChanges, SaveGuard, SaveResult, CreateOptions, SessionStoreOptions, SessionStore, LockedSession, LockingSessionStore
} from './sessions/session-store.js'
export type { LeaseFence, AcquireOptions, SessionLease, SessionLock } from './locks/session-lock.js'
export { SessionLockError, SessionLockTimeoutError } from './locks/errors.js'
export { MemorySessionStore, type MemorySessionStoreOptions } from './sessions/memory-store.js'
export { FileSessionStore, type FileSessionStoreOptions } from './sessions/file-store.js'
export { RedisSessionStore, type RedisSessionStoreOptions } from './sessions/redis-store.js'
export { GcPolicy, type GcPolicyOptions } from './sessions/gc.js'
export { isLockingStore, SessionDataError } from './sessions/session-store.js'
export { MemorySessionLock, type MemorySessionLockOptions } from './locks/memory-lock.js'
export { FileSessionLock, type FileSessionLockOptions } from './locks/file-lock.js'
export { RedisSessionLock, type RedisSessionLockOptions } from './locks/redis-lock.js'
export { LOCK_CLIENT_OPTIONS, createLockClient, createRedisClient, type CreateRedisClientOptions, type RedisClientLogger } from './redis/client.js'
export type { RedisClientLike, RedisConnectionOptions } from './redis/scripts.js'
export { PgSessionStore, type PgSessionStoreOptions } from './sessions/pg-store.js'
export { PgSessionLock, type PgSessionLockOptions } from './locks/pg-lock.js'
export { PgBus, type PgBusOptions } from './bus/pg-bus.js'
export { PgEventLog, type PgEventLogOptions } from './bus/pg-event-log.js'
export { PgLimitBackend, type PgLimitBackendOptions } from './limits/pg-backend.js'
export { migratePostgres, DEFAULT_PG_PREFIX } from './postgres/schema.js'
export { createPgPool, POOL_DEFAULTS, type PgPoolLike, type PgClientLike, type PgQuery, type PgResult } from './postgres/pool.js'
export { parseSentinels, type RedisSentinelConnection } from './redis/sentinel.js'
export { UnconfirmedLeaseError, UnconfirmedWriteError, type ReplicaAck } from './redis/replica-ack.js'
export type { ReplicaAckOptions } from './redis/client.js'
export { MemoryBus } from './bus/bus.js'
export type { Bus, BusMessage } from './bus/bus.js'
export { MemoryEventLog } from './bus/event-log.js'
export type { EventLog, EventLogOptions, Replay, LoggedEvent } from './bus/event-log.js'
export { RedisBus, type RedisBusOptions } from './bus/redis-bus.js'
export { RedisEventLog, type RedisEventLogOptions } from './bus/redis-event-log.js'
