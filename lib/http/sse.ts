/**
 * Server-sent event streams. A `ServerStream` is the logical stream of one POST (or the GET
 * stream of a session): its events are logged (so a client that lost the connection can resume
 * with GET + `Last-Event-ID`) and written to whichever connection is attached right now.
 */
import type { ServerResponse } from 'node:http'
import type { FastifyBaseLogger } from 'fastify'
import type { EventLog } from '../bus/event-log.js'

/** Headers every SSE response carries. */
export const SSE_HEADERS: Record<string, string> = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no'
}

/** A connection whose buffer grows past this is a slow reader: it is closed (the log keeps the events). */
const MAX_BUFFERED_BYTES = 4 * 1024 * 1024

function frame (id: string | null, data: string): string {
  return id === null ? `data: ${data}\n\n` : `id: ${id}\ndata: ${data}\n\n`
}

export interface ServerStreamOptions {
  sessionId: string
  log: EventLog
  logger: FastifyBaseLogger
  /** Milliseconds between keep-alive comments; 0 disables. */
  keepAlive: number
  /** Whether events carry ids and are logged for resumption. */
  resumable: boolean
}

/** A logical SSE stream (see module doc). */
export class ServerStream {
  readonly id: string
  readonly sessionId: string
  #log: EventLog
  #logger: FastifyBaseLogger
  #conn: ServerResponse | null = null
  #keepAlive: number
  #timer: NodeJS.Timeout | null = null
  #resumable: boolean
  #ended = false
  #onDetach: (() => void) | null = null

  constructor (options: ServerStreamOptions) {
    this.sessionId = options.sessionId
    this.#log = options.log
    this.#logger = options.logger
    this.#keepAlive = options.keepAlive
    this.#resumable = options.resumable
    this.id = options.log.open(options.sessionId)
  }

  get ended (): boolean { return this.#ended }
  get attached (): boolean { return this.#conn !== null }

  /**
   * Attaches a connection (headers already written by the caller) and replays `backlog` first.
   * `onDetach` runs when this connection goes away.
   */
  attach (conn: ServerResponse, backlog: Array<{ id: string, data: string }> = [], onDetach?: () => void): void {
    this.#detachConn()
    this.#conn = conn
    this.#onDetach = onDetach ?? null
    conn.on('close', () => { if (this.#conn === conn) this.#detachConn() })
    for (const e of backlog) this.#write(frame(e.id, e.data))
    if (this.#keepAlive > 0) {
      this.#timer = setInterval(() => this.#write(': keep-alive\n\n'), this.#keepAlive)
      this.#timer.unref()
    }
  }

  /** The priming event (2025-11-25): an event id with empty data, so the client can resume from here. */
  prime (): void {
    this.#write(`id: ${this.id}_0\ndata: \n\n`)
  }

  /** Sends a JSON-RPC message on the stream. */
  send (message: unknown): void {
    if (this.#ended) return
    const data = JSON.stringify(message)
    const id = this.#resumable ? this.#log.append(this.id, data) : null
    this.#write(frame(id, data))
  }

  /** Closes the current connection but not the stream: `retry` tells the client when to come back. */
  disconnect (retryMs: number): void {
    const conn = this.#conn
    if (conn === null) return
    this.#write(`retry: ${Math.max(0, Math.floor(retryMs))}\n\n`)
    this.#detachConn()
    conn.end()
  }

  /** Ends the stream (after its response) and the connection. */
  end (retryMs?: number): void {
    if (this.#ended) return
    this.#ended = true
    this.#log.finish(this.id)
    const conn = this.#conn
    if (retryMs !== undefined && conn !== null) this.#write(`retry: ${retryMs}\n\n`)
    this.#detachConn()
    conn?.end()
  }

  #write (text: string): void {
    const conn = this.#conn
    if (conn === null || conn.destroyed || conn.writableEnded) return
    conn.write(text)
    if (conn.writableLength > MAX_BUFFERED_BYTES) {
      // The reader is too slow: keep memory bounded. The events are in the log; it can resume.
      this.#logger.warn({ sessionId: this.sessionId, streamId: this.id }, 'SSE reader too slow; closing its connection')
      this.#detachConn()
      conn.destroy()
    }
  }

  #detachConn (): void {
    if (this.#timer !== null) { clearInterval(this.#timer); this.#timer = null }
    const cb = this.#onDetach
    this.#conn = null
    this.#onDetach = null
    cb?.()
  }
}
