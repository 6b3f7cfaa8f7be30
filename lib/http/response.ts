/**
 * How one POST answers: `application/json` unless the handler sends a message first (progress, a
 * log message, a request to the client) or the client accepts only SSE; then `text/event-stream`,
 * starting with the priming event on 2025-11-25 sessions.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { EventLog } from '../bus/event-log.js'
import type { Hub } from '../protocol/hub.js'
import { ServerStream, startSse } from './sse.js'

export interface ChannelOptions {
  sessionId: string | null
  /** Send the priming event and `retry` (2025-11-25 and later). */
  polling: boolean
  /** The client's Accept does not include application/json. */
  sseOnly: boolean
  log: EventLog
  hub: Hub | null
  extraHeaders?: Record<string, string>
}

/** @internal The response of one POST (see module doc). */
export class ResponseChannel {
  #request: FastifyRequest
  #reply: FastifyReply
  #opts: ChannelOptions
  #stream: ServerStream | null = null
  #done = false

  constructor (request: FastifyRequest, reply: FastifyReply, opts: ChannelOptions) {
    this.#request = request
    this.#reply = reply
    this.#opts = opts
    if (opts.sseOnly) this.#openSse()
  }

  get isSse (): boolean { return this.#stream !== null }
  /** Whether a client that lost the connection can resume this response (GET + Last-Event-ID). */
  get resumable (): boolean { return this.#stream !== null && this.#opts.polling && this.#opts.sessionId !== null }
  get done (): boolean { return this.#done }

  #openSse (): ServerStream {
    if (this.#stream !== null) return this.#stream
    const reply = this.#reply
    startSse(reply, this.#opts.extraHeaders)
    const sid = this.#opts.sessionId
    const hub = this.#opts.hub
    const resumable = sid !== null && this.#opts.polling
    const stream = new ServerStream({
      sessionId: sid ?? '',
      kind: 'p',
      log: this.#opts.log,
      logger: this.#request.log,
      keepAlive: 0,
      resumable,
      publish: hub === null || sid === null ? undefined : (m) => { hub.publish(sid, m).catch(() => {}) }
    })
    stream.attach(reply.raw)
    if (resumable) stream.prime()
    this.#stream = stream
    return stream
  }

  /** Sends a message related to the request before its response (switches to SSE). */
  emit (message: unknown): void {
    if (this.#done) return
    this.#openSse().send(message)
  }

  /** Closes the SSE connection (switching to SSE first) without ending the stream. */
  disconnect (retryMs: number): void {
    if (this.#done) return
    this.#openSse().disconnect(retryMs)
  }

  /**
   * Sends the responses and ends the POST. `single` answers with one object, else an array (batch).
   * With no responses (notifications only, or all cancelled) the answer is 202.
   */
  finish (responses: unknown[], single: boolean, status = 200): void {
    if (this.#done) return
    this.#done = true
    const stream = this.#stream
    if (stream !== null) {
      for (const r of responses) stream.send(r)
      stream.end()
      return
    }
    const reply = this.#reply
    if (this.#opts.extraHeaders !== undefined) reply.headers(this.#opts.extraHeaders)
    if (responses.length === 0) {
      reply.code(202).send()
      return
    }
    reply.code(status).type('application/json').send(JSON.stringify(single ? responses[0] : responses))
  }
}
