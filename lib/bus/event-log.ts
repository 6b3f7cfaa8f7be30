/**
 * The event log behind resumable SSE streams. Each stream has its own atomically numbered events;
 * an event id `<streamId>_<seq>` encodes the stream, so GET + `Last-Event-ID` replays the rest of
 * that stream only. Streams belong to one session: a replay for another session finds nothing.
 * Opening a stream logs a start marker, whose id is the stream's priming event id, so that a
 * forged id for a stream that never existed replays nothing.
 *
 * A session that ended (DELETE, expiry, gc) leaves nothing behind: `dropSession` removes its
 * streams, and a writer still running after that (a handler that had not heard of the end yet, a
 * GET stream ending on another instance) is refused, so it cannot create them again.
 */
import { randomBytes } from 'node:crypto'

export interface LoggedEvent { id: string, data: string }

/** What a replay finds: the events after the given id, and whether the stream has ended. */
export interface Replay { streamId: string, events: LoggedEvent[], finished: boolean }

export interface EventLogOptions {
  /** Events kept per stream (oldest dropped first). Default 1,000. */
  maxEvents?: number
  /**
   * Milliseconds a stream's events are kept after its last event. Default 300,000 (5 min). Also
   * how long writes of an ended session are refused where the log keeps a mark of the end.
   */
  ttl?: number
  /** Streams kept in all, memory log only (oldest dropped first). Default 10,000. */
  maxStreams?: number
}

/** The event log contract (memory: `MemoryEventLog`; many instances: `RedisEventLog`). */
export interface EventLog {
  /**
   * Starts a stream of a session; resolves the priming event id, or `null` when the session ended
   * (nothing was logged).
   */
  open (sessionId: string, streamId: string): Promise<string | null>
  /**
   * Appends an event (a serialized JSON-RPC message); resolves its event id, or `null` when the
   * session ended (nothing was logged: the stream is not created again).
   */
  append (sessionId: string, streamId: string, data: string): Promise<string | null>
  /** Marks a stream ended (its response was sent). Creates nothing once the session ended. */
  finish (sessionId: string, streamId: string): Promise<void>
  /** The events after `lastEventId` in its stream, when that stream belongs to `sessionId`; else `null`. */
  replay (sessionId: string, lastEventId: string): Promise<Replay | null>
  /**
   * The session ended: removes its streams, and from then on refuses its writes (`open`, `append`,
   * `finish` log nothing), so that a writer that had not heard of the end cannot bring them back.
   * Session ids are never reused.
   */
  dropSession (sessionId: string): Promise<void>
}

/** A new random stream id (URL-safe, no `_`, which separates the sequence number). */
export function newStreamId (): string {
  return randomBytes(12).toString('base64url').replace(/_/g, '-')
}

/** Parses `<streamId>_<seq>`; `null` for anything else. */
export function parseEventId (id: string): { streamId: string, seq: number } | null {
  const m = /^([A-Za-z0-9-]{8,64})_(\d{1,15})$/.exec(id)
  return m === null ? null : { streamId: m[1], seq: Number(m[2]) }
}

interface StreamEntry { sessionId: string, seq: number, events: Array<LoggedEvent & { seq: number }>, finished: boolean, touched: number }

/**
 * In-process event log, bounded by events per stream, number of streams, and age. An ended
 * session's writes are refused for `ttl` ms after `dropSession` (a mark per ended session, at most
 * `maxStreams` of them, oldest forgotten first).
 */
export class MemoryEventLog implements EventLog {
  #streams = new Map<string, StreamEntry>()
  /** Ended sessions → until when their writes are refused (`Date.now()` ms), oldest first. */
  readonly #ended = new Map<string, number>()
  #maxEvents: number
  #maxStreams: number
  #ttl: number

  constructor (options: EventLogOptions = {}) {
    this.#maxEvents = options.maxEvents ?? 1000
    this.#maxStreams = options.maxStreams ?? 10_000
    this.#ttl = options.ttl ?? 300_000
  }

  async open (sessionId: string, streamId: string): Promise<string | null> {
    if (this.#isEnded(sessionId)) return null
    this.#evict()
    this.#streams.set(streamId, { sessionId, seq: 1, events: [], finished: false, touched: Date.now() })
    return `${streamId}_1`
  }

  async append (sessionId: string, streamId: string, data: string): Promise<string | null> {
    if (this.#isEnded(sessionId)) return null
    let s = this.#streams.get(streamId)
    if (s === undefined || s.sessionId !== sessionId) {
      await this.open(sessionId, streamId)
      s = this.#streams.get(streamId) as StreamEntry
    }
    const seq = ++s.seq
    const id = `${streamId}_${seq}`
    s.events.push({ id, data, seq })
    if (s.events.length > this.#maxEvents) s.events.shift()
    s.touched = Date.now()
    // Keep recently used streams at the end, so the oldest are evicted first.
    this.#streams.delete(streamId)
    this.#streams.set(streamId, s)
    return id
  }

  async finish (sessionId: string, streamId: string): Promise<void> {
    const s = this.#streams.get(streamId)
    if (s !== undefined && s.sessionId === sessionId) { s.finished = true; s.touched = Date.now() }
  }

  async replay (sessionId: string, lastEventId: string): Promise<Replay | null> {
    const parsed = parseEventId(lastEventId)
    if (parsed === null) return null
    const s = this.#streams.get(parsed.streamId)
    if (s === undefined || s.sessionId !== sessionId || parsed.seq < 1 || parsed.seq > s.seq) return null
    if (Date.now() - s.touched > this.#ttl) { this.#streams.delete(parsed.streamId); return null }
    // The last seen event must still be kept (or be the start marker), else the rest is unknown.
    const first = s.events[0]
    if (parsed.seq > 1 && first !== undefined && parsed.seq < first.seq - 1) return null
    return {
      streamId: parsed.streamId,
      events: s.events.filter(e => e.seq > parsed.seq).map(e => ({ id: e.id, data: e.data })),
      finished: s.finished
    }
  }

  async dropSession (sessionId: string): Promise<void> {
    for (const [id, s] of this.#streams) if (s.sessionId === sessionId) this.#streams.delete(id)
    this.#ended.delete(sessionId)
    this.#ended.set(sessionId, Date.now() + this.#ttl)
    // Bounded: the oldest marks go first (and any that ran out on the way).
    const now = Date.now()
    for (const [sid, until] of this.#ended) {
      if (this.#ended.size <= this.#maxStreams && until >= now) break
      this.#ended.delete(sid)
    }
  }

  /** Number of streams kept (tests). */
  get size (): number { return this.#streams.size }

  /** Ended sessions whose writes are still refused (bounded by `maxStreams`; tests). */
  get endedMarks (): number { return this.#ended.size }

  #isEnded (sessionId: string): boolean {
    const until = this.#ended.get(sessionId)
    if (until === undefined) return false
    if (until >= Date.now()) return true
    this.#ended.delete(sessionId)
    return false
  }

  #evict (): void {
    const now = Date.now()
    for (const [id, s] of this.#streams) {
      if (this.#streams.size < this.#maxStreams && now - s.touched <= this.#ttl) break
      this.#streams.delete(id)
    }
  }
}
