/**
 * The MCP endpoint's routes (POST, GET, DELETE on one path), registered as an encapsulated child
 * plugin so that its body parser and error handler never touch the app's other routes. Each route
 * runs the transport checks (Origin/Host 403, Content-Type 415, Accept 406, body size 413),
 * authenticates, parses the JSON-RPC body, and hands the exchange to the engine; every error
 * becomes a JSON-RPC error body with the right status (never a 500 with a stack).
 *
 * The POST also runs the scope gate (`auth/access.ts`): a request for a tool, resource or prompt
 * whose scopes the principal lacks is refused here, before the engine, so that the refusal can be
 * an HTTP 403 with its `WWW-Authenticate` challenge (once a handler runs, the answer may already
 * be an SSE stream). GET and DELETE address no definition: only authentication applies to them.
 */
import { STATUS_CODES } from 'node:http'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { authorizeMessages, type AccessRuleSource } from '../auth/access.js'
import type { ResolvedAuth } from '../auth/resource-server.js'
import type { McpPrincipal } from '../context.js'
import { ErrorCode, McpError, echoed, errorReply, errorResponse, type RequestId } from '../jsonrpc/errors.js'
import { parseBody, type ParsedBody } from '../jsonrpc/messages.js'
import { retryAfterSeconds } from '../limits/errors.js'
import type { ResolvedOptions } from '../options.js'
import type { McpEngine } from '../protocol/engine.js'
import { checkContentType, checkGetAccept, checkOrigin, checkPostAccept } from './checks.js'
import { HttpExchange, bindLog } from './exchange.js'
import { JSON_CONTENT_TYPE } from './post-response.js'
import { HttpRefusal } from './refusal.js'

/** @internal What the routes are registered with. */
export interface RoutesOptions {
  opts: ResolvedOptions
  engine: McpEngine
  /** Where the scope gate finds the access rule of a tool, resource or prompt (the registry). */
  access: AccessRuleSource
  /** Told the endpoint's full URL (prefixes included) once the POST route is added. */
  onEndpoint?: (url: string) => void
}

function sendError (reply: FastifyReply, status: number, body: unknown, headers?: Record<string, string>): void {
  if (headers !== undefined) reply.headers(headers)
  reply.code(status).type(JSON_CONTENT_TYPE).send(JSON.stringify(body))
}

/** GET and DELETE exist only for handshake-era sessions: without one, 405 (2026-07-28). */
function noSessionNoStream (request: FastifyRequest): void {
  if (request.headers['mcp-session-id'] === undefined) {
    throw new HttpRefusal(405, null, ErrorCode.InvalidRequest, 'Method Not Allowed: GET and DELETE need an Mcp-Session-Id', { allow: 'POST' })
  }
}

/** The HTTP status an error of the app's hooks or of Fastify names (`statusCode`, or `status` as http-errors has it). */
function statusOf (err: HookError): number | undefined {
  const s = err.statusCode ?? err.status
  return typeof s === 'number' && Number.isInteger(s) && s >= 400 && s <= 599 ? s : undefined
}

/** What an error thrown by the app's hooks, an auth plugin or Fastify may carry. */
interface HookError {
  statusCode?: unknown
  status?: unknown
  message?: unknown
  headers?: unknown
  code?: unknown
}

/**
 * The id of the single request in the body, for an error raised after the body was read (a
 * `preHandler` hook): the client can then match the error to its request. `null` otherwise.
 */
function idOfBody (request: FastifyRequest): RequestId | null {
  if (typeof request.body !== 'string' || request.body === '') return null
  const parsed = parseBody(request.body)
  if (!parsed.ok || parsed.batch) return null
  const m = parsed.messages[0]
  return m.kind === 'request' ? m.message.id : null
}

/**
 * Answers any error of the routes (see the module doc) under `id`: the single request's for a
 * refusal of its POST (never a client response's), else none.
 *
 * An error raised outside the MCP code (the app's hooks — a rate limiter, a maintenance switch, an
 * auth plugin — or Fastify itself) keeps the status and headers it chose and gets a JSON-RPC body
 * whose code fits: 429 and any deliberate 5xx → `-32000` with its message (the client may retry),
 * another 4xx → `-32600` with its message. An error without a status, or with 500, is the
 * server's fault: 500 `-32603` "Internal error", its message only in the log.
 */
function answerError (err: unknown, id: RequestId | null, request: FastifyRequest, reply: FastifyReply, opts: ResolvedOptions): void {
  if (reply.sent) {
    // The answer had started (an SSE stream): it cannot become an error response any more.
    request.log.error({ err }, 'MCP request failed after its answer started')
    return
  }
  if (err instanceof HttpRefusal) {
    logAccessRefusal(request, err)
    sendError(reply, err.status, errorResponse(err.id, err.code, err.message, err.data), err.headers)
    return
  }
  if (err instanceof McpError) logAccessRefusal(request, err)
  if (err instanceof McpError || typeof err !== 'object' || err === null) {
    // An McpError's own headers go with it: an AuthError's challenge, a ToolLimitError's Retry-After.
    const { status, body, headers } = errorReply(err, id, { status: 500, log: request.log })
    sendError(reply, status, body, headers)
    return
  }
  const e = err as HookError
  if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') { sendError(reply, 413, errorResponse(null, ErrorCode.InvalidRequest, 'Payload Too Large')); return }
  const status = statusOf(e)
  if (status === undefined || status === 500) {
    const { status, body } = errorReply(err, id ?? idOfBody(request), { status: 500, log: request.log })
    sendError(reply, status, body)
    return
  }
  // Headers the error carries (http-errors, @fastify/error), as Fastify's own handler sends them.
  if (typeof e.headers === 'object' && e.headers !== null) reply.headers(e.headers as Record<string, string>)
  if (status === 401 && !reply.hasHeader('www-authenticate')) reply.header('www-authenticate', opts.wwwAuthenticate)
  const message = typeof e.message === 'string' && e.message !== '' ? e.message : (STATUS_CODES[status] ?? 'Error')
  if (status >= 500) request.log.error({ err }, 'MCP request failed')
  else request.log.info({ statusCode: status, reason: message }, 'MCP request refused')
  const code = status === 429 || status >= 500 ? ErrorCode.ServerError : ErrorCode.InvalidRequest
  sendError(reply, status, errorResponse(id ?? idOfBody(request), code, message))
}

/** The session and principal of a request, for its log (see {@link bindLog}). */
function streamBindings (request: FastifyRequest, principal: McpPrincipal | null): Record<string, unknown> {
  const b: Record<string, unknown> = {}
  const sid = request.headers['mcp-session-id']
  if (typeof sid === 'string') b.mcpSession = sid.slice(0, 8)
  if (principal !== null) b.mcpPrincipal = principal.id
  return b
}

/**
 * What a POST is about, for its log: the method (`batch` for a batch, `response` for a client's
 * answer), the tool of a `tools/call`, the session (a prefix: enough to follow one session
 * through the log, not enough to use it) and the principal.
 */
function postBindings (request: FastifyRequest, parsed: ParsedBody, principal: McpPrincipal | null): Record<string, unknown> {
  const b = streamBindings(request, principal)
  if (!parsed.ok) return b
  if (parsed.batch) { b.mcpMethod = 'batch'; return b }
  const m = parsed.messages[0]
  if (m.kind === 'request' || m.kind === 'notification') {
    // The client's names, cut: every log line of the request carries them.
    b.mcpMethod = echoed(m.message.method)
    const name = m.message.params?.name
    if (m.message.method === 'tools/call' && typeof name === 'string') b.mcpTool = echoed(name)
  } else if (m.kind === 'response') {
    b.mcpMethod = 'response'
  }
  return b
}

/**
 * Runs `auth.authenticate` (or the resource server's token check): 401 with the challenge for an
 * anonymous request when `auth.required`. `null` without `auth`: every request is anonymous, and the routes need not wait for it.
 */
function authenticator (opts: ResolvedOptions): ((request: FastifyRequest) => Promise<McpPrincipal | null>) | null {
  if (opts.authenticate === undefined) return null
  const authenticate = opts.authenticate
  return async (request) => {
    const principal = await authenticate(request)
    if (principal === null && opts.authRequired) {
      throw new HttpRefusal(401, null, ErrorCode.InvalidRequest, 'Unauthorized', { 'www-authenticate': opts.wwwAuthenticate })
    }
    if (principal !== null && (typeof principal !== 'object' || typeof principal.id !== 'string')) {
      throw new TypeError('auth.authenticate must return { id: string } or null')
    }
    request.mcpPrincipal = principal
    return principal
  }
}

/**
 * A 401 or 403 says why in the log (at info: a refusal is not a fault), never with the token: the
 * reason (`no_token`, `invalid_token`, `insufficient_scope`, an Origin or Host not allowed, no
 * principal), and the description the challenge carries, cut.
 */
function logAccessRefusal (request: FastifyRequest, err: McpError): void {
  const status = err.status
  if (status !== 401 && status !== 403) return
  const data = err.data as { error_description?: unknown } | undefined
  const described = typeof data?.error_description === 'string' ? echoed(data.error_description, 200) : undefined
  const reason = typeof (err as { reason?: unknown }).reason === 'string'
    ? (err as unknown as { reason: string }).reason
    : status === 401 ? 'authenticate returned no principal' : err.message
  request.log.info({ statusCode: status, reason, description: described }, 'MCP request refused')
}

/** @internal Registers the routes (see the module doc). */
export async function mcpRoutes (child: FastifyInstance, { opts, engine, access, onEndpoint }: RoutesOptions): Promise<void> {
  if (onEndpoint !== undefined) child.addHook('onRoute', (route) => { if (route.method === 'POST') onEndpoint(route.url) })
  child.removeAllContentTypeParsers()
  // The body is read as text and parsed by parseBody (JSON-RPC errors for bad JSON). JSON is
  // registered by name so that Fastify caches the parser per Content-Type (the catch-all is
  // looked up afresh on every request); other types arrive too, for checkContentType's 415.
  const asText = (_req: unknown, body: string | Buffer, done: (err: null, body: string | Buffer) => void): void => { done(null, body) }
  child.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: opts.bodyLimit }, asText)
  child.addContentTypeParser('*', { parseAs: 'string', bodyLimit: opts.bodyLimit }, asText)
  child.setErrorHandler((err: unknown, request, reply) => { answerError(err, null, request, reply, opts) })
  // Every 503 the plugin sends says when to come back (store, lock, bus, JWKS down; busy): an
  // error that names its own Retry-After (a limit, the drain) keeps it.
  const retryAfter = retryAfterSeconds(opts.retryIntervalMs)
  child.addHook('onSend', (_request, reply, payload, done) => {
    if (reply.statusCode === 503 && !reply.hasHeader('retry-after')) reply.header('retry-after', retryAfter)
    done(null, payload)
  })

  const authenticate = authenticator(opts)
  // With the resource-server form of `auth` the challenge names the metadata and
  // `auth.requiredScopes`; with `auth.authenticate` (a principal with `scopes`), or none, it is a
  // plain Bearer challenge.
  const gate: ResolvedAuth['authorize'] = opts.auth?.authorize ?? ((messages, principal, source) => { authorizeMessages(messages, principal, source) })

  child.post(opts.path, async (request, reply) => {
    checkOrigin(request, reply, opts)
    checkContentType(request)
    const principal = authenticate === null ? null : await authenticate(request)
    const parsed = parseBody(typeof request.body === 'string' ? request.body : '')
    bindLog(request, reply, postBindings(request, parsed, principal))
    if (!parsed.ok) { sendError(reply, 400, parsed.error); return reply }
    const first = parsed.messages[0]
    const id = first.kind === 'request' ? first.message.id : first.kind === 'invalid' ? first.id : null
    const sseOnly = checkPostAccept(request, id)
    if (!parsed.batch && first.kind === 'invalid') {
      sendError(reply, 400, errorResponse(first.id, first.error.code, first.error.message))
      return reply
    }
    try {
      // A single request's refusal carries its id; a batch's names the scopes of all its requests.
      gate(parsed.batch ? parsed.messages.flatMap(m => m.kind === 'request' ? [m.message] : []) : first.kind === 'request' ? [first.message] : [], principal, access)
      await engine.post(new HttpExchange(request, reply, sseOnly), parsed, principal)
    } catch (err) {
      answerError(err, parsed.batch ? null : id, request, reply, opts)
    }
    // An answer sent already has nothing to wait for: the reply is a thenable, and resolving the
    // handler's promise with it costs a lookup of `then`, a job and Fastify's Reply.then.
    return reply.sent ? undefined : reply
  })

  child.get(opts.path, async (request, reply) => {
    checkOrigin(request, reply, opts)
    noSessionNoStream(request)
    checkGetAccept(request)
    const principal = authenticate === null ? null : await authenticate(request)
    bindLog(request, reply, streamBindings(request, principal))
    await engine.get(new HttpExchange(request, reply), principal)
    return reply
  })

  child.delete(opts.path, async (request, reply) => {
    checkOrigin(request, reply, opts)
    noSessionNoStream(request)
    const principal = authenticate === null ? null : await authenticate(request)
    bindLog(request, reply, streamBindings(request, principal))
    await engine.delete(new HttpExchange(request, reply), principal)
    return reply
  })
}
