/**
 * Connections following a POST's response stream that is written elsewhere: a client that lost
 * its connection resumes with GET + `Last-Event-ID` (on any instance), gets the rest of the stream
 * from the event log, then follows it live, through the bus, until its response.
 */
import type { BusMessage } from './bus.js'
import { parseEventId } from './event-log.js'
import type { EventSink } from './event-sink.js'
import type { SessionJob, SessionTopics } from './session-topics.js'

interface Follower {
  streamId: string
  /** The connection, once the follower started. */
  sink: EventSink | null
  /** Sequence number of the last event written to this connection. */
  seq: number
  /** Live events that arrived while the replay was being read. */
  buffer: Array<{ id: string, data: string }> | null
  ended: boolean
}

/** What `follow` returns: start with the replay, or cancel. */
export interface Following {
  /**
   * Writes the replay on `sink`, then what arrived meanwhile (skipping what the replay had), then
   * live events until the stream ends.
   */
  start (sink: EventSink, events: Array<{ id: string, data: string }>, finished: boolean): void
  cancel (): void
}

/** The followers of this process (see the module doc). */
export class StreamFollowers implements SessionJob {
  readonly #topics: SessionTopics
  readonly #bySession = new Map<string, Set<Follower>>()

  constructor (topics: SessionTopics) {
    this.#topics = topics
    topics.add(this)
  }

  holds (sid: string): boolean { return (this.#bySession.get(sid)?.size ?? 0) > 0 }

  /** Followers of the session on this process. */
  count (sid: string): number { return this.#bySession.get(sid)?.size ?? 0 }

  /**
   * Follows a stream written elsewhere, from event `lastEventId` on. Subscribes before the caller
   * reads the replay, and buffers live events meanwhile.
   */
  async follow (sid: string, lastEventId: string): Promise<Following> {
    const parsed = parseEventId(lastEventId)
    const f: Follower = { streamId: parsed?.streamId ?? '', sink: null, seq: parsed?.seq ?? 0, buffer: [], ended: false }
    let set = this.#bySession.get(sid)
    if (set === undefined) { set = new Set(); this.#bySession.set(sid, set) }
    set.add(f)
    const stop = (): void => {
      if (!this.#remove(sid, f)) return
      f.ended = true
      this.#topics.release(sid)
    }
    try {
      await this.#topics.ready(sid)
    } catch (err) {
      stop()
      throw err
    }
    return {
      start: (sink, events, finished) => {
        // The session ended (or the server is closing) while the replay was read.
        if (f.ended) { sink.end(); return }
        f.sink = sink
        sink.onClose(stop)
        const buffered = f.buffer ?? []
        f.buffer = null
        for (const ev of [...events, ...buffered]) this.#write(f, ev.id, ev.data)
        if (finished) { sink.end(); stop() }
      },
      cancel: stop
    }
  }

  #remove (sid: string, f: Follower): boolean {
    const set = this.#bySession.get(sid)
    if (set?.delete(f) !== true) return false
    if (set.size === 0) this.#bySession.delete(sid)
    return true
  }

  #write (f: Follower, id: string, data: string): void {
    const seq = parseEventId(id)?.seq ?? 0
    if (seq <= f.seq || f.ended || f.sink === null) return
    f.seq = seq
    if (!f.sink.event(id, data)) f.ended = true
  }

  onMessage (sid: string, m: BusMessage): void {
    const set = this.#bySession.get(sid)
    if (set === undefined) return
    if (m.t === 'event') {
      for (const f of set) {
        if (f.streamId !== m.streamId) continue
        if (f.buffer !== null) f.buffer.push({ id: m.id, data: m.data })
        else this.#write(f, m.id, m.data)
      }
    } else if (m.t === 'streamEnd') {
      for (const f of [...set]) {
        if (f.streamId !== m.streamId || f.buffer !== null) continue
        f.sink?.end()
        this.#remove(sid, f)
      }
    } else if (m.t === 'ended') {
      for (const f of set) { f.ended = true; f.sink?.end() }
      this.#bySession.delete(sid)
    }
  }

  /** Ends every follower with `retry` (server shutdown). */
  close (retryMs: number): void {
    for (const set of this.#bySession.values()) for (const f of set) { f.ended = true; f.sink?.end(retryMs) }
    this.#bySession.clear()
  }
}
