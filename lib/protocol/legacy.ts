/**
 * The handshake-era wire (2025-03-26 … 2025-11-25): `initialize` mints a session; every later
 * request names it in `Mcp-Session-Id`; the session is read once per request (under the session
 * lock when one is configured), the handler runs, and the keys it changed are written back.
 */
import { randomBytes } from 'node:crypto'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import type { Bus } from '../bus/bus.js'
import type { EventLog } from '../bus/event-log.js'
import { LOG_LEVELS, type McpContext, type McpPrincipal } from '../context.js'
import { FST_ERR_MCP_CLIENT_REQUEST, FST_ERR_MCP_CLIENT_TIMEOUT, FST_ERR_MCP_SESSION_BUSY } from '../errors.js'
import { callTool, complete, getPrompt, listPrompts, listResources, listResourceTemplates, listTools, needCapability, readResource } from '../features/methods.js'
import type { Registry } from '../features/registry.js'
import { ResponseChannel } from '../http/response.js'
import { ServerStream, startSse } from '../http/sse.js'
import { ErrorCode, errorResponse, McpError, metaProblem, resultResponse, type JsonRpcRequest, type ParsedBody, type RequestId } from '../jsonrpc/messages.js'
import { SessionLockError, SessionLockTimeoutError } from '../locks/errors.js'
import { Lease } from '../locks/keyed-fifo.js'
import type { SessionLease, SessionLock } from '../locks/session-lock.js'
import type { ResolvedOptions } from '../options.js'
import { K, SessionHandle } from '../sessions/session-handle.js'
import { LegacyContext, levelIndex, type ClientRequester, type OpenSession } from './legacy-context.js'
import { RequestAbort } from './request-abort.js'
import { isLockingStore, type SaveResult, type SessionRecord, type SessionStore } from '../sessions/session-store.js'
import { parseEventId } from '../bus/event-log.js'
import { Hub } from './hub.js'
import { allowsBatches, isLegacyVersion, negotiateLegacyVersion, supportsSsePolling } from './versions.js'

/** Visible ASCII, as the spec requires of session ids; bounded length. */
const SESSION_ID = /^[\x21-\x7E]{1,128}$/

const LOCK_LOST = 'Session lock was lost; the changes of this request were not saved.'

/** Why a request's handlers were stopped when its session lease was lost. */
class LeaseLostError extends Error {
  constructor () { super('session lock lost') }
}

/** An HTTP-level refusal: status + JSON-RPC error body. */
export class HttpRefusal extends Error {
  readonly status: number
  body: ReturnType<typeof errorResponse>
  readonly headers: Record<string, string> | undefined
  constructor (status: number, id: RequestId | null, code: number, message: string, headers?: Record<string, string>) {
    super(message)
    this.status = status
    this.body = errorResponse(id, code, message)
    this.headers = headers
  }

  /** Adds `error.data` to the body. */
  withData (data: unknown): this {
    this.body = { ...this.body, error: { ...this.body.error, data } }
    return this
  }
}

export interface LegacyDeps {
  opts: ResolvedOptions
  registry: Registry
  store: SessionStore
  lock: SessionLock | null
  bus: Bus
  eventLog: EventLog
  logger: FastifyBaseLogger
  capabilities: () => Record<string, unknown>
  maybeGc: (log: FastifyBaseLogger) => void
}

/** @internal The legacy engine. */
export class LegacyWire implements ClientRequester {
  readonly hub: Hub
  #d: LegacyDeps

  constructor (deps: LegacyDeps) {
    this.#d = deps
    this.hub = new Hub(deps.bus, deps.logger)
  }

  // ─── sessions ────────────────────────────────────────────────────────────────────────────────

  #sessionId (request: FastifyRequest, id: RequestId | null): string {
    const sid = request.headers['mcp-session-id']
    if (sid === undefined) throw new HttpRefusal(400, id, ErrorCode.InvalidRequest, 'Bad Request: Mcp-Session-Id header is required')
    if (typeof sid !== 'string' || !SESSION_ID.test(sid)) throw new HttpRefusal(400, id, ErrorCode.InvalidRequest, 'Bad Request: malformed Mcp-Session-Id header')
    return sid
  }

  #notFound (id: RequestId | null): HttpRefusal {
    return new HttpRefusal(404, id, -32001, 'Session not found')
  }

  /** Maps a store or lock failure to the 503 the client should retry after (never a 404). */
  #unavailable (err: unknown, id: RequestId | null, log: FastifyBaseLogger, sid: string): HttpRefusal {
    if (err instanceof HttpRefusal) return err
    if (err instanceof SessionLockTimeoutError) {
      log.warn({ sessionId: sid }, 'session busy: lock wait timed out')
      return new HttpRefusal(503, id, ErrorCode.ServerError, 'Another request of this session is still being processed.')
    }
    if (err instanceof SessionLockError) {
      log.error({ err, sessionId: sid }, 'session lock unavailable')
      return new HttpRefusal(503, id, ErrorCode.ServerError, 'Session lock is unavailable.')
    }
    log.error({ err, sessionId: sid }, 'session store unavailable')
    return new HttpRefusal(503, id, ErrorCode.ServerError, 'Session store is unavailable.')
  }

  /** Checks that the session may be used by this principal; 404 otherwise (never tell others it exists). */
  #checkPrincipal (handle: SessionHandle, principal: McpPrincipal | null, id: RequestId | null): void {
    const owner = handle.getProtocol<string | null>(K.principal) ?? null
    if (owner !== (principal?.id ?? null)) throw this.#notFound(id)
  }

  /**
   * Takes the session's lease and reads the session. With a store that can do both in one backend
   * call (Redis store + Redis lock) that is one round trip; otherwise existence is checked first so
   * that unknown ids never create lock keys or lock files. `record` is null (nothing held) when the
   * session does not exist.
   */
  async #lockAndLoad (request: FastifyRequest, sid: string): Promise<{ lease: SessionLease | null, record: SessionRecord | null }> {
    const { store } = this.#d
    const lock = this.#d.lock!
    if (isLockingStore(store, lock)) {
      const locked = await store.acquireAndLoad(sid, lock, { owner: request })
      return locked === null ? { lease: null, record: null } : locked
    }
    if (!await store.exists(sid)) return { lease: null, record: null }
    const lease = await lock.acquire(sid, { owner: request })
    try {
      const record = await store.load(sid)
      if (record === null) { await lease.release(); return { lease: null, record: null } }
      return { lease, record }
    } catch (err) {
      await lease.release().catch(() => {})
      throw err
    }
  }

  /** Holds a lease for the session: losing it aborts the handlers of this request. */
  #hold (s: OpenSession, lease: SessionLease | null): void {
    s.lease = lease
    if (lease === null) return
    const onLost = (): void => { if (s.lease === lease) s.lost.abort(new LeaseLostError()) }
    // The plugin's locks hand out Leases, which tell without an AbortSignal; others via the signal.
    if (lease instanceof Lease) lease.whenLost(onLost)
    else lease.signal.addEventListener('abort', onLost, { once: true })
  }

  /** Reads the session, taking the lock first when one is configured. */
  async #open (request: FastifyRequest, sid: string, principal: McpPrincipal | null, id: RequestId | null, lock: boolean): Promise<OpenSession> {
    let lease: SessionLease | null = null
    try {
      let record: SessionRecord | null
      if (lock && this.#d.lock !== null) ({ lease, record } = await this.#lockAndLoad(request, sid))
      else record = await this.#d.store.load(sid)
      if (record === null) throw this.#notFound(id)
      const handle = new SessionHandle(sid, record)
      this.#checkPrincipal(handle, principal, id)
      request.mcpSession = handle
      const s: OpenSession = { handle, lease: null, closed: false, lost: new RequestAbort() }
      this.#hold(s, lease)
      return s
    } catch (err) {
      if (lease !== null) await lease.release().catch(() => {})
      throw this.#unavailable(err, id, request.log, sid)
    }
  }

  /**
   * Writes back what the request changed and releases the lease (one backend call on the fast
   * path). A destroyed session is never re-created; a lost lease never overwrites newer state.
   * Never throws.
   */
  async #close (request: FastifyRequest, s: OpenSession): Promise<SaveResult | null> {
    if (s.closed) return null
    s.closed = true
    let saved: SaveResult | null = null
    const { store } = this.#d
    const lease = s.lease
    s.lease = null
    const sid = s.handle.id
    // The lease was taken through the store's fast path: it is handed on or released there too.
    const fast = lease !== null && isLockingStore(store, this.#d.lock) ? { store, lease } : null
    let passed = false
    try {
      if (!s.handle.dirty) {
        // Unchanged: the next request of this instance for the session may take the lease as it
        // is, without a round trip (see LockingSessionStore.passOn).
        passed = fast?.store.passOn?.(sid, fast.lease) === true
      } else {
        const guard = { version: s.handle.version, fence: lease?.fence }
        const result = fast !== null
          ? await fast.store.saveAndRelease(sid, s.handle.changes(), guard, fast.lease)
          : await store.save(sid, s.handle.changes(), guard)
        saved = result
        if (result === 'ok') s.handle.markSaved()
        else request.log.warn({ sessionId: sid, result }, result === 'gone' ? 'session ended meanwhile; changes dropped' : 'session lock lost and the session changed meanwhile; changes dropped')
      }
    } catch (err) {
      request.log.error({ err, sessionId: sid }, 'session save failed')
    } finally {
      // saveAndRelease released it already (a second release rejects "not held", which is fine here).
      if (lease !== null && !passed) await lease.release().catch(() => {})
    }
    return saved
  }

  // ─── POST ────────────────────────────────────────────────────────────────────────────────────

  /** Handles a legacy POST whose body parsed. */
  async post (request: FastifyRequest, reply: FastifyReply, body: ParsedBody & { ok: true }, principal: McpPrincipal | null, sseOnly: boolean): Promise<void> {
    const { messages, batch } = body
    const first = messages[0]
    const firstId = first.kind === 'request' ? first.message.id : first.kind === 'invalid' ? first.id : null
    const isInit = first.kind === 'request' && first.message.method === 'initialize'
    if (isInit && !batch) {
      await this.#initialize(request, reply, first.message, principal, sseOnly)
      return
    }
    if (batch && messages.some(m => m.kind === 'request' && m.message.method === 'initialize')) {
      throw new HttpRefusal(400, null, ErrorCode.InvalidRequest, 'Invalid Request: initialize cannot be part of a batch')
    }
    const sid = this.#sessionId(request, batch ? null : firstId)
    const hasRequests = batch ? messages.some(m => m.kind === 'request') : first.kind === 'request'
    if (hasRequests) this.#checkStreamCap(sid, batch ? null : firstId)
    // Answers and notifications never wait behind a running handler (that handler may be waiting for them).
    const session = await this.#open(request, sid, principal, batch ? null : firstId, hasRequests)
    try {
      const version = session.handle.getProtocol<string>(K.version) ?? '2025-03-26'
      this.#checkVersionHeader(request, batch ? null : firstId)
      if (batch && !allowsBatches(version)) {
        throw new HttpRefusal(400, null, ErrorCode.InvalidRequest, 'Invalid Request: batches are only allowed with protocol version 2025-03-26')
      }
      this.#d.maybeGc(request.log)
      const channel = new ResponseChannel(request, reply, {
        sessionId: sid,
        polling: supportsSsePolling(version),
        sseOnly,
        log: this.#d.eventLog,
        hub: this.hub
      })
      // A client that goes away before it can resume the response (no SSE event id yet) will never
      // see it: stop the handlers, so the lease is freed now rather than when they finish.
      session.lost.watch(reply.raw, channel)
      const responses: unknown[] = []
      const runs: Array<Promise<void>> = []
      for (const m of messages) {
        // The bus failing (Redis down) is a 503 like the store failing, never a 500.
        switch (m.kind) {
          case 'invalid':
            responses.push(errorResponse(m.id, m.error.code, m.error.message))
            break
          case 'response':
            await this.hub.deliverAnswer(sid, m.message as unknown as Record<string, unknown>, this.#d.opts.clientRequestTimeout)
              .catch((err: unknown) => { throw this.#busDown(err, request.log, sid) })
            break
          case 'notification':
            await this.#notification(sid, m.message.method, m.message.params ?? {})
              .catch((err: unknown) => { throw this.#busDown(err, request.log, sid) })
            break
          case 'request':
            if (batch) runs.push(this.#run(request, session, channel, m.message, principal, false).then(r => { if (r !== null) responses.push(r) }))
            else {
              const r = await this.#run(request, session, channel, m.message, principal, true)
              if (r !== null) responses.push(r)
            }
        }
      }
      if (runs.length > 0) await Promise.all(runs)
      // Saved before answering: the client's next request must see what this one changed.
      const saved = await this.#close(request, session)
      if (saved === 'fenced' || session.lost.reason instanceof LeaseLostError) {
        // The lease ran out under this request (and, when fenced, the session changed since): its
        // changes were dropped, so its results must not be reported as done.
        const dropped = responses.map(r => 'result' in (r as object)
          ? errorResponse((r as { id: RequestId }).id, ErrorCode.ServerError, LOCK_LOST)
          : r)
        channel.finish(dropped, !batch, 503)
        return
      }
      const status = !batch && messages.length === 1 && messages[0].kind === 'invalid' ? 400 : 200
      channel.finish(responses, !batch, status)
    } finally {
      session.lost.unwatch()
      // Written back above unless something threw on the way.
      if (!session.closed) await this.#close(request, session)
    }
  }

  #busDown (err: unknown, log: FastifyBaseLogger, sid: string): HttpRefusal {
    log.error({ err, sessionId: sid }, 'message bus unavailable')
    return new HttpRefusal(503, null, ErrorCode.ServerError, 'Message bus is unavailable.')
  }

  /** Unbounded growth is a bug: cap what one session may hold open on this instance. */
  #checkStreamCap (sid: string, id: RequestId | null): void {
    if (this.hub.streams(sid) >= this.#d.opts.maxStreamsPerSession) {
      throw new HttpRefusal(429, id, ErrorCode.ServerError, 'Too many requests and streams open for this session; retry later')
    }
  }

  #checkVersionHeader (request: FastifyRequest, id: RequestId | null): void {
    const v = request.headers['mcp-protocol-version']
    if (v !== undefined && !isLegacyVersion(v)) {
      throw new HttpRefusal(400, id, ErrorCode.InvalidRequest, `Bad Request: unsupported MCP-Protocol-Version ${JSON.stringify(v)}`)
    }
  }

  async #notification (sid: string, method: string, params: Record<string, unknown>): Promise<void> {
    if (method === 'notifications/cancelled') {
      const requestId = params.requestId
      if (typeof requestId === 'string' || typeof requestId === 'number') {
        await this.hub.publish(sid, { t: 'cancel', sid, requestId })
      }
    }
    // notifications/initialized, roots/list_changed, progress…: accepted, nothing to do.
  }

  async #initialize (request: FastifyRequest, reply: FastifyReply, msg: JsonRpcRequest, principal: McpPrincipal | null, sseOnly: boolean): Promise<void> {
    if (request.headers['mcp-session-id'] !== undefined) {
      throw new HttpRefusal(400, msg.id, ErrorCode.InvalidRequest, 'Invalid Request: the session is already initialized')
    }
    const p = msg.params ?? {}
    if (typeof p.protocolVersion !== 'string') throw new HttpRefusal(400, msg.id, ErrorCode.InvalidParams, 'Invalid params: protocolVersion must be a string')
    const caps = p.capabilities ?? {}
    if (typeof caps !== 'object' || caps === null || Array.isArray(caps)) throw new HttpRefusal(400, msg.id, ErrorCode.InvalidParams, 'Invalid params: capabilities must be an object')
    const clientInfo = p.clientInfo ?? null
    if (clientInfo !== null && (typeof clientInfo !== 'object' || Array.isArray(clientInfo))) throw new HttpRefusal(400, msg.id, ErrorCode.InvalidParams, 'Invalid params: clientInfo must be an object')
    const version = negotiateLegacyVersion(p.protocolVersion)
    const sid = randomBytes(24).toString('base64url')
    try {
      await this.#d.store.create(sid, {
        [K.version]: version,
        [K.capabilities]: JSON.parse(JSON.stringify(caps)),
        [K.clientInfo]: clientInfo === null ? null : JSON.parse(JSON.stringify(clientInfo)),
        [K.principal]: principal?.id ?? null
      })
    } catch (err) {
      request.log.error({ err }, 'session store unavailable')
      throw new HttpRefusal(503, msg.id, ErrorCode.ServerError, 'Session store is unavailable.')
    }
    const result: Record<string, unknown> = {
      protocolVersion: version,
      capabilities: this.#d.capabilities(),
      serverInfo: this.#d.opts.serverInfo
    }
    if (this.#d.opts.instructions !== undefined) result.instructions = this.#d.opts.instructions
    const channel = new ResponseChannel(request, reply, {
      sessionId: null,
      polling: false,
      sseOnly,
      log: this.#d.eventLog,
      hub: null,
      extraHeaders: { 'mcp-session-id': sid }
    })
    channel.finish([resultResponse(msg.id, result)], true)
  }

  // ─── running one request ─────────────────────────────────────────────────────────────────────

  /** Runs one request; resolves its response, or `null` when it was cancelled. */
  async #run (request: FastifyRequest, session: OpenSession, channel: ResponseChannel, msg: JsonRpcRequest, principal: McpPrincipal | null,
    alone: boolean): Promise<unknown> {
    const sid = session.handle.id
    // The only request of its POST shares the POST's cancellation; requests of a batch each get
    // their own (following the POST's), so that a cancel stops only its target.
    const abort = alone ? session.lost : new RequestAbort()
    const unfollow = alone ? null : session.lost.follow(abort)
    const untrack = this.hub.trackRequest(sid, msg.id, abort)
    const ctx = new LegacyContext(this, request, session, channel, msg, principal, abort)
    try {
      const result = await this.#dispatch(session.handle, msg, ctx, request.log)
      if (abort.aborted) return this.#abortedResponse(msg.id, abort)
      return resultResponse(msg.id, result)
    } catch (err) {
      if (abort.aborted) return this.#abortedResponse(msg.id, abort)
      if (err instanceof McpError) return errorResponse(msg.id, err.code, err.message, err.data)
      if (err instanceof HttpRefusal) return { ...err.body, id: msg.id }
      request.log.error({ err, method: msg.method }, 'MCP handler failed')
      return errorResponse(msg.id, ErrorCode.InternalError, 'Internal error')
    } finally {
      ctx.finished = true
      unfollow?.()
      untrack()
    }
  }

  /** A cancelled request gets no response; one stopped because its lease was lost gets an error. */
  #abortedResponse (id: RequestId, abort: RequestAbort): unknown {
    return abort.reason instanceof LeaseLostError ? errorResponse(id, ErrorCode.ServerError, LOCK_LOST) : null
  }

  async #dispatch (handle: SessionHandle, msg: JsonRpcRequest, ctx: McpContext, log: FastifyBaseLogger): Promise<Record<string, unknown>> {
    const { registry, opts } = this.#d
    const params = msg.params ?? {}
    const problem = metaProblem(params)
    if (problem !== null) throw new McpError(ErrorCode.InvalidParams, problem)
    const caps = this.#d.capabilities()
    switch (msg.method) {
      case 'ping': return {}
      case 'initialize': throw new McpError(ErrorCode.InvalidRequest, 'Invalid Request: the session is already initialized')
      case 'tools/list': needCapability(caps, 'tools', msg.method); return listTools(registry, params, opts.pageSize)
      case 'tools/call': needCapability(caps, 'tools', msg.method); return await callTool(registry, params, ctx, log)
      case 'resources/list': needCapability(caps, 'resources', msg.method); return listResources(registry, params, opts.pageSize)
      case 'resources/templates/list': needCapability(caps, 'resources', msg.method); return listResourceTemplates(registry, params, opts.pageSize)
      case 'resources/read': needCapability(caps, 'resources', msg.method); return await readResource(registry, params, ctx, (uri) => new McpError(ErrorCode.ResourceNotFound, 'Resource not found', { uri }))
      case 'resources/subscribe':
      case 'resources/unsubscribe': {
        needCapability(caps, 'resources', msg.method)
        if (typeof params.uri !== 'string') throw new McpError(ErrorCode.InvalidParams, 'Invalid params: uri must be a string')
        const subs = new Set(handle.getProtocol<string[]>(K.subscriptions) ?? [])
        if (msg.method === 'resources/subscribe') subs.add(params.uri)
        else subs.delete(params.uri)
        handle.setProtocol(K.subscriptions, [...subs])
        // Whichever instance holds the session's GET stream learns the new set.
        await this.hub.publish(handle.id, { t: 'subs', sid: handle.id, uris: [...subs] })
        return {}
      }
      case 'prompts/list': needCapability(caps, 'prompts', msg.method); return listPrompts(registry, params, opts.pageSize)
      case 'prompts/get': needCapability(caps, 'prompts', msg.method); return await getPrompt(registry, params, ctx)
      case 'completion/complete': needCapability(caps, 'completions', msg.method); return await complete(registry, params)
      case 'logging/setLevel': {
        if (levelIndex(params.level) === -1) throw new McpError(ErrorCode.InvalidParams, `Invalid params: level must be one of ${LOG_LEVELS.join(', ')}`)
        handle.setProtocol(K.logLevel, params.level)
        return {}
      }
      default: throw new McpError(ErrorCode.MethodNotFound, `Method not found: ${msg.method}`)
    }
  }

  /** @internal Default `retry` of `ctx.closeSSEStream()`. */
  get retryInterval (): number { return this.#d.opts.retryInterval }

  /**
   * @internal Sends a request to the client on the POST's stream and waits for the answer, which arrives in
   * a separate POST (on any process, through the bus). With a lock, the session is saved and the
   * lease released while waiting, then taken back and re-read before the handler goes on.
   */
  async clientRequest (request: FastifyRequest, session: OpenSession, channel: ResponseChannel, method: string, params: Record<string, unknown>, abort: RequestAbort): Promise<Record<string, unknown>> {
    const signal = abort.signal
    const sid = session.handle.id
    if (signal.aborted) throw signal.reason
    if (this.hub.pending(sid) >= this.#d.opts.maxPendingClientRequests) {
      throw new FST_ERR_MCP_CLIENT_REQUEST(method, 'too many pending requests to the client in this session')
    }
    const id = this.hub.nextClientRequestId()
    // Registered before any await, so that the cap above counts requests made in the same turn.
    const { answer, cancel } = this.hub.waitForAnswer(sid, id)
    try {
      await this.hub.ready(sid)
    } catch (err) {
      answer.catch(() => {})
      cancel(err as Error)
      throw err
    }
    const timeout = this.#d.opts.clientRequestTimeout
    const timer = setTimeout(() => cancel(new FST_ERR_MCP_CLIENT_TIMEOUT(method, timeout)), timeout)
    timer.unref()
    const onAbort = (): void => cancel(signal.reason instanceof Error ? signal.reason : new Error('aborted'))
    signal.addEventListener('abort', onAbort, { once: true })
    const locked = session.lease !== null
    try {
      if (locked) await this.#close(request, session)
      channel.emit({ jsonrpc: '2.0', id, method, params })
      const msg = await answer
      if (msg.error !== undefined) {
        const e = msg.error as { message?: string }
        throw new FST_ERR_MCP_CLIENT_REQUEST(method, String(e.message ?? 'error'))
      }
      return (msg.result ?? {}) as Record<string, unknown>
    } finally {
      clearTimeout(timer)
      signal.removeEventListener('abort', onAbort)
      if (locked) await this.#reacquire(request, session, method)
    }
  }

  async #reacquire (request: FastifyRequest, session: OpenSession, method: string): Promise<void> {
    const sid = session.handle.id
    try {
      const { lease, record } = await this.#lockAndLoad(request, sid)
      if (record === null) throw new Error('session ended while waiting for the client')
      session.closed = false
      this.#hold(session, lease)
      session.handle.reload(record)
    } catch (err) {
      request.log.warn({ err, sessionId: sid, method }, 'could not take the session back after the client answered')
      throw new FST_ERR_MCP_SESSION_BUSY((err as Error).message)
    }
  }

  // ─── GET and DELETE ──────────────────────────────────────────────────────────────────────────

  /**
   * GET: the session's standalone stream. With `Last-Event-ID` naming one of the session's
   * streams, the rest of that stream is replayed first (from the event log, on any instance): a
   * POST stream is then followed until its response, a GET stream continues as the new
   * standalone stream. An id that names no stream of this session replays nothing.
   */
  async get (request: FastifyRequest, reply: FastifyReply, principal: McpPrincipal | null): Promise<void> {
    const sid = this.#sessionId(request, null)
    this.#checkStreamCap(sid, null)
    const session = await this.#open(request, sid, principal, null, false)
    this.#checkVersionHeader(request, null)
    const version = session.handle.getProtocol<string>(K.version) ?? '2025-03-26'
    const subscriptions = session.handle.getProtocol<string[]>(K.subscriptions) ?? []
    const lastEventId = request.headers['last-event-id']
    const parsed = typeof lastEventId === 'string' ? parseEventId(lastEventId) : null
    if (parsed !== null && parsed.streamId.startsWith('p-')) {
      const follower = await this.hub.follow(sid, lastEventId as string, reply.raw)
        .catch((err: unknown) => { throw this.#busDown(err, request.log, sid) })
      let replay
      try {
        replay = await this.#d.eventLog.replay(sid, lastEventId as string)
      } catch (err) {
        follower.cancel()
        throw this.#unavailable(err, null, request.log, sid)
      }
      if (replay !== null) {
        startSse(reply)
        follower.start(replay.events, replay.finished)
        return
      }
      follower.cancel()
    }
    // One GET stream per session, across instances: a new one takes over (the old connection is
    // told to retry), so a client that reconnects before the server noticed its old connection
    // drop is not locked out, and each message for the session still reaches one stream.
    let backlog: Array<{ id: string, data: string }> = []
    let resumeId: string | undefined
    if (parsed !== null && parsed.streamId.startsWith('g-')) {
      const replay = await this.#d.eventLog.replay(sid, lastEventId as string).catch(() => null)
      if (replay !== null) { backlog = replay.events; resumeId = replay.streamId }
    }
    const polling = supportsSsePolling(version)
    const stream = new ServerStream({
      sessionId: sid,
      kind: 'g',
      id: resumeId,
      log: this.#d.eventLog,
      logger: request.log,
      keepAlive: this.#d.opts.keepAliveInterval,
      resumable: polling
    })
    try {
      await this.hub.ready(sid)
      await this.hub.claimGetStream(sid, stream, subscriptions, this.#d.opts.retryInterval)
    } catch (err) {
      if (this.hub.getStream(sid) === stream) this.hub.setGetStream(sid, null)
      throw this.#busDown(err, request.log, sid)
    }
    startSse(reply)
    stream.attach(reply.raw, () => {
      if (this.hub.getStream(sid) === stream) this.hub.setGetStream(sid, null)
    })
    for (const e of backlog) reply.raw.write(`id: ${e.id}\ndata: ${e.data}\n\n`)
    if (resumeId !== undefined) return
    if (polling) stream.prime()
    else reply.raw.write(': stream open\n\n')
  }

  /** DELETE: ends the session (under the lock, so no running request writes it back). */
  async delete (request: FastifyRequest, reply: FastifyReply, principal: McpPrincipal | null): Promise<void> {
    const sid = this.#sessionId(request, null)
    const session = await this.#open(request, sid, principal, null, true)
    try {
      this.#checkVersionHeader(request, null)
      await this.#d.store.destroy(sid)
    } catch (err) {
      throw this.#unavailable(err, null, request.log, sid)
    } finally {
      const lease = session.lease
      if (lease !== null) await lease.release().catch(() => {})
    }
    await this.#d.eventLog.dropSession(sid).catch((err: unknown) => request.log.warn({ err, sessionId: sid }, 'event log cleanup failed'))
    await this.hub.publish(sid, { t: 'ended', sid })
    reply.code(200).send()
  }
}
