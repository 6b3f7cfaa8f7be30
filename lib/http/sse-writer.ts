/**
 * THE server-sent-events writer: every SSE response of the endpoint (a POST's response stream, a
 * session's GET stream, a 2026-07-28 listen stream, a resumed stream followed from elsewhere) goes
 * out through one of these. It takes the response over from Fastify, frames events, writes
 * keep-alive comments, ends with `retry`, and closes a connection whose reader is too slow instead
 * of buffering without bound (a resumable stream's events are in the event log).
 *
 * The frames of one turn (progress, then the result) are collected and handed to the connection as
 * one chunk at the end of the turn (or with `end()`): one socket write, one chunk of the chunked
 * encoding rather than one per frame. The headers leave with the first frames, or alone at the end
 * of the first turn when it wrote nothing (a stream that stays silent for a while): a POST answered
 * on SSE, whose writer opens for the event it writes, costs one socket write instead of two.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { FastifyBaseLogger, FastifyReply } from 'fastify'
import type { EventSink } from '../bus/event-sink.js'

/** Headers every SSE response carries. */
export const SSE_HEADERS: Record<string, string> = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no'
}

/** A connection whose buffer grows past this is a slow reader: it is closed. */
export const MAX_BUFFERED_BYTES = 4 * 1024 * 1024

export interface SseWriterOptions {
  /** Milliseconds between keep-alive comments; 0 disables. */
  keepAlive?: number
  /** Headers besides the SSE ones and those Fastify hooks set (e.g. `Mcp-Session-Id`). */
  headers?: Record<string, string>
  /** Where a slow reader is reported, and with what context (session, stream). */
  logger: FastifyBaseLogger
  /** The context, or what makes it (called only when a line is logged). */
  what?: Record<string, unknown> | (() => Record<string, unknown>)
}

/** One SSE response (see the module doc). */
export class SseWriter implements EventSink {
  readonly #conn: ServerResponse
  readonly #logger: FastifyBaseLogger
  readonly #what: Record<string, unknown> | (() => Record<string, unknown>)
  #timer: NodeJS.Timeout | null = null
  /** Whether the end of the current turn is scheduled (it flushes {@link #frames}). */
  #inTurn = false
  /** The frames written in the current turn, not handed to the connection yet. */
  #frames = ''
  /** Whether anything went out after the headers (else they are flushed at the end of the turn). */
  #wrote = false
  /** What runs when the connection closes; `null` until a 'close' listener is needed. */
  #onClose: Array<() => void> | null = null

  /**
   * Takes the response over from Fastify; the status line and headers go out with the first
   * frames, or by the end of this turn (see the module doc).
   */
  constructor (reply: FastifyReply, options: SseWriterOptions) {
    const headers: OutgoingHttpHeaders = {}
    for (const [k, v] of Object.entries(reply.getHeaders())) if (v !== undefined) headers[k] = v
    Object.assign(headers, SSE_HEADERS, options.headers)
    reply.hijack()
    const conn = reply.raw
    conn.writeHead(200, headers)
    this.#conn = conn
    if (!conn.destroyed) this.#startTurn()
    this.#logger = options.logger
    this.#what = options.what ?? {}
    const keepAlive = options.keepAlive ?? 0
    // A connection that closed while the request was served never emits 'close' again.
    if (keepAlive > 0 && !conn.destroyed) {
      this.#timer = setInterval(() => { this.comment('keep-alive') }, keepAlive)
      this.#timer.unref()
      this.#listen()
    }
  }

  /** One 'close' listener, added when something needs it (the timer, {@link onClose}). */
  #listen (): void {
    if (this.#onClose !== null) return
    this.#onClose = []
    this.#conn.once('close', () => {
      this.#stopTimer()
      const fns = this.#onClose ?? []
      this.#onClose = null
      for (const fn of fns) fn()
    })
  }

  get closed (): boolean {
    return this.#conn.destroyed || this.#conn.writableEnded
  }

  event (id: string | null, data: string): boolean {
    return this.#write(id === null ? `data: ${data}\n\n` : `id: ${id}\ndata: ${data}\n\n`)
  }

  comment (text: string): void {
    this.#write(`: ${text}\n\n`)
  }

  end (retryMs?: number): void {
    this.#stopTimer()
    if (this.closed) return
    const last = retryMs === undefined ? this.#frames : `${this.#frames}retry: ${Math.max(0, Math.floor(retryMs))}\n\n`
    this.#frames = ''
    // With the frames of this turn, if any: one write, headers included when none went out yet.
    if (last === '') this.#conn.end()
    else this.#conn.end(last)
  }

  onClose (fn: () => void): void {
    if (this.#conn.destroyed) { fn(); return }
    this.#listen()
    this.#onClose?.push(fn)
  }

  /**
   * Writes unless the connection is gone; false once it is unusable. A connection that still holds
   * more than MAX_BUFFERED_BYTES written in earlier turns, which its reader has not taken, is a
   * slow reader: it is closed instead of buffering more. What this turn writes does not count
   * (it is not handed to the connection before the end of the turn), so a large result reaches a
   * reader that keeps up; what is buffered stays under the bound plus one turn's frames.
   */
  #write (text: string): boolean {
    const conn = this.#conn
    if (conn.destroyed || conn.writableEnded) return false
    if (conn.writableLength > MAX_BUFFERED_BYTES) {
      const what = this.#what
      this.#logger.warn(typeof what === 'function' ? what() : what, 'SSE reader too slow; closing its connection')
      this.#stopTimer()
      this.#frames = ''
      conn.destroy()
      return false
    }
    if (!this.#inTurn) this.#startTurn()
    this.#frames += text
    return true
  }

  #startTurn (): void {
    this.#inTurn = true
    setImmediate(this.#endTurn)
  }

  /** Hands the turn's frames to the connection in one chunk (see the module doc). */
  readonly #endTurn = (): void => {
    const conn = this.#conn
    const frames = this.#frames
    this.#inTurn = false
    this.#frames = ''
    if (this.closed) return
    if (frames !== '') {
      this.#wrote = true
      conn.write(frames)
    } else if (!this.#wrote) {
      // A stream may stay silent for a while, and the client waits for the headers.
      this.#wrote = true
      conn.flushHeaders()
    }
  }

  #stopTimer (): void {
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
  }
}
