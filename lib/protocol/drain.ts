/**
 * The drain of one plugin instance on `app.close()`: from its start, new requests are refused
 * (503 with `Retry-After` and `Connection: close`, so that a load balancer or a client goes to
 * another instance), while the POSTs already running go on and answer as usual. At the deadline
 * (`drainTimeoutMs`) what is left is aborted with {@link FST_ERR_MCP_SERVER_CLOSING} (its handler's
 * `ctx.signal`, and a wait for the client's answer); the wires answer it with a `-32000` error
 * and write back and release its session as usual. A handler that ignores its signal does not
 * keep the process: after a short grace its client is answered with the same error here, and the
 * drain ends without it (its lease, if any, runs out by its TTL).
 *
 * POSTs that carry no request (a client's answer to an elicitation, a cancellation) are served
 * during the drain: a handler still running may be waiting for them.
 */
import type { ServerResponse } from 'node:http'
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { EventSink } from '../bus/event-sink.js'
import { FST_ERR_MCP_SERVER_CLOSING } from '../errors.js'
import { ErrorCode, McpError, errorResponse, type RequestId } from '../jsonrpc/errors.js'
import type { ParsedBody } from '../jsonrpc/messages.js'
import { retryAfterSeconds } from '../limits/errors.js'
import { LinkedList, type Linked } from '../util/linked-list.js'
import { settleWithin } from '../util/settle.js'
import { NULL_EVENT_LOG, type ChannelOptions, type Exchange, type ResponseChannel } from './exchange.js'
import { RequestAbort } from './request-abort.js'

/** Milliseconds the requests stopped at the deadline get to answer and let go of their session. */
export const DEADLINE_GRACE = 1000

/** The message of the error a request stopped at the deadline gets. */
export const STOPPED = 'Server is shutting down: the request was stopped before it finished.'

/** The message of a request refused while the server drains. */
export const REFUSED = 'Server is shutting down; retry on another instance.'

/** Whether `reason` (a request's abort reason) is the drain deadline's. */
export function stoppedByDrain (reason: unknown): boolean {
  return reason instanceof FST_ERR_MCP_SERVER_CLOSING
}

/** The error response of a request stopped at the deadline (the wires answer it with 503 and {@link closingHeaders}). */
export function stoppedResponse (id: RequestId | null): unknown {
  return errorResponse(id, ErrorCode.ServerError, STOPPED)
}

/** The same as an error to throw (a request stopped before its answer channel was made). */
export function stoppedError (retryMs: number): McpError {
  return new McpError(ErrorCode.ServerError, STOPPED, undefined, 503, closingHeaders(retryMs))
}

/** The headers of every answer given while draining. */
export function closingHeaders (retryMs: number): Record<string, string> {
  return { 'retry-after': retryAfterSeconds(retryMs), connection: 'close' }
}

/** @internal The drain (see the module doc). */
export class Drain {
  /** The POSTs running (a list through their own links: no allocation per POST, see `util/linked-list.ts`). */
  readonly #posts = new LinkedList<DrainedPost>()
  readonly #retryMs: number
  #draining = false
  #idle: (() => void) | null = null

  /** `retryMs`: the `retryIntervalMs`, which `Retry-After` names (in whole seconds, at least 1). */
  constructor (retryMs: number) {
    this.#retryMs = retryMs
  }

  /** Whether `app.close()` has started the drain. */
  get draining (): boolean { return this.#draining }

  /** POSTs running on this instance. */
  get inflight (): number { return this.#posts.size }

  /**
   * The refusal of a new request while draining (503, `Retry-After`, `Connection: close`), or null.
   * The routes put the single request's id on it.
   */
  refusal (): McpError | null {
    if (!this.#draining) return null
    return new McpError(ErrorCode.ServerError, REFUSED, undefined, 503, closingHeaders(this.#retryMs))
  }

  /**
   * Tracks a POST until the returned exchange's `release()`: the wires serve it through that
   * exchange, whose request aborts follow its `shutdown`.
   */
  enter (exchange: Exchange, body: ParsedBody & { ok: true }): DrainedPost {
    const post = new DrainedPost(exchange, body, this)
    this.#posts.push(post)
    if (this.#draining) post.closeConnection()
    return post
  }

  /** @internal Called by a tracked POST when it is over. */
  left (post: DrainedPost): void {
    // Unlinked once: a forced POST leaves at the deadline, and again when its wire lets go.
    if (post.left) return
    post.left = true
    this.#posts.remove(post)
    if (this.#posts.size === 0) this.#idle?.()
  }

  /**
   * Starts the drain and resolves once no POST runs, or at the deadline after stopping what is
   * left (see the module doc). Resolves the number of POSTs stopped.
   */
  async drain (timeoutMs: number, log: FastifyBaseLogger): Promise<number> {
    this.#draining = true
    // Answers still to come tell the client (a load balancer) not to send more on their connection.
    for (const post of this.#posts.toArray()) post.closeConnection()
    log.info({ requests: this.#posts.size, drainTimeoutMs: timeoutMs }, 'draining: new MCP requests are refused, those running may finish')
    if (await this.#settled(timeoutMs)) return 0
    const left = this.#posts.toArray()
    log.warn({ requests: left.length, drainTimeoutMs: timeoutMs }, 'drain deadline reached: stopping the MCP requests still running')
    const reason = new FST_ERR_MCP_SERVER_CLOSING(timeoutMs)
    for (const post of left) post.shutdown.abort(reason)
    if (await this.#settled(DEADLINE_GRACE)) return left.length
    // Handlers that ignore their signal: their clients are answered now, the process does not wait for them.
    const stubborn = this.#posts.toArray()
    log.warn({ requests: stubborn.length }, 'drain: handlers ignored their abort signal; their clients are answered without waiting for them')
    for (const post of stubborn) post.force()
    return left.length
  }

  /** Resolves true once no POST runs, false after `ms`. */
  async #settled (ms: number): Promise<boolean> {
    if (this.#posts.size === 0) return true
    const idle = new Promise<void>(resolve => { this.#idle = resolve })
    try {
      return await settleWithin(idle, ms)
    } finally {
      this.#idle = null
    }
  }

  /** The error responses of the requests of `body` stopped at the deadline, and how to send them. */
  stoppedAnswer (body: ParsedBody & { ok: true }): { responses: unknown[], single: boolean, headers: Record<string, string> } {
    const ids = body.messages.flatMap(m => m.kind === 'request' ? [m.message.id] : [])
    const responses = (ids.length === 0 ? [null] : ids).map(stoppedResponse)
    return { responses, single: !body.batch, headers: closingHeaders(this.#retryMs) }
  }
}

/**
 * @internal One POST as the drain sees it: the exchange the wires serve it through (it remembers
 * the answer channel, so that the client can be answered at the deadline), and its `shutdown`,
 * aborted at the deadline. Once forced, later writes of the wire are dropped.
 */
export class DrainedPost implements Exchange, Linked<DrainedPost> {
  readonly shutdown = new RequestAbort()
  /** @internal The drain's list of running POSTs (see {@link Drain}). */
  prev: DrainedPost | null = null
  /** @internal */
  next: DrainedPost | null = null
  /** @internal Whether it left the drain's list. */
  left = false
  readonly #inner: Exchange
  readonly #body: ParsedBody & { ok: true }
  readonly #drain: Drain
  #channel: ResponseChannel | null = null
  #forced = false

  constructor (inner: Exchange, body: ParsedBody & { ok: true }, drain: Drain) {
    this.#inner = inner
    this.#body = body
    this.#drain = drain
  }

  get request (): FastifyRequest { return this.#inner.request }
  get connection (): ServerResponse { return this.#inner.connection }

  channel (options: ChannelOptions): ResponseChannel {
    if (this.#channel !== null && this.#forced) return this.#channel
    this.#channel = this.#inner.channel(options)
    return this.#channel
  }

  /**
   * Sends `Connection: close` with the answer; when its headers went already (an SSE answer), the
   * connection is ended once the answer is: an idle keep-alive connection would otherwise hold
   * the server's close until the client drops it.
   */
  closeConnection (): void {
    const conn = this.#inner.connection
    if (!conn.headersSent) conn.setHeader('connection', 'close')
    else if (!conn.writableFinished) {
      // Taken now: a finished response lets go of its socket.
      const socket = conn.socket
      conn.once('finish', () => { socket?.end() })
    }
  }

  stream (options: { keepAlive: number, what?: Record<string, unknown> }): EventSink { return this.#inner.stream(options) }

  empty (status: number): void { if (!this.#forced) this.#inner.empty(status) }

  bindLog (bindings: Record<string, unknown>): void { this.#inner.bindLog?.(bindings) }

  /** The POST is over (answered, or failed: the routes answer a thrown error). */
  release (): void { this.#drain.left(this) }

  /** Answers the client with the deadline's error now, unless the answer was sent. */
  force (): void {
    if (this.#forced) return
    this.#forced = true
    this.#drain.left(this)
    if (this.#channel?.done === true) return
    const conn = this.#inner.connection
    if (this.#channel === null && (conn.headersSent || conn.destroyed)) return
    const { responses, single, headers } = this.#drain.stoppedAnswer(this.#body)
    this.#channel ??= this.#inner.channel({ sessionId: null, polling: false, log: NULL_EVENT_LOG })
    this.#channel.finish(responses, single, 503, headers)
  }
}
