/**
 * The handshake-era wire (2025-03-26 … 2025-11-25): `initialize` mints a session; every later
 * POST names it in `Mcp-Session-Id`. A POST opens the session's state scope (under the session
 * lock when one is configured and the POST carries requests), runs its messages, writes back what
 * they changed, and answers. GET and DELETE are in `legacy-streams.ts`, requests to the client in
 * `client-requests.ts`, `initialize` in `legacy-initialize.ts`.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { EventLog } from '../bus/event-log.js'
import type { Hub } from '../bus/hub.js'
import { LOG_LEVELS, type McpPrincipal } from '../context.js'
import { METHODS, methodNotFound, needCapability } from '../features/method-table.js'
import type { Registry } from '../features/registry.js'
import { ErrorCode, McpError, errorReply, errorResponse, type RequestId } from '../jsonrpc/errors.js'
import { metaProblem, resultResponse, type JsonRpcRequest, type ParsedBody } from '../jsonrpc/messages.js'
import type { ResolvedOptions } from '../options.js'
import { K } from '../sessions/session-handle.js'
import type { StateBackend, StateScope } from '../state/state-scope.js'
import { ClientRequests } from './client-requests.js'
import type { Exchange, ResponseChannel } from './exchange.js'
import { LegacyContext } from './legacy-context.js'
import { initialize } from './legacy-initialize.js'
import { busDown, checkVersionHeader, openSession, refuse, reportClose, sessionIdOf } from './legacy-session.js'
import { RequestAbort } from './request-abort.js'
import { allowsBatches, supportsSsePolling } from './versions.js'

const LOCK_LOST = 'Session lock was lost; the changes of this request were not saved.'

/** Why a request's handlers were stopped when its session lease was lost. */
class LeaseLostError extends Error {
  constructor () { super('session lock lost') }
}

/** What the handshake-era wire is built from. */
export interface LegacyDeps {
  opts: ResolvedOptions
  registry: Registry
  sessions: StateBackend
  hub: Hub
  eventLog: EventLog
  logger: FastifyBaseLogger
  capabilities: () => Record<string, unknown>
  maybeGc: (log: FastifyBaseLogger) => void
}

/** The messages of one POST, with what they share. */
interface PostRun {
  exchange: Exchange
  scope: StateScope
  channel: ResponseChannel
  /** Aborted when the lease is lost, or the client went away for good. */
  abort: RequestAbort
  principal: McpPrincipal | null
}

/** @internal The legacy engine. */
export class LegacyWire {
  readonly #d: LegacyDeps
  readonly #clientRequests: ClientRequests

  constructor (deps: LegacyDeps) {
    this.#d = deps
    this.#clientRequests = new ClientRequests(deps.hub, deps.opts)
  }

  /** Handles a legacy POST whose body parsed. */
  async post (exchange: Exchange, body: ParsedBody & { ok: true }, principal: McpPrincipal | null): Promise<void> {
    const { messages, batch } = body
    const first = messages[0]
    const request = exchange.request
    if (first.kind === 'request' && first.message.method === 'initialize' && !batch) {
      await initialize(this.#d, exchange, first.message, principal)
      return
    }
    if (batch && messages.some(m => m.kind === 'request' && m.message.method === 'initialize')) {
      throw new McpError(ErrorCode.InvalidRequest, 'Invalid Request: initialize cannot be part of a batch', undefined, 400)
    }
    const sid = sessionIdOf(request)
    const hasRequests = batch ? messages.some(m => m.kind === 'request') : first.kind === 'request'
    if (hasRequests && this.#d.hub.streams(sid) >= this.#d.opts.maxStreamsPerSession) throw refuse.tooManyStreams()
    // Answers and notifications never wait behind a running handler (that handler may be waiting for them).
    const scope = await openSession(this.#d.sessions, request, sid, principal, hasRequests)
    const abort = new RequestAbort()
    scope.onLost(() => { abort.abort(new LeaseLostError()) })
    try {
      const version = scope.handle.getProtocol<string>(K.version) ?? '2025-03-26'
      checkVersionHeader(request)
      if (batch && !allowsBatches(version)) {
        throw new McpError(ErrorCode.InvalidRequest, 'Invalid Request: batches are only allowed with protocol version 2025-03-26', undefined, 400)
      }
      this.#d.maybeGc(request.log)
      const channel = exchange.channel({
        sessionId: sid,
        polling: supportsSsePolling(version),
        log: this.#d.eventLog,
        publish: (m) => { this.#d.hub.topics.publish(sid, m).catch(() => {}) }
      })
      // A client that goes away before it can resume the response (no SSE event id yet) will never
      // see it: stop the handlers, so the lease is freed now rather than when they finish.
      abort.watch(exchange.connection, channel)
      const run: PostRun = { exchange, scope, channel, abort, principal }
      const responses = await this.#messages(run, body)
      // Saved before answering: the client's next request must see what this one changed.
      const closed = await scope.close()
      reportClose(closed, request.log, sid)
      if (closed.status === 'fenced' || abort.reason instanceof LeaseLostError) {
        // The lease ran out under this request (and, when fenced, the session changed since): its
        // changes were dropped, so its results must not be reported as done.
        channel.finish(responses.map(r => 'result' in (r as object)
          ? errorResponse((r as { id: RequestId }).id, ErrorCode.ServerError, LOCK_LOST)
          : r), !batch, 503)
        return
      }
      const status = !batch && messages.length === 1 && messages[0].kind === 'invalid' ? 400 : 200
      channel.finish(responses, !batch, status)
    } finally {
      abort.unwatch()
      // Written back above unless something threw on the way.
      reportClose(await scope.close(), request.log, sid)
    }
  }

  /** Runs the messages of a POST in order; resolves the responses to send. */
  async #messages (run: PostRun, body: ParsedBody & { ok: true }): Promise<unknown[]> {
    const { hub, opts } = this.#d
    const sid = run.scope.id
    const log = run.exchange.request.log
    const responses: unknown[] = []
    const batchRuns: Array<Promise<void>> = []
    for (const m of body.messages) {
      // The bus failing (Redis down) is a 503 like the store failing, never a 500.
      switch (m.kind) {
        case 'invalid':
          responses.push(errorResponse(m.id, m.error.code, m.error.message))
          break
        case 'response':
          await hub.answers.deliver(sid, m.message as unknown as Record<string, unknown>, opts.clientRequestTimeout)
            .catch((err: unknown) => { throw busDown(err, log, sid) })
          break
        case 'notification':
          await this.#notification(sid, m.message.method, m.message.params ?? {})
            .catch((err: unknown) => { throw busDown(err, log, sid) })
          break
        case 'request':
          if (body.batch) batchRuns.push(this.#run(run, m.message, false).then(r => { if (r !== null) responses.push(r) }))
          else {
            const r = await this.#run(run, m.message, true)
            if (r !== null) responses.push(r)
          }
      }
    }
    if (batchRuns.length > 0) await Promise.all(batchRuns)
    return responses
  }

  async #notification (sid: string, method: string, params: Record<string, unknown>): Promise<void> {
    if (method === 'notifications/cancelled') {
      const requestId = params.requestId
      if (typeof requestId === 'string' || typeof requestId === 'number') {
        await this.#d.hub.topics.publish(sid, { t: 'cancel', sid, requestId })
      }
    }
    // notifications/initialized, roots/list_changed, progress…: accepted, nothing to do.
  }

  /** Runs one request; resolves its response, or `null` when it was cancelled. */
  async #run (run: PostRun, msg: JsonRpcRequest, alone: boolean): Promise<unknown> {
    const request = run.exchange.request
    // The only request of its POST shares the POST's cancellation; requests of a batch each get
    // their own (following the POST's), so that a cancel stops only its target.
    const abort = alone ? run.abort : new RequestAbort()
    const unfollow = alone ? null : run.abort.follow(abort)
    const untrack = this.#d.hub.inflight.track(run.scope.id, msg.id, abort)
    const ctx = new LegacyContext(this.#clientRequests, run.scope, {
      request, principal: run.principal, requestId: msg.id, meta: msg.params?._meta as Record<string, unknown> | undefined, channel: run.channel, abort
    })
    try {
      const result = await this.#dispatch(run.scope, msg, ctx, request.log)
      if (abort.aborted) return this.#abortedResponse(msg.id, abort)
      return resultResponse(msg.id, result)
    } catch (err) {
      if (abort.aborted) return this.#abortedResponse(msg.id, abort)
      return errorReply(err, msg.id, { status: 200, log: request.log, msg: 'MCP handler failed', what: { method: msg.method } }).body
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

  async #dispatch (scope: StateScope, msg: JsonRpcRequest, ctx: LegacyContext, log: FastifyBaseLogger): Promise<Record<string, unknown>> {
    const params = msg.params ?? {}
    const problem = metaProblem(params)
    if (problem !== null) throw new McpError(ErrorCode.InvalidParams, problem)
    const caps = this.#d.capabilities()
    const entry = METHODS.get(msg.method)
    if (entry !== undefined) {
      needCapability(caps, entry.capability, msg.method)
      return await entry.handler({
        registry: this.#d.registry, params, ctx: entry.context ? ctx : null, pageSize: this.#d.opts.pageSize, log,
        resourceNotFound: (uri) => new McpError(ErrorCode.ResourceNotFound, 'Resource not found', { uri })
      })
    }
    switch (msg.method) {
      case 'ping': return {}
      case 'initialize': throw new McpError(ErrorCode.InvalidRequest, 'Invalid Request: the session is already initialized')
      case 'resources/subscribe':
      case 'resources/unsubscribe':
        needCapability(caps, 'resources', msg.method)
        return await this.#subscribe(scope, msg.method, params)
      case 'logging/setLevel':
        if (!LOG_LEVELS.includes(params.level as never)) {
          throw new McpError(ErrorCode.InvalidParams, `Invalid params: level must be one of ${LOG_LEVELS.join(', ')}`)
        }
        scope.handle.setProtocol(K.logLevel, params.level)
        return {}
      default: throw methodNotFound(msg.method)
    }
  }

  async #subscribe (scope: StateScope, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (typeof params.uri !== 'string') throw new McpError(ErrorCode.InvalidParams, 'Invalid params: uri must be a string')
    const subs = new Set(scope.handle.getProtocol<string[]>(K.subscriptions) ?? [])
    if (method === 'resources/subscribe') subs.add(params.uri)
    else subs.delete(params.uri)
    scope.handle.setProtocol(K.subscriptions, [...subs])
    // Whichever instance holds the session's GET stream learns the new set.
    await this.#d.hub.topics.publish(scope.id, { t: 'subs', sid: scope.id, uris: [...subs] })
    return {}
  }
}
