/**
 * Server-sent event streams. A `ServerStream` is the logical stream of one POST (or the GET
 * stream of a session): when resumable, each event is logged first (so a client that lost the
 * connection can resume with GET + `Last-Event-ID`, on any instance), then written to the
 * connection attached right now, then published for followers on other connections or instances.
 * Writes go through one promise chain, so events keep their order although logging is async.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { FastifyBaseLogger, FastifyReply } from 'fastify'
import type { BusMessage } from '../bus/bus.js'
import { newStreamId, type EventLog } from '../bus/event-log.js'

/** Headers every SSE response carries. */
export const SSE_HEADERS: Record<string, string> = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no'
}

/** A connection whose buffer grows past this is a slow reader: it is closed (the log keeps the events). */
export const MAX_BUFFERED_BYTES = 4 * 1024 * 1024

/**
 * Takes the response over from Fastify and starts an SSE response: the headers Fastify hooks set,
 * the SSE headers, and `extra`, sent at once (a stream may stay silent for a while, and the
 * client waits for the headers).
 */
export function startSse (reply: FastifyReply, extra?: Record<string, string>): ServerResponse {
  const headers: OutgoingHttpHeaders = {}
  for (const [k, v] of Object.entries(reply.getHeaders())) if (v !== undefined) headers[k] = v
  Object.assign(headers, SSE_HEADERS, extra)
  reply.hijack()
  reply.raw.writeHead(200, headers)
  reply.raw.flushHeaders()
  return reply.raw
}

export function frame (id: string | null, data: string): string {
  return id === null ? `data: ${data}\n\n` : `id: ${id}\ndata: ${data}\n\n`
}

/**
 * Writes to a connection unless it is gone; closes a connection whose reader is too slow (memory
 * stays bounded; a resumable stream's events are in the log). Returns false once the connection
 * is unusable.
 */
export function writeTo (conn: ServerResponse, text: string, logger: FastifyBaseLogger, what: Record<string, unknown>): boolean {
  if (conn.destroyed || conn.writableEnded) return false
  conn.write(text)
  if (conn.writableLength > MAX_BUFFERED_BYTES) {
    logger.warn(what, 'SSE reader too slow; closing its connection')
    conn.destroy()
    return false
  }
  return true
}

export interface ServerStreamOptions {
  sessionId: string
  /** `'g'` for a session's GET stream, `'p'` for a POST's response stream (encoded in the id). */
  kind: 'g' | 'p'
  /** Reuse this id (a resumed GET stream continues its sequence). */
  id?: string
  log: EventLog
  logger: FastifyBaseLogger
  /** Milliseconds between keep-alive comments; 0 disables. */
  keepAlive: number
  /** Whether events carry ids and are logged for resumption. */
  resumable: boolean
  /** Publishes stream events for followers (other connections or instances). */
  publish?: (message: BusMessage) => void
}

/** A logical SSE stream (see module doc). */
export class ServerStream {
  readonly id: string
  readonly sessionId: string
  readonly #o: ServerStreamOptions
  #conn: ServerResponse | null = null
  #timer: NodeJS.Timeout | null = null
  #ended = false
  #chain: Promise<void> = Promise.resolve()
  #onDetach: (() => void) | null = null
  #corked = false

  constructor (options: ServerStreamOptions) {
    this.#o = options
    this.sessionId = options.sessionId
    this.id = options.id ?? `${options.kind}-${newStreamId()}`
  }

  get ended (): boolean { return this.#ended }
  get attached (): boolean { return this.#conn !== null }
  get resumable (): boolean { return this.#o.resumable }

  /** Attaches a connection (headers already written by the caller). `onDetach` runs when it goes away. */
  attach (conn: ServerResponse, onDetach?: () => void): void {
    this.#detachConn()
    this.#conn = conn
    this.#onDetach = onDetach ?? null
    conn.on('close', () => { if (this.#conn === conn) this.#detachConn() })
    if (this.#o.keepAlive > 0) {
      this.#timer = setInterval(() => this.#write(': keep-alive\n\n'), this.#o.keepAlive)
      this.#timer.unref()
    }
  }

  #enqueue (work: () => Promise<void> | void): void {
    this.#chain = this.#chain.then(work).catch((err: unknown) => {
      this.#o.logger.warn({ err, sessionId: this.sessionId, streamId: this.id }, 'SSE stream write failed')
    })
  }

  /** Resolves when everything enqueued so far was written. */
  async flushed (): Promise<void> { await this.#chain }

  /**
   * Starts the stream in the log and sends the priming event (an id with empty data, 2025-11-25),
   * so the client can resume even before the first real event.
   */
  prime (): void {
    this.#enqueue(async () => {
      const id = await this.#o.log.open(this.sessionId, this.id)
      this.#write(`id: ${id}\ndata: \n\n`)
    })
  }

  /** Sends a JSON-RPC message on the stream. */
  send (message: unknown): void {
    if (this.#ended) return
    const data = JSON.stringify(message)
    if (!this.#o.resumable) { this.#enqueue(() => { this.#write(frame(null, data)) }); return }
    this.#enqueue(async () => {
      let id: string | null = null
      try {
        id = await this.#o.log.append(this.sessionId, this.id, data)
      } catch (err) {
        // The log is down: still deliver on the live connection, without an id to resume from.
        this.#o.logger.warn({ err, sessionId: this.sessionId }, 'event log append failed')
      }
      this.#write(frame(id, data))
      if (id !== null) this.#o.publish?.({ t: 'event', sid: this.sessionId, streamId: this.id, id, data })
    })
  }

  /** Closes the current connection but not the stream: `retry` tells the client when to come back. */
  disconnect (retryMs: number): void {
    this.#enqueue(() => {
      const conn = this.#conn
      if (conn === null) return
      this.#write(`retry: ${Math.max(0, Math.floor(retryMs))}\n\n`)
      this.#detachConn()
      conn.end()
    })
  }

  /** Ends the stream (after its response) and the connection; `retry` when the server goes away. */
  end (retryMs?: number): void {
    if (this.#ended) return
    this.#ended = true
    this.#enqueue(async () => {
      if (this.#o.resumable) {
        await this.#o.log.finish(this.sessionId, this.id).catch(() => {})
        this.#o.publish?.({ t: 'streamEnd', sid: this.sessionId, streamId: this.id })
      }
      const conn = this.#conn
      if (retryMs !== undefined && conn !== null) this.#write(`retry: ${retryMs}\n\n`)
      this.#detachConn()
      conn?.end()
    })
  }

  #write (text: string): void {
    const conn = this.#conn
    if (conn === null) return
    // Frames written in one burst (progress, then the result) leave in one socket write.
    if (!this.#corked && !conn.destroyed) {
      this.#corked = true
      conn.cork()
      setImmediate(() => { this.#corked = false; conn.uncork() })
    }
    if (!writeTo(conn, text, this.#o.logger, { sessionId: this.sessionId, streamId: this.id })) this.#detachConn()
  }

  #detachConn (): void {
    if (this.#timer !== null) { clearInterval(this.#timer); this.#timer = null }
    const cb = this.#onDetach
    this.#conn = null
    this.#onDetach = null
    cb?.()
  }
}
