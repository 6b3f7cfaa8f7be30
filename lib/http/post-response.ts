/**
 * How one POST answers (the wires' {@link ResponseChannel}): `application/json` unless the handler
 * sends a message first (progress, a log message, a request to the client) or the client accepts
 * only SSE; then `text/event-stream` through the SSE writer, starting with the priming event on
 * 2025-11-25 sessions, whose events are logged for resumption.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ServerStream } from '../bus/server-stream.js'
import { stringifyMessage } from '../jsonrpc/messages.js'
import type { ChannelOptions, ResponseChannel } from '../protocol/exchange.js'
import { SseWriter } from './sse-writer.js'
import { shownId } from '../util/shown-id.js'

/**
 * The Content-Type of a JSON answer, as Fastify sends it: given whole, since for a type without a
 * charset Fastify parses it and appends `; charset=utf-8` on every reply.
 */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8'

/** @internal The answer of one POST (see the module doc). */
export class PostResponse implements ResponseChannel {
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #opts: ChannelOptions
  #stream: ServerStream | null = null
  #done = false

  constructor (request: FastifyRequest, reply: FastifyReply, opts: ChannelOptions, sseOnly: boolean) {
    this.#request = request
    this.#reply = reply
    this.#opts = opts
    if (sseOnly) this.#openSse()
  }

  get resumable (): boolean { return this.#stream !== null && this.#opts.polling && this.#opts.sessionId !== null }
  get done (): boolean { return this.#done }

  #openSse (): ServerStream {
    if (this.#stream !== null) return this.#stream
    const sid = this.#opts.sessionId
    const resumable = sid !== null && this.#opts.polling
    const stream = new ServerStream({
      sessionId: sid ?? '',
      kind: 'p',
      log: this.#opts.log,
      logger: this.#request.log,
      resumable,
      publish: sid === null ? undefined : this.#opts.publish
    })
    stream.attach(new SseWriter(this.#reply, {
      headers: this.#opts.headers,
      logger: this.#request.log,
      // The stream's id is made only when a line names it (a random id costs a crypto call).
      what: () => ({ sessionId: shownId(sid ?? ''), streamId: stream.id })
    }))
    if (resumable) stream.prime()
    this.#stream = stream
    return stream
  }

  emit (message: unknown): void {
    if (this.#done) return
    this.#openSse().send(message)
  }

  disconnect (retryMs: number): void {
    if (this.#done) return
    this.#openSse().disconnect(retryMs)
  }

  finish (responses: unknown[], single: boolean, status = 200, headers?: Record<string, string>): void {
    if (this.#done) return
    this.#done = true
    const stream = this.#stream
    if (stream !== null) {
      for (const r of responses) stream.send(r)
      stream.end()
      return
    }
    const reply = this.#reply
    if (this.#opts.headers !== undefined) reply.headers(this.#opts.headers)
    // An error's own headers only when it answers the POST alone; once SSE, headers went long ago.
    if (headers !== undefined && single) reply.headers(headers)
    if (responses.length === 0) {
      reply.code(202).send()
      return
    }
    reply.code(status).type(JSON_CONTENT_TYPE).send(single ? stringifyMessage(responses[0]) : JSON.stringify(responses))
  }
}
