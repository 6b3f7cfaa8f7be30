/**
 * The HTTP side of an exchange (the wires' {@link Exchange}): a POST's answer channel, an SSE
 * stream started now, or an empty answer, all on this request's Fastify reply.
 */
import type { ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { EventSink } from '../bus/event-sink.js'
import type { ChannelOptions, Exchange, ResponseChannel } from '../protocol/exchange.js'
import { PostResponse } from './post-response.js'
import { SseWriter } from './sse-writer.js'

/**
 * Adds `bindings` to the request's logger, and to the reply's: Fastify writes its "request
 * completed" line through `reply.log`, which is the request's logger as it was when the request
 * arrived. Every later line of the request (the handler's `ctx.request.log` included) carries them.
 */
export function bindLog (request: FastifyRequest, reply: FastifyReply, bindings: Record<string, unknown>): void {
  // Only asks whether `bindings` has a key, without building an array of them.
  // eslint-disable-next-line no-unreachable-loop, @typescript-eslint/no-unused-vars
  for (const _ in bindings) {
    const child = request.log.child(bindings)
    request.log = child
    reply.log = child
    return
  }
}

/** @internal One request and its reply. */
export class HttpExchange implements Exchange {
  readonly request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #sseOnly: boolean

  /** `sseOnly`: the client's Accept does not include application/json (every answer is a stream). */
  constructor (request: FastifyRequest, reply: FastifyReply, sseOnly = false) {
    this.request = request
    this.#reply = reply
    this.#sseOnly = sseOnly
  }

  get connection (): ServerResponse { return this.#reply.raw }

  channel (options: ChannelOptions): ResponseChannel {
    // The session an `initialize` just made is known only now.
    const minted = options.headers?.['mcp-session-id']
    if (minted !== undefined) bindLog(this.request, this.#reply, { mcpSession: minted.slice(0, 8) })
    return new PostResponse(this.request, this.#reply, options, this.#sseOnly)
  }

  stream (options: { keepAlive: number, what?: Record<string, unknown> }): EventSink {
    return new SseWriter(this.#reply, { keepAlive: options.keepAlive, logger: this.request.log, what: options.what })
  }

  bindLog (bindings: Record<string, unknown>): void {
    bindLog(this.request, this.#reply, bindings)
  }

  empty (status: number): void {
    this.#reply.code(status).send()
  }
}
