/**
 * The handshake-era wire (2025-03-26 … 2025-11-25): `initialize` mints a session; every later
 * POST names it in `Mcp-Session-Id`. A POST opens the session's state scope (under the session
 * lock when one is configured and the POST carries requests, unless they are all read-only tool
 * calls: those read a snapshot, see `state/snapshot.ts`), runs its messages, writes back what
 * they changed, and answers. What each message does is in `dispatch.ts`, GET and DELETE in
 * `streams.ts`, requests to the client in `client-requests.ts`, `initialize` in `initialize.ts`.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { EventLog } from '../../bus/event-log.js'
import type { Hub } from '../../bus/hub.js'
import type { Tracking } from '../../bus/inflight.js'
import type { McpPrincipal } from '../../context.js'
import type { Registry } from '../../features/registry.js'
import { ErrorCode, McpError, errorResponse, type RequestId } from '../../jsonrpc/errors.js'
import type { ToolLimiter } from '../../limits/limiter.js'
import { resultResponse, type JsonRpcRequest, type ParsedBody } from '../../jsonrpc/messages.js'
import type { ResolvedOptions } from '../../options.js'
import { SessionEndedError } from '../../bus/session-ended.js'
import { K } from '../../sessions/session-handle.js'
import type { Ran, StateEngine } from '../../state/engine.js'
import type { StateScope } from '../../state/state-scope.js'
import { allKept, type OpenMode, type UnitOfWork } from '../../state/unit-of-work.js'
import { shownId } from '../../util/shown-id.js'
import { NO_POST, type PostTrace, type Telemetry } from '../../telemetry/index.js'
import { ClientRequests } from './client-requests.js'
import type { Exchange, ResponseChannel } from '../exchange.js'
import type { KeyedRunner } from '../../features/keyed-call.js'
import type { HandleCalls } from '../handle-calls.js'
import { HandshakeContext } from './context.js'
import { changesNothing, dispatch, notification } from './dispatch.js'
import { initialize } from './initialize.js'
import { busDown, busUp, checkVersionHeader, ownedBy, refuse, sessionIdOf } from './session.js'
import { refusalAnswer } from '../refusals.js'
import { stoppedAnswer, unkeptResponses } from '../unkept-answers.js'
import { closingHeaders, stoppedByDrain, stoppedError, stoppedResponse } from '../drain.js'
import { RequestAbort } from '../request-abort.js'
import { failedAnswer, postWithoutSession, type SessionlessDeps } from './sessionless.js'
import { allowsBatches, supportsSsePolling } from '../versions.js'

/** The answer of a POST whose session was opened: nothing is known of the client's interest yet. */
const NOT_STARTED = { done: false, resumable: false }

/** @internal What the handshake-era wire is built from. */
export interface HandshakeDeps {
  opts: ResolvedOptions
  registry: Registry
  /** The state engine: sessions, handles, units of work. */
  state: StateEngine
  hub: Hub
  eventLog: EventLog
  logger: FastifyBaseLogger
  capabilities: () => Record<string, unknown>
  maybeGc: (log: FastifyBaseLogger) => void
  /** Tool calls on state handles, and `ctx.handles`. */
  handles: HandleCalls
  /** The tool call limits (the `limits` option and the definitions' own). */
  limiter: ToolLimiter
  /** Idempotency keys on tool calls (absent: `idempotency: false`). */
  keyed?: KeyedRunner
  /** Spans of requests to the client and of client answers. */
  telemetry: Telemetry
}

/** The requests of one POST, registered as in flight before it waits for the session. */
interface Tracked {
  /** The POST's cancellation. */
  abort: RequestAbort
  /** The request of a POST that is not a batch (no map for it: most POSTs carry one request). */
  only: TrackedRequest | null
  /** The requests of a batch. */
  batch: Map<JsonRpcRequest, TrackedRequest> | null
}

/** One request in flight: its cancellation, and its registration (`untrack()` is idempotent). */
interface TrackedRequest { abort: RequestAbort, tracking: Tracking }

/** The messages of one POST, with what they share. */
interface PostRun {
  exchange: Exchange
  scope: StateScope
  /** The POST's unit of work: its session, and the handles its calls work on. */
  unit: UnitOfWork
  channel: ResponseChannel
  /** Aborted when the lease is lost, or the client went away for good. */
  abort: RequestAbort
  /** Each request's cancellation and its registration as in flight. */
  tracked: Tracked
  principal: McpPrincipal | null
  /** The HTTP status of a single request's answer (an error may name one, e.g. 503). */
  status: number
  /** Headers a single request's error names (e.g. `Retry-After` on a 429). */
  headers?: Record<string, string>
  /** The POST's spans and measures. */
  trace: PostTrace
  /** Whether the POST is a batch (each request has a span context of its own). */
  batch: boolean
  /** The responses to send, so far. */
  responses: unknown[]
  /** The request each response answers (`null`: an invalid message's). */
  members: Array<JsonRpcRequest | null>
}

/** What a POST's run resolves: what to answer, once its unit of work ended. */
interface Served {
  channel: ResponseChannel
  responses: unknown[]
  members: Array<JsonRpcRequest | null>
  status: number
  headers?: Record<string, string>
}

/** @internal The handshake-era wire. */
export class HandshakeWire {
  readonly #d: HandshakeDeps
  readonly #clientRequests: ClientRequests
  readonly #sessionless: SessionlessDeps

  constructor (deps: HandshakeDeps) {
    this.#d = deps
    this.#clientRequests = new ClientRequests(deps.hub, deps.opts, deps.telemetry)
    this.#sessionless = { opts: deps.opts, state: deps.state, handles: deps.handles, maybeGc: deps.maybeGc, dispatch: (msg, ctx, log) => dispatch(deps, null, msg, ctx, log) }
  }

  /** Handles a handshake-era POST whose body parsed: admit → run in the session's unit of work → answer. */
  async post (exchange: Exchange, body: ParsedBody & { ok: true }, principal: McpPrincipal | null, trace: PostTrace = NO_POST): Promise<void> {
    const { messages, batch } = body
    const first = messages[0]
    if (first.kind === 'request' && first.message.method === 'initialize' && !batch) {
      await initialize(this.#d, exchange, first.message, principal)
      return
    }
    const requests = this.#checkPost(body)
    const request = exchange.request
    // No session named: served without one (sessionless.ts), unless the app wants the strict 400.
    if (request.headers['mcp-session-id'] === undefined && !this.#d.opts.requireSessionId) {
      await postWithoutSession(this.#sessionless, exchange, body, principal, trace)
      return
    }
    const sid = sessionIdOf(request)
    if (requests > 0 && this.#d.hub.streams(sid) + requests > this.#d.opts.maxStreamsPerSession) throw refuse.tooManyStreams()
    // Watched from before the lock wait: a client that leaves while queued gives up its place at once.
    const abort = new RequestAbort()
    abort.watch(exchange.connection, NOT_STARTED)
    // Counted (and cancellable) from now on, in the same turn as the cap check above: requests that
    // arrive together cannot all pass it while waiting for the session.
    const tracked = this.#track(sid, body, abort)
    // Stopped at the drain deadline of app.close(): answered with an error (`#abortedResponse`).
    const unfollow = exchange.shutdown?.follow(abort)
    try {
      const ran = await this.#d.state.run({ subject: 'session', key: sid, mode: this.#modeOf(body, requests), admit: ownedBy(principal) },
        { owner: request, abort, log: request.log },
        (scope, unit) => this.#serve(exchange, body, scope as StateScope, unit, tracked, principal, trace))
      this.#answer(exchange, body, ran, abort, trace)
    } finally {
      abort.unwatch()
      unfollow?.()
      tracked.only?.tracking.untrack()
      if (tracked.batch !== null) for (const r of tracked.batch.values()) r.tracking.untrack()
    }
  }

  /**
   * How the POST opens its session: under the lock when it carries requests, unless they change
   * nothing — pings, lists, read-only tool calls (a snapshot, without the lock); answers and
   * notifications only read it (they never wait behind a running handler: that handler may be
   * waiting for them).
   */
  #modeOf (body: ParsedBody & { ok: true }, requests: number): OpenMode {
    if (requests === 0) return 'read'
    return changesNothing(body.messages, this.#d.registry.tools) ? 'snapshot' : 'lock'
  }

  /** Answers the POST from how its run went (see `Ran`). */
  #answer (exchange: Exchange, body: ParsedBody & { ok: true }, ran: Ran<Served>, abort: RequestAbort, trace: PostTrace): void {
    const request = exchange.request
    switch (ran.status) {
      case 'missing': throw refuse.notFound()
      case 'refused': throw refusalAnswer(ran.refusal, ran.subject, ran.cause)
      case 'gave-up':
        // Given up while queued: its session ended → 404; a client that left hears nothing; a
        // cancelled request, like a cancelled running one, gets no response (202).
        if (stoppedByDrain(ran.reason)) throw stoppedError(this.#d.opts.retryIntervalMs)
        if (ran.reason instanceof SessionEndedError) throw refuse.notFound()
        request.log.debug({ sessionId: shownId(sessionIdOf(request)), reason: String((ran.reason as Error)?.message ?? ran.reason) }, 'request given up while waiting for the session lock')
        if (!exchange.connection.destroyed) exchange.empty(202)
        return
    }
    const served = ran.value
    trace.closed(ran.closedMs)
    let { responses, status, headers } = served
    if (!allKept(ran.outcome.parts)) {
      // What the requests changed was not kept: their results must not be reported as done.
      const unkept = unkeptResponses(responses, served.members, ran.outcome)
      for (const e of unkept.errors) trace.failed(new McpError(e.code, e.message, e.data, e.status), true)
      responses = unkept.responses
      if (unkept.status !== undefined) { status = unkept.status; headers = unkept.headers }
    }
    served.channel.finish(responses, !body.batch, body.batch ? 200 : status, body.batch ? undefined : headers)
  }

  /**
   * Registers the POST's requests as in flight. The only request of a POST shares the POST's
   * cancellation; requests of a batch each get their own (following the POST's), so that a cancel
   * stops only its target.
   */
  #track (sid: string, body: ParsedBody & { ok: true }, abort: RequestAbort): Tracked {
    if (!body.batch) {
      const m = body.messages[0]
      const only = m.kind === 'request' ? { abort, tracking: this.#d.hub.inflight.track(sid, m.message.id, abort) } : null
      return { abort, only, batch: null }
    }
    const batch = new Map<JsonRpcRequest, TrackedRequest>()
    for (const m of body.messages) {
      if (m.kind !== 'request') continue
      const own = new RequestAbort()
      const unfollow = abort.follow(own)
      const tracking = this.#d.hub.inflight.track(sid, m.message.id, own)
      batch.set(m.message, { abort: own, tracking: { untrack: () => { tracking.untrack(); unfollow() } } })
    }
    return { abort, only: null, batch }
  }

  /** Refuses what no session could serve; returns the number of requests (a batch counts each). */
  #checkPost (body: ParsedBody & { ok: true }): number {
    const { messages, batch } = body
    if (batch && messages.length > this.#d.opts.maxBatchSize) {
      throw new McpError(ErrorCode.InvalidRequest, `Invalid Request: a batch holds at most ${this.#d.opts.maxBatchSize} messages`, undefined, 400)
    }
    let requests = 0
    for (const m of messages) {
      if (m.kind !== 'request') continue
      if (m.message.method === 'initialize' && batch) {
        throw new McpError(ErrorCode.InvalidRequest, 'Invalid Request: initialize cannot be part of a batch', undefined, 400)
      }
      requests++
    }
    return requests
  }

  /** Runs the messages of a POST on its open session; resolves what to answer (the unit then ends). */
  async #serve (exchange: Exchange, body: ParsedBody & { ok: true }, scope: StateScope, unit: UnitOfWork, tracked: Tracked,
    principal: McpPrincipal | null, trace: PostTrace): Promise<Served> {
    const abort = tracked.abort
    const request = exchange.request
    request.mcpSession = scope.handle
    const locked = scope.held
    // How long it waited for the session's lock (with the read that comes with it), for the log.
    if (locked) exchange.bindLog?.({ mcpLockWaitMs: Math.round(unit.waitedMs * 10) / 10 })
    trace.opened(unit.waitedMs, locked)
    const sid = scope.id
    const version = scope.handle.getProtocol<string>(K.version) ?? '2025-03-26'
    trace.version(version)
    checkVersionHeader(request)
    if (body.batch && !allowsBatches(version)) {
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
    const run: PostRun = { exchange, scope, unit, channel, abort, tracked, principal, status: 200, trace, batch: body.batch, responses: [], members: [] }
    // A lone request (most POSTs) is run without the loop over a batch's messages and its frame.
    const only = body.batch ? null : body.messages[0]
    if (only?.kind === 'request') {
      const r = await this.#run(run, only.message)
      if (r !== null) { run.responses.push(r); run.members.push(only.message) }
    } else {
      await this.#messages(run, body)
    }
    const status = body.batch ? 200 : body.messages[0].kind === 'invalid' ? 400 : run.status
    // Saved before answering (the unit ends when this resolves): the client's next request must
    // see what this one changed. A request that was stopped keeps nothing.
    return { channel, responses: run.responses, members: run.members, status, headers: run.headers }
  }

  /** Runs the messages of a POST in order, collecting the responses to send. */
  async #messages (run: PostRun, body: ParsedBody & { ok: true }): Promise<void> {
    const { hub, opts } = this.#d
    const sid = run.scope.id
    const log = run.exchange.request.log
    const { responses, members } = run
    for (const m of body.messages) {
      // The bus failing (Redis down) is a 503 like the store failing, never a 500.
      switch (m.kind) {
        case 'invalid':
          responses.push(errorResponse(m.id, m.error.code, m.error.message))
          members.push(null)
          break
        case 'response': {
          const answer = this.#d.telemetry.answer(m.message.id, sid)
          await hub.answers.deliver(sid, m.message as unknown as Record<string, unknown>, opts.clientRequestTimeoutMs, (tag) => { answer.kept(tag) })
            .then((published) => { answer.end(); if (published) busUp(log, hub) }, (err: unknown) => { answer.end(err); throw busDown(err, log, sid, hub) })
          break
        }
        case 'notification':
          await notification(hub, sid, m.message.method, m.message.params ?? {})
            .then((published) => { if (published) busUp(log, hub) }, (err: unknown) => { throw busDown(err, log, sid, hub) })
          break
        case 'request': {
          // One at a time, in order, even in a batch: each request of the session sees what the
          // one before it changed (parallel members would overwrite each other's changes).
          const r = await this.#run(run, m.message)
          if (r !== null) { responses.push(r); members.push(m.message) }
        }
      }
    }
  }

  /** Runs one request; resolves its response, or `null` when it was cancelled. */
  async #run (run: PostRun, msg: JsonRpcRequest): Promise<unknown> {
    const request = run.exchange.request
    const { abort, tracking } = (run.tracked.batch?.get(msg) ?? run.tracked.only) as TrackedRequest
    const ctx = new HandshakeContext(this.#clientRequests, run.scope, {
      request,
      unit: run.unit,
      member: msg,
      principal: run.principal,
      requestId: msg.id,
      meta: msg.params?._meta as Record<string, unknown> | undefined,
      channel: run.channel,
      abort,
      handles: this.#d.handles.minter
    })
    try {
      // A lone request runs in the POST's span context, which the engine entered: only a batch's
      // requests enter their own (no closure, no lookup of the active context otherwise).
      const result = await (run.batch
        ? run.trace.run(msg, () => dispatch(this.#d, run.scope, msg, ctx, request.log))
        : dispatch(this.#d, run.scope, msg, ctx, request.log))
      if (abort.aborted) return this.#abortedResponse(run, msg.id, abort)
      const response = resultResponse(msg.id, result)
      run.trace.answered(msg, response, 200)
      return response
    } catch (err) {
      if (abort.aborted) return this.#abortedResponse(run, msg.id, abort)
      return failedAnswer(run, msg, err, request.log)
    } finally {
      ctx.finished = true
      tracking.untrack()
    }
  }

  /**
   * A cancelled request gets no response; one stopped because its lease was lost, because its
   * session ended, or at the drain deadline of app.close(), gets an error.
   */
  #abortedResponse (run: PostRun, id: RequestId, abort: RequestAbort): unknown {
    if (stoppedByDrain(abort.reason)) {
      run.status = 503
      run.headers = closingHeaders(this.#d.opts.retryIntervalMs)
      return stoppedResponse(id)
    }
    const unkept = stoppedAnswer(abort.reason)
    if (unkept === null) return null
    run.status = unkept.status
    return errorResponse(id, unkept.code, unkept.message)
  }
}
