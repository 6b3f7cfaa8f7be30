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
    return new PostResponse(this.request, this.#reply, options, this.#sseOnly)
  }

  stream (options: { keepAlive: number, what?: Record<string, unknown> }): EventSink {
    return new SseWriter(this.#reply, { keepAlive: options.keepAlive, logger: this.request.log, what: options.what })
  }

  empty (status: number): void {
    this.#reply.code(status).send()
  }
}
