/**
 * A logical SSE stream: the stream of one POST's response, or a session's GET stream. When
 * resumable, each event is logged first (so a client that lost the connection can resume with
 * GET + `Last-Event-ID`, on any instance), then written to the connection attached right now, then
 * published for followers on other connections or instances. Writes go through one promise chain,
 * so events keep their order although logging is async; while nothing async is pending (always, on
 * a stream that is not resumable), a write runs at once instead of costing two promises and a
 * closure per event. The connection is an {@link EventSink}.
 */
import type { BusMessage } from './bus.js'
import { newStreamId, type EventLog } from './event-log.js'
import type { EventSink } from './event-sink.js'
import { shownId } from '../util/shown-id.js'

/** The logger a stream reports write failures to (a Fastify/pino logger fits). */
export interface StreamLogger {
  warn (obj: object, msg: string): void
}

export interface ServerStreamOptions {
  sessionId: string
  /** `'g'` for a session's GET stream, `'p'` for a POST's response stream (encoded in the id). */
  kind: 'g' | 'p'
  /** Reuse this id (a resumed GET stream continues its sequence). */
  id?: string
  log: EventLog
  logger: StreamLogger
  /** Whether events carry ids and are logged for resumption. */
  resumable: boolean
  /** Publishes stream events for followers (other connections or instances). */
  publish?: (message: BusMessage) => void
}

/** A logical SSE stream (see module doc). */
export class ServerStream {
  readonly sessionId: string
  readonly #o: ServerStreamOptions
  #id: string | undefined
  #sink: EventSink | null = null
  #onDetach: (() => void) | null = null
  #ended = false
  #chain: Promise<void> = Promise.resolve()
  /** Works in the chain that have not finished: while 0, a synchronous work runs at once. */
  #pending = 0

  constructor (options: ServerStreamOptions) {
    this.#o = options
    this.sessionId = options.sessionId
    this.#id = options.id
  }

  /**
   * The stream's id (encoded in its event ids). Made on first use: a stream that is not resumable
   * only names it in log lines, and most never log one.
   */
  get id (): string {
    this.#id ??= `${this.#o.kind}-${newStreamId()}`
    return this.#id
  }

  get ended (): boolean { return this.#ended }
  get attached (): boolean { return this.#sink !== null }
  get resumable (): boolean { return this.#o.resumable }

  /** Attaches a connection. `onDetach` runs when it goes away (closed, or replaced). */
  attach (sink: EventSink, onDetach?: () => void): void {
    this.#detach()
    this.#sink = sink
    this.#onDetach = onDetach ?? null
    sink.onClose(() => { if (this.#sink === sink) this.#detach() })
  }

  /** Runs `work` after everything enqueued before it: at once when nothing is pending. */
  #enqueue (work: () => Promise<void> | void): void {
    if (this.#pending === 0) {
      let result: Promise<void> | void
      try {
        result = work()
      } catch (err) {
        this.#warn(err)
        return
      }
      if (result === undefined) return
      // Async work (the event log): what comes after it waits for it.
      this.#pending++
      this.#chain = result.then(this.#settled, this.#failed)
      return
    }
    this.#pending++
    this.#chain = this.#chain.then(work).then(this.#settled, this.#failed)
  }

  readonly #settled = (): void => { this.#pending-- }
  readonly #failed = (err: unknown): void => { this.#pending--; this.#warn(err) }

  #warn (err: unknown): void {
    this.#o.logger.warn({ err, sessionId: shownId(this.sessionId), streamId: this.id }, 'SSE stream write failed')
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
      // null: the session ended meanwhile; there is nothing to resume, so no priming event.
      if (id !== null) this.#write(id, '')
    })
  }

  /** Sends a JSON-RPC message on the stream. */
  send (message: unknown): void {
    if (this.#ended) return
    const data = JSON.stringify(message)
    if (!this.#o.resumable) {
      // The common case (a 2026-07-28 answer): written now, no closure.
      if (this.#pending === 0) this.#write(null, data)
      else this.#enqueue(() => { this.#write(null, data) })
      return
    }
    this.#enqueue(async () => {
      let id: string | null = null
      try {
        id = await this.#o.log.append(this.sessionId, this.id, data)
      } catch (err) {
        // The log is down: still deliver on the live connection, without an id to resume from.
        this.#o.logger.warn({ err, sessionId: shownId(this.sessionId) }, 'event log append failed')
      }
      this.#write(id, data)
      if (id !== null) this.#o.publish?.({ t: 'event', sid: this.sessionId, streamId: this.id, id, data })
    })
  }

  /** Writes events read from the log (a resumed stream's backlog) in order, before anything new. */
  replay (events: Array<{ id: string, data: string }>): void {
    this.#enqueue(() => { for (const e of events) this.#write(e.id, e.data) })
  }

  /** Closes the current connection but not the stream: `retry` tells the client when to come back. */
  disconnect (retryMs: number): void {
    this.#enqueue(() => {
      const sink = this.#sink
      if (sink === null) return
      this.#detach()
      sink.end(retryMs)
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
      const sink = this.#sink
      this.#detach()
      sink?.end(retryMs)
    })
  }

  #write (id: string | null, data: string): void {
    const sink = this.#sink
    if (sink !== null && !sink.event(id, data)) this.#detach()
  }

  #detach (): void {
    const cb = this.#onDetach
    this.#sink = null
    this.#onDetach = null
    cb?.()
  }
}
