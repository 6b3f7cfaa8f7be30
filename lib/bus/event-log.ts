/**
 * The event log behind resumable SSE streams. Each stream has its own atomically numbered events;
 * an event id `<streamId>_<seq>` encodes the stream, so GET + `Last-Event-ID` can replay the rest
 * of that stream only. Streams belong to one session; a replay for another session finds nothing.
 */
import { randomBytes } from 'node:crypto'

export interface LoggedEvent { id: string, data: string }

export interface EventLogOptions {
  /** Events kept per stream (oldest dropped first). Default 1,000. */
  maxEvents?: number
  /** Streams kept in all (oldest dropped first). Default 10,000. */
  maxStreams?: number
  /** Milliseconds an idle stream's events are kept. Default 300,000 (5 min). */
  ttl?: number
}

/** The event log contract. */
export interface EventLog {
  /** Starts a stream of a session and returns its id. */
  open (sessionId: string): string
  /** Appends an event (a serialized JSON-RPC message); returns its event id. */
  append (streamId: string, data: string): string
  /** Events after `lastEventId` of its stream, when that stream belongs to `sessionId`; else `null`. */
  replay (sessionId: string, lastEventId: string): { streamId: string, events: LoggedEvent[] } | null
  /** Marks a stream finished (its response was sent); kept until it expires. */
  finish (streamId: string): void
  /** Whether a stream is still open (its request has not finished). */
  isOpen (streamId: string): boolean
  /** Drops the streams of a session (the session ended). */
  dropSession (sessionId: string): void
}

interface StreamEntry { sessionId: string, seq: number, events: LoggedEvent[], open: boolean, touched: number }

/** Parses `<streamId>_<seq>`; `null` for anything else. */
export function parseEventId (id: string): { streamId: string, seq: number } | null {
  const m = /^([A-Za-z0-9-]{8,64})_(\d{1,15})$/.exec(id)
  return m === null ? null : { streamId: m[1], seq: Number(m[2]) }
}

/** In-process event log, bounded by events per stream, number of streams, and age. */
export class MemoryEventLog implements EventLog {
  #streams = new Map<string, StreamEntry>()
  #maxEvents: number
  #maxStreams: number
  #ttl: number

  constructor (options: EventLogOptions = {}) {
    this.#maxEvents = options.maxEvents ?? 1000
    this.#maxStreams = options.maxStreams ?? 10_000
    this.#ttl = options.ttl ?? 300_000
  }

  open (sessionId: string): string {
    const id = randomBytes(12).toString('base64url').replace(/_/g, '-')
    this.#evict()
    this.#streams.set(id, { sessionId, seq: 0, events: [], open: true, touched: Date.now() })
    return id
  }

  append (streamId: string, data: string): string {
    const s = this.#streams.get(streamId)
    if (s === undefined) return `${streamId}_0`
    const id = `${streamId}_${++s.seq}`
    s.events.push({ id, data })
    if (s.events.length > this.#maxEvents) s.events.shift()
    s.touched = Date.now()
    return id
  }

  replay (sessionId: string, lastEventId: string): { streamId: string, events: LoggedEvent[] } | null {
    const parsed = parseEventId(lastEventId)
    if (parsed === null) return null
    const s = this.#streams.get(parsed.streamId)
    if (s === undefined || s.sessionId !== sessionId || parsed.seq > s.seq) return null
    if (Date.now() - s.touched > this.#ttl && !s.open) { this.#streams.delete(parsed.streamId); return null }
    s.touched = Date.now()
    return { streamId: parsed.streamId, events: s.events.filter(e => (parseEventId(e.id)?.seq ?? 0) > parsed.seq) }
  }

  finish (streamId: string): void {
    const s = this.#streams.get(streamId)
    if (s !== undefined) { s.open = false; s.touched = Date.now() }
  }

  isOpen (streamId: string): boolean {
    return this.#streams.get(streamId)?.open === true
  }

  dropSession (sessionId: string): void {
    for (const [id, s] of this.#streams) if (s.sessionId === sessionId) this.#streams.delete(id)
  }

  /** Number of streams kept (tests). */
  get size (): number { return this.#streams.size }

  #evict (): void {
    if (this.#streams.size < this.#maxStreams) {
      // Cheap age-based sweep of the oldest entries (Map keeps insertion order).
      const now = Date.now()
      for (const [id, s] of this.#streams) {
        if (s.open || now - s.touched <= this.#ttl) break
        this.#streams.delete(id)
      }
      return
    }
    const oldest = this.#streams.keys().next()
    if (oldest.done !== true) this.#streams.delete(oldest.value)
  }
}
