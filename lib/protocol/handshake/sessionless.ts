/**
 * Handshake-era requests that carry no `Mcp-Session-Id` (other than `initialize`): served without a
 * session, as the official TypeScript v2, Go, C#, Python and Java SDKs serve them. Some clients in
 * use never send back the id `initialize` gave them, or start a session per call; refusing them
 * with 400 makes the server unusable to them. What needs no session works: the lists, resources,
 * prompts, tools, and state handles (they travel in the arguments, are checked against the
 * principal and run under their lock like on any request). What needs one answers so: a tool
 * declared `session: 'required'` with `isError`, subscriptions and `logging/setLevel` with a
 * JSON-RPC error, requests to the client (elicitation, sampling, roots) with an error to the
 * handler, as on a session whose client cannot receive them. `sessions.requireSessionId` keeps the
 * strict 400 instead.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { ElicitResult, FormElicitParams, LogLevel, McpPrincipal, Root, SamplingParams, SamplingResult, UrlElicitParams } from '../../context.js'
import { FST_ERR_MCP_NO_SESSION } from '../../errors.js'
import { ErrorCode, McpError, errorReply, errorResponse, type RequestId } from '../../jsonrpc/errors.js'
import { resultResponse, type JsonRpcRequest, type ParsedBody } from '../../jsonrpc/messages.js'
import type { ResolvedOptions } from '../../options.js'
import type { SessionHandle } from '../../sessions/session-handle.js'
import type { StateEngine } from '../../state/engine.js'
import { allKept, type UnitOfWork } from '../../state/unit-of-work.js'
import type { PostTrace } from '../../telemetry/index.js'
import { BaseContext } from '../base-context.js'
import { closingHeaders, stoppedByDrain, stoppedResponse } from '../drain.js'
import { NULL_EVENT_LOG, type ChannelOptions, type Exchange, type ResponseChannel } from '../exchange.js'
import type { HandleCalls } from '../handle-calls.js'
import { checkVersionHeader } from './session.js'
import { RequestAbort } from '../request-abort.js'
import { allowsBatches } from '../versions.js'
import { unkeptResponses } from '../unkept-answers.js'

/** What a client is told to do to get what only a session gives. */
export const SEND_SESSION_ID = 'send back the Mcp-Session-Id header that initialize returned on every later request'

/** The answer channel of a request without a session: nothing to resume (shared: only read). */
const NO_SESSION_CHANNEL: ChannelOptions = Object.freeze({ sessionId: null, polling: false, log: NULL_EVENT_LOG })

/** A JSON-RPC error for a method that only a session can serve. */
export function needsSession (method: string): McpError {
  return new McpError(ErrorCode.InvalidRequest, `Invalid Request: ${method} needs a session; ${SEND_SESSION_ID}`)
}

/** @internal Runs one request of the POST (the wire's method dispatch, with no session scope). */
export type SessionlessDispatch = (msg: JsonRpcRequest, ctx: SessionlessContext, log: FastifyBaseLogger) =>
Promise<Record<string, unknown>> | Record<string, unknown>

/** @internal What a sessionless POST is served with. */
export interface SessionlessDeps {
  opts: ResolvedOptions
  /** The state engine (the handles of a POST's calls are held in its unit of work). */
  state: StateEngine
  handles: HandleCalls
  maybeGc: (log: FastifyBaseLogger) => void
  dispatch: SessionlessDispatch
}

/** @internal The `ctx` of a handshake-era request without a session: `ctx.session` is null. */
export class SessionlessContext extends BaseContext {
  get session (): SessionHandle | null { return null }

  /** Nothing was declared on this request (the `initialize` that declared them is not known). */
  get clientCapabilities (): Record<string, unknown> { return {} }

  protected get minLogLevel (): LogLevel { return 'debug' }

  /** Never reached: every request to the client is refused first (below). */
  protected async ask (_key: string, method: string): Promise<Record<string, unknown>> { throw unreachable(method) }

  async elicit (_key: string, _params: FormElicitParams | UrlElicitParams): Promise<ElicitResult> { throw unreachable('elicitation/create') }
  async sample (_key: string, _params: SamplingParams): Promise<SamplingResult> { throw unreachable('sampling/createMessage') }
  async roots (_key: string): Promise<Root[]> { throw unreachable('roots/list') }

  /** No stream to close: the answer of a request without a session cannot be resumed. */
  closeSSEStream (): void {}
}

/** The error a handler gets for a request to a client that sent no session id. */
function unreachable (method: string): Error {
  return new FST_ERR_MCP_NO_SESSION(method)
}

/** The run of one POST: its unit of work, and the status and headers of a lone request's error. */
interface Run {
  exchange: Exchange
  unit: UnitOfWork
  abort: RequestAbort
  principal: McpPrincipal | null
  trace: PostTrace
  batch: boolean
  status: number
  headers?: Record<string, string>
}

/** What a POST's run resolves: the responses, and the request each answers. */
interface Served { responses: unknown[], members: Array<JsonRpcRequest | null> }

/** @internal Serves a handshake-era POST that names no session (see the module doc). */
export async function postWithoutSession (d: SessionlessDeps, exchange: Exchange, body: ParsedBody & { ok: true },
  principal: McpPrincipal | null, trace: PostTrace): Promise<void> {
  const request = exchange.request
  checkVersionHeader(request)
  // No session says which revision was negotiated: the header does (absent: 2025-03-26, as the specification says).
  const header = request.headers['mcp-protocol-version']
  const version = typeof header === 'string' ? header : '2025-03-26'
  trace.version(version)
  if (body.batch && !allowsBatches(version)) {
    throw new McpError(ErrorCode.InvalidRequest, 'Invalid Request: batches are only allowed with protocol version 2025-03-26', undefined, 400)
  }
  d.maybeGc(request.log)
  const channel = exchange.channel(NO_SESSION_CHANNEL)
  const abort = new RequestAbort()
  abort.watch(exchange.connection, channel)
  const unfollow = exchange.shutdown?.follow(abort)
  try {
    // The handles its calls work on are held in the POST's unit of work, and written when it ends.
    const unit = d.state.unit({ owner: request, abort, log: request.log })
    const run: Run = { exchange, unit, abort, principal, trace, batch: body.batch, status: 200 }
    let served: Served
    try {
      served = await runMessages(d, run, body, channel)
    } catch (err) {
      await unit.end('abandon')
      throw err
    }
    // Most POSTs hold nothing: their end needs no wait. A stopped one keeps nothing.
    const how = abort.aborted ? 'abandon' : 'commit'
    const outcome = unit.endNow(how) ?? await unit.end(how)
    if (abort.aborted && !stoppedByDrain(abort.reason)) return
    let { responses } = served
    let status = body.batch ? 200 : body.messages[0].kind === 'invalid' ? 400 : run.status
    let headers = run.headers
    if (!allKept(outcome.parts)) {
      const unkept = unkeptResponses(responses, served.members, outcome)
      for (const e of unkept.errors) trace.failed(new McpError(e.code, e.message, e.data, e.status), true)
      responses = unkept.responses
      if (unkept.status !== undefined && !body.batch) { status = unkept.status; headers = unkept.headers }
    }
    channel.finish(responses, !body.batch, status, body.batch ? undefined : headers)
  } finally {
    abort.unwatch()
    unfollow?.()
  }
}

/** Runs the messages of the POST in order. */
async function runMessages (d: SessionlessDeps, run: Run, body: ParsedBody & { ok: true }, channel: ResponseChannel): Promise<Served> {
  const served: Served = { responses: [], members: [] }
  for (const m of body.messages) {
    if (m.kind === 'invalid') { served.responses.push(errorResponse(m.id, m.error.code, m.error.message)); served.members.push(null) }
    // Notifications (initialized, cancelled…) and answers have no session to reach: accepted, nothing to do.
    if (m.kind !== 'request') continue
    const r = await runRequest(d, run, m.message, channel)
    if (r !== null) { served.responses.push(r); served.members.push(m.message) }
  }
  return served
}

/** Runs one request; resolves its response, or `null` when its client went away. */
async function runRequest (d: SessionlessDeps, run: Run, msg: JsonRpcRequest, channel: ResponseChannel): Promise<unknown> {
  const request = run.exchange.request
  const ctx = new SessionlessContext({
    request,
    principal: run.principal,
    requestId: msg.id,
    meta: msg.params?._meta as Record<string, unknown> | undefined,
    channel,
    abort: run.abort,
    handles: d.handles.minter,
    unit: run.unit,
    member: msg
  })
  try {
    const result = await (run.batch
      ? run.trace.run(msg, () => d.dispatch(msg, ctx, request.log))
      : d.dispatch(msg, ctx, request.log))
    if (run.abort.aborted) return aborted(d, run, msg.id)
    const response = resultResponse(msg.id, result)
    run.trace.answered(msg, response, 200)
    return response
  } catch (err) {
    if (run.abort.aborted) return aborted(d, run, msg.id)
    return failedAnswer(run, msg, err, request.log)
  } finally {
    ctx.finished = true
  }
}

/**
 * The error response of a request whose run threw (both handshake-era paths): a lone request's
 * POST takes its HTTP status and headers (`Retry-After` of a 503, …).
 */
export function failedAnswer (run: { status: number, headers?: Record<string, string>, trace: PostTrace }, msg: JsonRpcRequest, err: unknown,
  log: FastifyBaseLogger): unknown {
  const reply = errorReply(err, msg.id, { status: 200, log, msg: 'MCP handler failed', what: { method: msg.method } })
  run.status = reply.status
  run.headers = reply.headers
  run.trace.answered(msg, reply.body, reply.status)
  return reply.body
}

/** Stopped at the drain deadline of app.close(): answered with 503; a client that left hears nothing. */
function aborted (d: SessionlessDeps, run: Run, id: RequestId): unknown {
  if (!stoppedByDrain(run.abort.reason)) return null
  run.status = 503
  run.headers = closingHeaders(d.opts.retryIntervalMs)
  return stoppedResponse(id)
}
