/**
 * Requests from a handshake-era handler to the client (`elicit`, `sample`, `roots`): sent on the
 * POST's stream, answered in a separate POST that may land on any instance (the answer reaches the
 * waiting handler through the bus). Under the session lock the session is saved and the lease
 * released while waiting, then taken back and re-read before the handler goes on, so the
 * session's other requests, the client's answer among them, are never blocked by the wait.
 */
import type { Hub } from '../../bus/hub.js'
import { FST_ERR_MCP_CLIENT_REQUEST, FST_ERR_MCP_CLIENT_TIMEOUT, FST_ERR_MCP_SESSION_BUSY } from '../../errors.js'
import type { ResolvedOptions } from '../../options.js'
import type { ClientRequester, HandshakeContext } from './context.js'
import { ErrorCode, McpError } from '../../jsonrpc/errors.js'
import { allKept, type UnitOfWork } from '../../state/unit-of-work.js'
import { unitAnswer } from '../unkept-answers.js'
import type { Telemetry } from '../../telemetry/index.js'
import { shownId } from '../../util/shown-id.js'

/** The most of a client's answer a log line carries (JSON characters). */
const LOGGED_ANSWER = 4096

function logged (answer: Record<string, unknown>): string {
  const text = JSON.stringify(answer)
  return text.length <= LOGGED_ANSWER ? text : `${text.slice(0, LOGGED_ANSWER)}… (${text.length} characters)`
}

/** @internal The sender of a session's requests to the client (see the module doc). */
export class ClientRequests implements ClientRequester {
  readonly #hub: Hub
  readonly #opts: ResolvedOptions
  readonly #telemetry: Telemetry

  constructor (hub: Hub, opts: ResolvedOptions, telemetry: Telemetry) {
    this.#hub = hub
    this.#opts = opts
    this.#telemetry = telemetry
  }

  get retryIntervalMs (): number { return this.#opts.retryIntervalMs }

  async clientRequest (ctx: HandshakeContext, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    const signal = ctx.signal
    const sid = ctx.scope.id
    if (signal.aborted) throw signal.reason
    const answers = this.#hub.answers
    if (answers.count(sid) >= this.#opts.maxPendingClientRequests) {
      throw new FST_ERR_MCP_CLIENT_REQUEST(method, 'too many pending requests to the client in this session')
    }
    const id = answers.nextId()
    // The span's context goes to the client (in `_meta`) and with the expectation (for the instance the answer lands on).
    const trace = this.#telemetry.clientRequest(method, id, sid)
    // Registered before any await, so that the cap above counts requests made in the same turn.
    const { answer, cancel, hops } = answers.wait(sid, id, trace.tag)
    answer.then((msg) => { trace.answered(msg, hops()) }, (err: unknown) => { trace.failed(err) })
    // Whether this call released the lease for the wait (and so takes it back): of requests made
    // together (Promise.all), the first releases it and takes it back.
    let suspended = false
    try {
      await this.#hub.topics.ready(sid)
      // Saved and released before the wait; if what the handler changed could not be kept, it
      // stops here, and the scope stays closed (nothing more is written for this request).
      if (ctx.unit?.holdsLease === true) { await suspend(ctx.unit); suspended = true }
    } catch (err) {
      answer.catch(() => {})
      cancel(err as Error)
      throw err
    }
    const timeout = this.#opts.clientRequestTimeoutMs
    const timer = setTimeout(() => cancel(new FST_ERR_MCP_CLIENT_TIMEOUT(method, timeout)), timeout)
    timer.unref()
    const onAbort = (): void => cancel(signal.reason instanceof Error ? signal.reason : new Error('aborted'))
    signal.addEventListener('abort', onAbort, { once: true })
    let msg: Record<string, unknown> | undefined
    try {
      ctx.responseChannel.emit({ jsonrpc: '2.0', id, method, params: trace.params(params) })
      msg = await answer
    } finally {
      clearTimeout(timer)
      signal.removeEventListener('abort', onAbort)
      // Taken back after a wait that failed too (the scope then counts as lost if it cannot be),
      // but the handler is told why the wait failed, not why the lock could not be had.
      if (suspended) {
        if (msg === undefined) await this.#resume(ctx, method, msg).catch(() => {})
        else await this.#resume(ctx, method, msg)
      }
    }
    if (msg.error !== undefined) {
      const e = msg.error as { message?: string }
      throw new FST_ERR_MCP_CLIENT_REQUEST(method, String(e.message ?? 'error'))
    }
    return (msg.result ?? {}) as Record<string, unknown>
  }

  /**
   * Takes the session back (ahead of newer requests of this process), then the state handles the
   * request works on (the lock order). When one cannot be had, the handler gets
   * FST_ERR_MCP_SESSION_BUSY, what it could not take back is never written, and the client's answer,
   * which nobody will use, is logged rather than dropped in silence.
   */
  async #resume (ctx: HandshakeContext, method: string, answer: Record<string, unknown> | undefined): Promise<void> {
    let failed: unknown
    await (ctx.unit as UnitOfWork).resume().catch((err: unknown) => { failed = err })
    if (failed === undefined) return
    ctx.request.log.warn({ err: failed, sessionId: shownId(ctx.scope.id), method, answer: answer === undefined ? undefined : logged(answer) },
      'could not take the session or handle back after the client answered; the answer is dropped and the state left as it was')
    throw new FST_ERR_MCP_SESSION_BUSY((failed as Error).message)
  }
}

/**
 * Saves and releases before the wait, everything the request holds (together where the backend
 * can); a save that did not keep the changes stops the handler, and the request keeps nothing more.
 */
async function suspend (unit: UnitOfWork): Promise<void> {
  const outcome = await unit.suspend()
  if (allKept(outcome.parts)) return
  const unkept = unitAnswer(outcome)
  if (unkept === null || 'toolError' in unkept) throw new McpError(ErrorCode.ServerError, 'The state this request works on ended while it asked the client.', undefined, 503)
  throw new McpError(unkept.code, unkept.message, unkept.data, unkept.status, unkept.headers)
}
