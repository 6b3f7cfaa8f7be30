/**
 * The stateless 2026-07-28 wire. Every POST carries its protocol version and client capabilities
 * in `params._meta`; nothing is inferred from earlier requests. Requests to the client travel as
 * `input_required` results with a sealed `requestState`; list changes travel on
 * `subscriptions/listen` streams.
 */
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { InputRequiredSignal, LOG_LEVELS, type LogLevel, type McpPrincipal } from '../context.js'
import { callTool, complete, getPrompt, listPrompts, listResources, listResourceTemplates, listTools, needCapability, readResource } from '../features/methods.js'
import type { ListKind, Registry } from '../features/registry.js'
import { ResponseChannel } from '../http/response.js'
import { startSse } from '../http/sse.js'
import { ErrorCode, errorResponse, isPlainObject, McpError, metaProblem, resultResponse, type JsonRpcRequest, type ParsedBody, type RequestId } from '../jsonrpc/messages.js'
import type { EventLog } from '../bus/event-log.js'
import type { ResolvedOptions } from '../options.js'
import { HttpRefusal } from './legacy.js'
import { ModernContext } from './modern-context.js'
import { RequestAbort } from './request-abort.js'
import type { StateSealer } from './request-state.js'
import { isLegacyVersion } from './versions.js'

export const MODERN_VERSIONS = ['2026-07-28'] as const
const META_VERSION = 'io.modelcontextprotocol/protocolVersion'
const META_CAPS = 'io.modelcontextprotocol/clientCapabilities'
const META_CLIENT = 'io.modelcontextprotocol/clientInfo'
const META_LOG = 'io.modelcontextprotocol/logLevel'
const META_SERVER = 'io.modelcontextprotocol/serverInfo'
const META_SUB = 'io.modelcontextprotocol/subscriptionId'

/** Cache hints (`ttlMs`, `cacheScope`) of a cacheable result. */
export interface CacheHint { ttlMs: number, cacheScope: 'public' | 'private' }

/** Whether a POST is served on the modern wire (see DESIGN.md, "How a POST flows"). */
export function isModernPost (request: FastifyRequest, body: ParsedBody & { ok: true }): boolean {
  if (!body.batch) {
    const m = body.messages[0]
    if ((m.kind === 'request' || m.kind === 'notification') && typeof m.message.params?._meta === 'object' &&
      m.message.params._meta !== null && META_VERSION in m.message.params._meta) return true
  }
  const v = request.headers['mcp-protocol-version']
  if (typeof v !== 'string' || isLegacyVersion(v)) return false
  // A version we do not know from the handshake era, on a request that names no legacy session.
  // (Compared as dates only: "latest" or "9" sort after "2026-07-28" as strings.)
  return request.headers['mcp-session-id'] === undefined || (/^\d{4}-\d{2}-\d{2}$/.test(v) && v >= MODERN_VERSIONS[0])
}

/** Decodes a header value, with the `=?base64?…?=` sentinel for non-ASCII values. `null` when malformed. */
export function decodeHeaderValue (raw: string): string | null {
  const v = raw.trim()
  // Only a value with both markers is encoded; anything else is taken literally.
  if (!v.startsWith('=?base64?') || !v.endsWith('?=') || v.length < 11) return v
  const b64 = v.slice(9, -2)
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) return null
  const bytes = Buffer.from(b64, 'base64')
  const text = new TextDecoder('utf-8', { fatal: true })
  try { return text.decode(bytes) } catch { return null }
}

function mismatch (id: RequestId | null, what: string): HttpRefusal {
  return new HttpRefusal(400, id, ErrorCode.HeaderMismatch, `Header mismatch: ${what}`)
}

function header (request: FastifyRequest, name: string): string | undefined {
  const v = request.headers[name]
  return Array.isArray(v) ? v.join(',') : v
}

/**
 * `MCP-Protocol-Version` and `Mcp-Method` against the body (400 + -32020): each must be present
 * when `required` (requests), and one that is sent must agree (`claimed`: the version the body
 * names, if any). Returns the version header, trimmed.
 */
function checkStandardHeaders (request: FastifyRequest, id: RequestId | null, method: string, claimed: unknown, required: boolean): string | undefined {
  const version = header(request, 'mcp-protocol-version')?.trim()
  if (version === undefined) {
    if (required) throw mismatch(id, 'MCP-Protocol-Version header is required')
  } else if (claimed !== undefined && version !== claimed) {
    throw mismatch(id, 'MCP-Protocol-Version does not match _meta protocolVersion')
  }
  const sent = header(request, 'mcp-method')
  if (sent === undefined) {
    if (required) throw mismatch(id, 'Mcp-Method header is required')
  } else if (sent.trim() !== method) {
    throw mismatch(id, 'Mcp-Method does not match the method')
  }
  return version
}

/** 400 + -32022 with the versions we serve, unless `requested` is one of them. */
function checkVersion (id: RequestId | null, requested: unknown): void {
  if (!(MODERN_VERSIONS as readonly unknown[]).includes(requested)) {
    throw new HttpRefusal(400, id, ErrorCode.UnsupportedProtocolVersion, 'Unsupported protocol version')
      .withData({ supported: [...MODERN_VERSIONS], requested })
  }
}

/** A decimal number as text (no hex/octal/binary prefixes, no `Infinity`), which `Number()` would also take. */
const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/

/**
 * Why a `subscriptions/listen` filter is malformed, or `null`: `notifications` is required, an
 * object whose flags are booleans and whose `resourceSubscriptions` is an array of strings
 * (unknown keys are ignored, as in the schema). A stream opened on a filter we misread would
 * stay silent without telling the client why.
 */
function filterProblem (filter: unknown): string | null {
  if (!isPlainObject(filter)) return 'notifications must be an object'
  for (const flag of ['toolsListChanged', 'promptsListChanged', 'resourcesListChanged']) {
    if (filter[flag] !== undefined && typeof filter[flag] !== 'boolean') return `notifications.${flag} must be a boolean`
  }
  const uris = filter.resourceSubscriptions
  if (uris !== undefined && !(Array.isArray(uris) && uris.every(u => typeof u === 'string'))) {
    return 'notifications.resourceSubscriptions must be an array of strings'
  }
  return null
}

/** Compares a `Mcp-Param-*` header with the body value (integers numerically, booleans as text). */
function sameParam (headerValue: string, value: unknown): boolean {
  if (typeof value === 'number') return DECIMAL.test(headerValue) && Number(headerValue) === value
  if (typeof value === 'boolean') return headerValue === String(value)
  return headerValue === value
}

export interface ModernDeps {
  opts: ResolvedOptions
  registry: Registry
  sealer: StateSealer
  capabilities: () => Record<string, unknown>
  cache: (what: 'discover' | 'tools' | 'resources' | 'templates' | 'prompts' | 'read', uri?: string) => CacheHint
  logger: FastifyBaseLogger
  maxListenStreams: number
}

interface ListenStream {
  id: RequestId
  reply: FastifyReply
  kinds: Set<ListKind>
  uris: Set<string>
  timer: NodeJS.Timeout | null
}

/** @internal The modern engine. */
export class ModernWire {
  #d: ModernDeps
  #listeners = new Set<ListenStream>()

  constructor (deps: ModernDeps) {
    this.#d = deps
    this.#serverMeta = { [META_SERVER]: deps.opts.serverInfo }
  }

  /** The `_meta` every result carries; shared (it is only ever serialized). */
  readonly #serverMeta: Record<string, unknown>

  /** Handles a modern POST whose body parsed. */
  async post (request: FastifyRequest, reply: FastifyReply, body: ParsedBody & { ok: true }, principal: McpPrincipal | null, sseOnly: boolean): Promise<void> {
    if (body.batch) throw new HttpRefusal(400, null, ErrorCode.InvalidRequest, 'Invalid Request: batches are not allowed')
    const m = body.messages[0]
    if (m.kind === 'response') throw new HttpRefusal(400, null, ErrorCode.InvalidRequest, 'Invalid Request: clients do not send responses on this protocol revision')
    if (m.kind === 'invalid') throw new HttpRefusal(400, m.id, m.error.code, m.error.message)
    if (m.kind === 'notification') {
      // The core protocol defines no client notifications over HTTP: one that agrees with its
      // headers is accepted and ignored.
      this.#checkNotification(request, m.message.method, m.message.params)
      reply.code(202).send()
      return
    }
    const msg = m.message
    const meta = this.#validate(request, msg)
    const caps = meta[META_CAPS] as Record<string, unknown>
    const logLevel = meta[META_LOG]
    if (logLevel !== undefined && !LOG_LEVELS.includes(logLevel as LogLevel)) {
      throw new HttpRefusal(400, msg.id, ErrorCode.InvalidParams, `Invalid params: ${META_LOG} must be one of ${LOG_LEVELS.join(', ')}`)
    }
    const problem = metaProblem(msg.params ?? {})
    if (problem !== null) throw new HttpRefusal(400, msg.id, ErrorCode.InvalidParams, problem)
    if (msg.method === 'subscriptions/listen') {
      this.#listen(request, reply, msg)
      return
    }
    const channel = new ResponseChannel(request, reply, { sessionId: null, polling: false, sseOnly, log: nullLog, hub: null })
    // Closing the response stream is cancellation on this revision.
    const abort = new RequestAbort()
    abort.watch(reply.raw, channel)
    try {
      const response = await this.#run(request, msg, caps, logLevel as LogLevel | undefined, principal, channel, abort)
      if (abort.aborted) return
      channel.finish([response.body], true, response.status)
    } finally {
      abort.unwatch()
    }
  }

  /** `_meta` (-32602), then header agreement (-32020), then version support (-32022). */
  #validate (request: FastifyRequest, msg: JsonRpcRequest): Record<string, unknown> {
    const params = msg.params ?? {}
    const meta = params._meta
    if (!isPlainObject(meta) || typeof meta[META_VERSION] !== 'string' || !isPlainObject(meta[META_CAPS])) {
      throw new HttpRefusal(400, msg.id, ErrorCode.InvalidParams, `Invalid params: _meta must carry "${META_VERSION}" and "${META_CAPS}"`)
    }
    if (meta[META_CLIENT] !== undefined && !isPlainObject(meta[META_CLIENT])) {
      throw new HttpRefusal(400, msg.id, ErrorCode.InvalidParams, `Invalid params: "${META_CLIENT}" must be an object`)
    }
    checkStandardHeaders(request, msg.id, msg.method, meta[META_VERSION], true)
    const nameKey = msg.method === 'resources/read' ? 'uri' : (msg.method === 'tools/call' || msg.method === 'prompts/get') ? 'name' : null
    if (nameKey !== null) {
      const raw = header(request, 'mcp-name')
      if (raw === undefined) throw mismatch(msg.id, 'Mcp-Name header is required')
      const name = decodeHeaderValue(raw)
      if (name === null) throw mismatch(msg.id, 'Mcp-Name has a malformed base64 value')
      if (name !== params[nameKey]) throw mismatch(msg.id, `Mcp-Name does not match params.${nameKey}`)
    }
    if (msg.method === 'tools/call' && typeof params.name === 'string') this.#checkParamHeaders(request, msg.id, params)
    checkVersion(msg.id, meta[META_VERSION])
    return meta
  }

  /**
   * A notification need not carry the standard headers (they are required on requests), but
   * those it carries must agree with its body, and a version it names must be one we serve:
   * 400 with an id-less -32020 / -32022 otherwise, as for requests.
   */
  #checkNotification (request: FastifyRequest, method: string, params: Record<string, unknown> | undefined): void {
    const meta = params?._meta
    const claimed = isPlainObject(meta) ? meta[META_VERSION] : undefined
    const version = checkStandardHeaders(request, null, method, claimed, false)
    const named = claimed ?? version
    if (named !== undefined) checkVersion(null, named)
  }

  /** `Mcp-Param-*` headers of the tool's `x-mcp-header` parameters must mirror the arguments. */
  #checkParamHeaders (request: FastifyRequest, id: RequestId, params: Record<string, unknown>): void {
    const tool = this.#d.registry.tools.get(params.name as string)
    if (tool === undefined) return
    const props = (tool.descriptor.inputSchema as { properties?: Record<string, Record<string, unknown>> }).properties ?? {}
    const args = isPlainObject(params.arguments) ? params.arguments : {}
    for (const [prop, schema] of Object.entries(props)) {
      const headerName = schema?.['x-mcp-header']
      if (typeof headerName !== 'string') continue
      const raw = header(request, `mcp-param-${headerName.toLowerCase()}`)
      const value = args[prop]
      if (value === undefined || value === null) {
        if (raw !== undefined) throw mismatch(id, `Mcp-Param-${headerName} is sent but argument "${prop}" is absent`)
        continue
      }
      if (raw === undefined) throw mismatch(id, `Mcp-Param-${headerName} header is required`)
      const decoded = decodeHeaderValue(raw)
      if (decoded === null) throw mismatch(id, `Mcp-Param-${headerName} has a malformed base64 value`)
      if (!sameParam(decoded, value)) throw mismatch(id, `Mcp-Param-${headerName} does not match argument "${prop}"`)
    }
  }

  /** A `complete` (or `input_required`) result with the server's `_meta`, and cache hints when given. */
  #ok (id: RequestId, result: Record<string, unknown>, cache?: CacheHint): { body: unknown, status: number } {
    // The result objects the methods build are fresh: completed in place rather than copied.
    result.resultType ??= 'complete'
    if (cache !== undefined && result.resultType === 'complete') { result.ttlMs = cache.ttlMs; result.cacheScope = cache.cacheScope }
    const own = result._meta as Record<string, unknown> | undefined
    result._meta = own === undefined ? this.#serverMeta : { ...own, ...this.#serverMeta }
    return { body: resultResponse(id, result), status: 200 }
  }

  /** Runs a request; returns the response and the HTTP status for it. */
  async #run (request: FastifyRequest, msg: JsonRpcRequest, caps: Record<string, unknown>, logLevel: LogLevel | undefined,
    principal: McpPrincipal | null, channel: ResponseChannel, abort: RequestAbort): Promise<{ body: unknown, status: number }> {
    const { registry, opts } = this.#d
    const params = msg.params ?? {}
    const serverCaps = this.#d.capabilities()
    const id = msg.id
    try {
      switch (msg.method) {
        case 'server/discover': {
          const result: Record<string, unknown> = { supportedVersions: [...MODERN_VERSIONS], capabilities: serverCaps }
          if (opts.instructions !== undefined) result.instructions = opts.instructions
          return this.#ok(id, result, this.#d.cache('discover'))
        }
        case 'tools/list': needCapability(serverCaps, 'tools', msg.method, 404); return this.#ok(id, listTools(registry, params, opts.pageSize), this.#d.cache('tools'))
        case 'resources/list': needCapability(serverCaps, 'resources', msg.method, 404); return this.#ok(id, listResources(registry, params, opts.pageSize), this.#d.cache('resources'))
        case 'resources/templates/list': needCapability(serverCaps, 'resources', msg.method, 404); return this.#ok(id, listResourceTemplates(registry, params, opts.pageSize), this.#d.cache('templates'))
        case 'prompts/list': needCapability(serverCaps, 'prompts', msg.method, 404); return this.#ok(id, listPrompts(registry, params, opts.pageSize), this.#d.cache('prompts'))
        case 'completion/complete': needCapability(serverCaps, 'completions', msg.method, 404); return this.#ok(id, await complete(registry, params))
        case 'tools/call':
        case 'prompts/get':
        case 'resources/read': {
          needCapability(serverCaps, msg.method === 'tools/call' ? 'tools' : msg.method === 'prompts/get' ? 'prompts' : 'resources', msg.method, 404)
          const ctx = new ModernContext({ request, msg, caps, logLevel, principal, channel, abort, sealer: this.#d.sealer })
          let result: Record<string, unknown>
          try {
            result = msg.method === 'tools/call'
              ? await callTool(registry, params, ctx, request.log)
              : msg.method === 'prompts/get'
                ? await getPrompt(registry, params, ctx)
                : await readResource(registry, params, ctx, resourceNotFound)
          } catch (err) {
            if (!(err instanceof InputRequiredSignal) || !ctx.asked) throw err
            result = {}
          }
          if (ctx.asked) return this.#ok(id, ctx.inputRequired())
          return this.#ok(id, result, msg.method === 'resources/read' ? this.#d.cache('read', params.uri as string) : undefined)
        }
        default:
          throw new McpError(ErrorCode.MethodNotFound, `Method not found: ${msg.method}`, undefined, 404)
      }
    } catch (err) {
      if (err instanceof HttpRefusal) return { body: { ...err.body, id }, status: err.status }
      if (err instanceof McpError) return { body: errorResponse(id, err.code, err.message, err.data), status: err.status ?? 200 }
      request.log.error({ err, method: msg.method }, 'MCP handler failed')
      return { body: errorResponse(id, ErrorCode.InternalError, 'Internal error'), status: 200 }
    }
  }

  // ─── subscriptions/listen ────────────────────────────────────────────────────────────────────

  #listen (request: FastifyRequest, reply: FastifyReply, msg: JsonRpcRequest): void {
    const problem = filterProblem(msg.params?.notifications)
    if (problem !== null) throw new HttpRefusal(400, msg.id, ErrorCode.InvalidParams, `Invalid params: ${problem}`)
    const wanted = msg.params?.notifications as Record<string, unknown>
    if (this.#listeners.size >= this.#d.maxListenStreams) {
      throw new HttpRefusal(429, msg.id, ErrorCode.ServerError, 'Too many listen streams on this server; retry later')
    }
    const caps = this.#d.capabilities()
    const honored: Record<string, unknown> = {}
    const kinds = new Set<ListKind>()
    if (wanted.toolsListChanged === true && caps.tools !== undefined) { honored.toolsListChanged = true; kinds.add('tools') }
    if (wanted.promptsListChanged === true && caps.prompts !== undefined) { honored.promptsListChanged = true; kinds.add('prompts') }
    if (wanted.resourcesListChanged === true && caps.resources !== undefined) { honored.resourcesListChanged = true; kinds.add('resources') }
    const uris = new Set<string>()
    if (Array.isArray(wanted.resourceSubscriptions) && caps.resources !== undefined) {
      for (const u of wanted.resourceSubscriptions) uris.add(u as string)
      honored.resourceSubscriptions = [...uris]
    }
    startSse(reply)
    const stream: ListenStream = { id: msg.id, reply, kinds, uris, timer: null }
    this.#listeners.add(stream)
    this.#send(stream, 'notifications/subscriptions/acknowledged', { notifications: honored })
    if (this.#d.opts.keepAliveInterval > 0) {
      stream.timer = setInterval(() => reply.raw.write(': keep-alive\n\n'), this.#d.opts.keepAliveInterval)
      stream.timer.unref()
    }
    reply.raw.on('close', () => this.#drop(stream))
    request.log.debug({ kinds: [...kinds], uris: uris.size }, 'listen stream opened')
  }

  #send (stream: ListenStream, method: string, params: Record<string, unknown> = {}): void {
    const raw = stream.reply.raw
    if (raw.destroyed || raw.writableEnded) return
    const message = { jsonrpc: '2.0', method, params: { ...params, _meta: { [META_SUB]: stream.id } } }
    raw.write(`data: ${JSON.stringify(message)}\n\n`)
  }

  #drop (stream: ListenStream): void {
    if (stream.timer !== null) clearInterval(stream.timer)
    stream.timer = null
    this.#listeners.delete(stream)
  }

  /** A list changed: tell the listen streams that asked for that kind. */
  listChanged (kind: ListKind): void {
    for (const s of this.#listeners) if (s.kinds.has(kind)) this.#send(s, `notifications/${kind}/list_changed`)
  }

  /** A resource changed: tell the listen streams subscribed to its URI. */
  resourceUpdated (uri: string): void {
    for (const s of this.#listeners) if (s.uris.has(uri)) this.#send(s, 'notifications/resources/updated', { uri })
  }

  /** Number of open listen streams (tests). */
  get listenStreams (): number { return this.#listeners.size }

  /** Server shutdown: each listen stream ends with its final result. */
  close (): void {
    for (const s of this.#listeners) {
      const raw = s.reply.raw
      if (!raw.destroyed && !raw.writableEnded) {
        raw.write(`data: ${JSON.stringify(resultResponse(s.id, { resultType: 'complete', _meta: { [META_SUB]: s.id } }))}\n\n`)
        raw.end()
      }
      this.#drop(s)
    }
  }
}

/** -32602: resources/read of a URI nobody serves (the 2026-07-28 code). */
function resourceNotFound (uri: string): McpError {
  return new McpError(ErrorCode.InvalidParams, 'Resource not found', { uri })
}

/** Modern SSE responses are not resumable: no event log. */
const nullLog: EventLog = {
  open: async () => '',
  append: async () => '',
  replay: async () => null,
  finish: async () => {},
  dropSession: async () => {}
}
