/**
 * fastify-mcp-http: serves the Model Context Protocol over Streamable HTTP inside a Fastify app.
 *
 *   await app.register(mcp, { path: '/mcp' })
 *   app.mcp.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) },
 *     async ({ text }) => text)
 */
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { Redis } from 'ioredis'
import { BROADCAST_CHANNEL, MemoryBus, type BusMessage } from './bus/bus.js'
import { RedisBus } from './bus/redis-bus.js'
import { RedisEventLog } from './bus/redis-event-log.js'
import { LOCK_CLIENT_OPTIONS } from './locks/redis-lock.js'
import { MemoryEventLog } from './bus/event-log.js'
import type { McpPrincipal } from './context.js'
import { Registry } from './features/registry.js'
import { checkContentType, checkGetAccept, checkOrigin, checkPostAccept } from './http/checks.js'
import { ErrorCode, errorResponse, parseBody } from './jsonrpc/messages.js'
import { resolveOptions, type McpPluginOptions } from './options.js'
import { HttpRefusal, LegacyWire } from './protocol/legacy.js'
import { isModernPost, ModernWire, type CacheHint } from './protocol/modern.js'
import { StateSealer } from './protocol/request-state.js'
import { MemorySessionStore } from './sessions/memory-store.js'
import { GcPolicy } from './sessions/gc.js'
import type { SessionHandle } from './sessions/session-handle.js'

const VERSION = '0.1.0'

/** `fastify.mcp`: the registry of tools, resources and prompts, and helpers. */
export class McpDecorator extends Registry {
  /** @internal */ wire: LegacyWire | null = null
  /**
   * Sends a notification to one session's GET stream, on whatever instance holds it (dropped
   * when the session has no open GET stream).
   */
  notify: (sessionId: string, method: string, params?: Record<string, unknown>) => Promise<void> = async () => {}
  /** Sends a notification to every session's GET stream, on every instance. */
  notifyAll: (method: string, params?: Record<string, unknown>) => Promise<void> = async () => {}
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The MCP registry (tools, resources, prompts) and helpers. */
    mcp: McpDecorator
  }
  interface FastifyRequest {
    /** The MCP session of this request (handshake-era requests), or `null`. */
    mcpSession: SessionHandle | null
    /** The principal `authenticate` returned, or `null`. */
    mcpPrincipal: McpPrincipal | null
  }
}

function sendRefusal (reply: FastifyReply, err: HttpRefusal): void {
  if (err.headers !== undefined) reply.headers(err.headers)
  sendError(reply, err.status, err.body)
}

/** GET and DELETE exist only for handshake-era sessions: without one, 405 (2026-07-28). */
function noSessionNoStream (request: FastifyRequest): void {
  if (request.headers['mcp-session-id'] === undefined) {
    throw new HttpRefusal(405, null, ErrorCode.InvalidRequest, 'Method Not Allowed: GET and DELETE need an Mcp-Session-Id', { allow: 'POST' })
  }
}

function sendError (reply: FastifyReply, status: number, body: unknown): void {
  reply.code(status).type('application/json').send(JSON.stringify(body))
}

async function mcpPlugin (fastify: FastifyInstance, options: McpPluginOptions): Promise<void> {
  const opts = resolveOptions(options ?? {}, VERSION)
  const sessions = options?.sessions ?? {}
  const store = sessions.store ?? new MemorySessionStore()
  const ownStore = sessions.store === undefined
  const lock = sessions.lock ?? null
  // Redis: a URL makes a client we own (and quit on close); a client passed in stays the caller's.
  const redisOpt = options?.redis
  // Fail fast while Redis is down (the request gets a 503 at once) rather than queueing commands.
  const ownRedis = typeof redisOpt === 'string' ? new Redis(redisOpt, { ...LOCK_CLIENT_OPTIONS }) : undefined
  if (ownRedis !== undefined) ownRedis.on('error', (err) => fastify.log.warn({ err }, 'redis connection error'))
  const redis = ownRedis ?? (typeof redisOpt === 'object' ? redisOpt : undefined)
  const prefix = options?.redisPrefix ?? 'mcp:'
  const bus = options?.bus ?? (redis !== undefined ? new RedisBus({ redis, prefix, log: fastify.log }) : new MemoryBus())
  const ownBus = options?.bus === undefined
  const eventLog = options?.eventLog ??
    (redis !== undefined ? new RedisEventLog({ redis, prefix, ...options?.eventLogOptions }) : new MemoryEventLog(options?.eventLogOptions))

  const registry = new McpDecorator()
  // What the server offers follows what is registered; rebuilt only when the registry changed.
  let caps: Record<string, unknown> = {}
  let capsRevision = -1
  const capabilities = (): Record<string, unknown> => {
    if (capsRevision === registry.revision) return caps
    caps = { logging: {}, completions: {} }
    if (registry.tools.size > 0) caps.tools = { listChanged: true }
    if (registry.resources.size > 0 || registry.templates.size > 0) caps.resources = { subscribe: true, listChanged: true }
    if (registry.prompts.size > 0) caps.prompts = { listChanged: true }
    capsRevision = registry.revision
    return caps
  }
  const gc = new GcPolicy({ gcProbability: opts.gcProbability, gcDivisor: opts.gcDivisor })
  const maybeGc = (log: FastifyBaseLogger): void => { gc.maybeRun(store, log) }
  const wire = new LegacyWire({ opts, registry, store, lock, bus, eventLog, logger: fastify.log, capabilities, maybeGc })
  registry.wire = wire

  if (opts.requestStateSecret === undefined) {
    fastify.log.warn('fastify-mcp-http: no requestStateSecret configured; using a random one. ' +
      'Deployments with more than one instance must configure the same secret on every instance.')
  }
  const sealer = new StateSealer(opts.requestStateSecret, opts.requestStateTtl)
  const defaultScope = opts.authenticate === undefined ? 'public' : 'private'
  const cache = (what: 'discover' | 'tools' | 'resources' | 'templates' | 'prompts' | 'read', uri?: string): CacheHint => {
    const own = what === 'read' && uri !== undefined ? registry.resources.get(uri)?.cache : undefined
    const configured = opts.cache[what]
    return {
      ttlMs: own?.ttlMs ?? configured?.ttlMs ?? (what === 'read' ? 0 : 60_000),
      cacheScope: own?.cacheScope ?? configured?.cacheScope ?? defaultScope
    }
  }
  const modern = new ModernWire({ opts, registry, sealer, capabilities, cache, logger: fastify.log, maxListenStreams: opts.maxListenStreams })

  // Registry changes and application notifications go through the bus, so that every instance
  // (this one included) forwards them to its own GET and listen streams, once each.
  const onBroadcast = (m: BusMessage): void => {
    if (m.t === 'broadcast') {
      wire.hub.broadcast(m.msg)
      if (m.kind === 'tools' || m.kind === 'prompts' || m.kind === 'resources') modern.listChanged(m.kind)
    } else if (m.t === 'resource') {
      wire.hub.resourceUpdated(m.uri)
      modern.resourceUpdated(m.uri)
    }
  }
  const broadcastSubscription = bus.subscribe(BROADCAST_CHANNEL, onBroadcast)
  // An instance started while the bus is down keeps running (and logs); it must not crash.
  broadcastSubscription.catch((err: unknown) => fastify.log.error({ err }, 'broadcast subscription failed'))
  const publish = (m: BusMessage): void => {
    bus.publish(BROADCAST_CHANNEL, m).catch((err: unknown) => fastify.log.warn({ err }, 'broadcast failed'))
  }
  registry.on('changed', (kind) => {
    publish({ t: 'broadcast', kind, msg: { jsonrpc: '2.0', method: `notifications/${kind}/list_changed` } })
  })
  registry.on('resourceUpdated', (uri) => { publish({ t: 'resource', uri }) })
  registry.notifyAll = async (method, params) => {
    const msg: Record<string, unknown> = { jsonrpc: '2.0', method }
    if (params !== undefined) msg.params = params
    await bus.publish(BROADCAST_CHANNEL, { t: 'broadcast', kind: 'custom', msg })
  }
  registry.notify = async (sessionId, method, params) => {
    const msg: Record<string, unknown> = { jsonrpc: '2.0', method }
    if (params !== undefined) msg.params = params
    await wire.hub.publish(sessionId, { t: 'notify', sid: sessionId, msg })
  }

  fastify.decorate('mcp', registry)
  fastify.decorateRequest('mcpSession', null)
  fastify.decorateRequest('mcpPrincipal', null)

  async function authenticate (request: FastifyRequest): Promise<McpPrincipal | null> {
    if (opts.authenticate === undefined) return null
    const principal = await opts.authenticate(request)
    if (principal === null && opts.requireAuth) {
      throw new HttpRefusal(401, null, ErrorCode.InvalidRequest, 'Unauthorized', { 'www-authenticate': opts.wwwAuthenticate })
    }
    if (principal !== null && (typeof principal !== 'object' || typeof principal.id !== 'string')) {
      throw new TypeError('authenticate must return { id: string } or null')
    }
    request.mcpPrincipal = principal
    return principal
  }

  // Routes live in an encapsulated child so our body parser does not touch the user's routes.
  await fastify.register(async (child) => {
    child.removeAllContentTypeParsers()
    // The body is read as text and parsed by parseBody (JSON-RPC errors for bad JSON). JSON is
    // registered by name so that Fastify caches the parser per Content-Type (the catch-all is
    // looked up afresh on every request); other types arrive too, for checkContentType's 415.
    const asText = (_req: unknown, body: string | Buffer, done: (err: null, body: string | Buffer) => void): void => { done(null, body) }
    child.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: opts.bodyLimit }, asText)
    child.addContentTypeParser('*', { parseAs: 'string', bodyLimit: opts.bodyLimit }, asText)

    child.setErrorHandler((err: Error & { statusCode?: number, code?: string }, request, reply) => {
      if (err instanceof HttpRefusal) { sendRefusal(reply, err); return }
      if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
        sendRefusal(reply, new HttpRefusal(413, null, ErrorCode.InvalidRequest, 'Payload Too Large'))
        return
      }
      if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500) {
        sendRefusal(reply, new HttpRefusal(err.statusCode, null, ErrorCode.InvalidRequest, `Bad Request: ${err.message}`))
        return
      }
      request.log.error({ err }, 'MCP request failed')
      sendRefusal(reply, new HttpRefusal(500, null, ErrorCode.InternalError, 'Internal error'))
    })

    child.post(opts.path, async (request, reply) => {
      checkOrigin(request, opts)
      checkContentType(request)
      const principal = opts.authenticate === undefined ? null : await authenticate(request)
      const parsed = parseBody(typeof request.body === 'string' ? request.body : '')
      if (!parsed.ok) { sendError(reply, 400, parsed.error); return reply }
      const first = parsed.messages[0]
      const id = first.kind === 'request' ? first.message.id : first.kind === 'invalid' ? first.id : null
      const sseOnly = checkPostAccept(request, id)
      if (!parsed.batch && first.kind === 'invalid') {
        sendError(reply, 400, errorResponse(first.id, first.error.code, first.error.message))
        return reply
      }
      // Era routing before dispatch: modern requests never touch sessions.
      if (isModernPost(request, parsed)) await modern.post(request, reply, parsed, principal, sseOnly)
      else await wire.post(request, reply, parsed, principal, sseOnly)
      return reply
    })

    child.get(opts.path, async (request, reply) => {
      checkOrigin(request, opts)
      noSessionNoStream(request)
      checkGetAccept(request)
      const principal = await authenticate(request)
      await wire.get(request, reply, principal)
      return reply
    })

    child.delete(opts.path, async (request, reply) => {
      checkOrigin(request, opts)
      noSessionNoStream(request)
      const principal = await authenticate(request)
      await wire.delete(request, reply, principal)
      return reply
    })
  })

  fastify.addHook('onReady', async () => {
    registry.start()
    // A fail-fast lock client refuses commands until connected: wait for it, but do not keep the
    // app from starting when the backend is down (requests then get a 503 until it is back).
    if (lock?.ready !== undefined) {
      await lock.ready().catch((err: unknown) => fastify.log.error({ err }, 'session lock backend not reachable at start-up'))
    }
  })

  fastify.addHook('preClose', async () => {
    modern.close()
    await wire.hub.close(opts.retryInterval)
    await broadcastSubscription.then(unsub => unsub()).catch(() => {})
  })
  fastify.addHook('onClose', async () => {
    // Close only what we created; each step bounded and never throwing.
    const steps: Array<Promise<unknown> | undefined> = []
    if (ownStore) steps.push(store.close?.())
    if (ownBus) steps.push(bus.close())
    await Promise.race([
      Promise.allSettled(steps),
      new Promise(resolve => setTimeout(resolve, 5000).unref())
    ])
    if (ownRedis !== undefined) {
      await Promise.race([ownRedis.quit().catch(() => {}), new Promise(resolve => setTimeout(resolve, 1000).unref())])
      ownRedis.disconnect()
    }
  })
}

/** The plugin: `fastify.register(fastifyMcp, options)`. */
export const fastifyMcp = fp(mcpPlugin, { fastify: '5.x', name: 'fastify-mcp-http' })
export default fastifyMcp

export type { McpPluginOptions, SessionOptions, Implementation } from './options.js'
export type * from './context.js'
export type * from './features/registry.js'
export { Registry } from './features/registry.js'
export { McpError, ErrorCode } from './jsonrpc/messages.js'
export * from './errors.js'
export { SessionHandle } from './sessions/session-handle.js'
export type * from './sessions/session-store.js'
export type * from './locks/session-lock.js'
export { SessionLockError, SessionLockTimeoutError } from './locks/errors.js'
export { MemorySessionStore, type MemorySessionStoreOptions } from './sessions/memory-store.js'
export { FileSessionStore, type FileSessionStoreOptions } from './sessions/file-store.js'
export { RedisSessionStore, type RedisSessionStoreOptions } from './sessions/redis-store.js'
export { GcPolicy, type GcPolicyOptions } from './sessions/gc.js'
export { isLockingStore } from './sessions/session-store.js'
export { MemorySessionLock, type MemorySessionLockOptions } from './locks/memory-lock.js'
export { FileSessionLock, type FileSessionLockOptions } from './locks/file-lock.js'
export { RedisSessionLock, LOCK_CLIENT_OPTIONS, createLockClient, type RedisSessionLockOptions } from './locks/redis-lock.js'
export { MemoryBus } from './bus/bus.js'
export type { Bus, BusMessage } from './bus/bus.js'
export { MemoryEventLog } from './bus/event-log.js'
export type { EventLog, EventLogOptions, Replay, LoggedEvent } from './bus/event-log.js'
export { RedisBus, type RedisBusOptions } from './bus/redis-bus.js'
export { RedisEventLog, type RedisEventLogOptions } from './bus/redis-event-log.js'
