/**
 * Requests in flight on this process, per session, so that `notifications/cancelled` (which may
 * arrive on another instance) and the session's end can abort them. Most requests are short: a
 * session is subscribed to its channel only once one of its requests has run for a moment (one
 * sweep timer checks them all), not per request.
 *
 * Each request is tracked on its own, also when the client reuses a request id (real clients do,
 * and a client may send many requests with one id at once): `count()` counts them all (it is what
 * `maxStreamsPerSession` caps), and `notifications/cancelled` for an id aborts every request of
 * the session in flight with that id.
 */
import type { BusMessage } from './bus.js'
import type { SessionJob, SessionTopics } from './session-topics.js'

/** What a cancellation aborts. */
export interface Abortable { abort: (reason: unknown) => void }

/** One `track()`: its own object, so that tracking the same request twice counts twice. */
interface Entry { request: Abortable }

/** The requests of one session in flight here. */
interface SessionRequests {
  /** Requests in flight, all ids together. */
  count: number
  /** By `String(id)`: several requests may share an id. One entry per `track()`. */
  byId: Map<string, Set<Entry>>
}

/** Milliseconds a request runs (10–20) before this process subscribes to its session's channel. */
const SUBSCRIBE_AFTER = 10

/** The in-flight requests of this process (see the module doc). */
export class InflightRequests implements SessionJob {
  readonly #topics: SessionTopics
  readonly #bySession = new Map<string, SessionRequests>()
  /** Sessions with requests in flight and no subscription, checked every SUBSCRIBE_AFTER ms. */
  readonly #unsubscribed = new Set<string>()
  /** Requests in flight at the last sweep, per unsubscribed session. */
  readonly #seen = new Map<string, Set<Entry>>()
  #sweeper: NodeJS.Timeout | null = null

  constructor (topics: SessionTopics) {
    this.#topics = topics
    topics.add(this)
  }

  holds (sid: string): boolean { return (this.#bySession.get(sid)?.count ?? 0) > 0 }

  /** Requests of the session in flight here, each counted (also those sharing an id). */
  count (sid: string): number { return this.#bySession.get(sid)?.count ?? 0 }

  /**
   * Registers a running request so a `notifications/cancelled` can abort it; returns the
   * unregister (idempotent). Requests that share an id are tracked each on its own.
   */
  track (sid: string, requestId: string | number, request: Abortable): () => void {
    this.#topics.hold(sid, false)
    let requests = this.#bySession.get(sid)
    if (requests === undefined) { requests = { count: 0, byId: new Map() }; this.#bySession.set(sid, requests) }
    const key = String(requestId)
    let sameId = requests.byId.get(key)
    if (sameId === undefined) { sameId = new Set(); requests.byId.set(key, sameId) }
    const entry: Entry = { request }
    sameId.add(entry)
    requests.count++
    // A cancel from another instance can only reach a request that runs long enough to be
    // cancelled: its session is subscribed once it has run for a moment (local cancels are
    // delivered directly).
    if (!this.#topics.subscribed(sid)) this.#watch(sid)
    const session = requests
    const set = sameId
    let done = false
    return () => {
      if (done) return
      done = true
      if (set.delete(entry)) {
        session.count--
        if (set.size === 0 && session.byId.get(key) === set) session.byId.delete(key)
      }
      if (session.count === 0 && this.#bySession.get(sid) === session) this.#bySession.delete(sid)
      this.#topics.release(sid)
    }
  }

  #watch (sid: string): void {
    this.#unsubscribed.add(sid)
    if (this.#sweeper === null) {
      this.#sweeper = setInterval(() => { this.#sweep() }, SUBSCRIBE_AFTER)
      this.#sweeper.unref()
    }
  }

  /** Subscribes the sessions of requests seen in flight at two sweeps in a row. */
  #sweep (): void {
    for (const sid of this.#unsubscribed) {
      const requests = this.#bySession.get(sid)
      if (requests === undefined || this.#topics.subscribed(sid)) {
        this.#unsubscribed.delete(sid)
        this.#seen.delete(sid)
        continue
      }
      const now = new Set<Entry>()
      for (const sameId of requests.byId.values()) for (const r of sameId) now.add(r)
      const seen = this.#seen.get(sid)
      if (seen !== undefined && [...seen].some(r => now.has(r))) {
        this.#unsubscribed.delete(sid)
        this.#seen.delete(sid)
        this.#topics.hold(sid)
      } else {
        this.#seen.set(sid, now)
      }
    }
    if (this.#unsubscribed.size === 0 && this.#sweeper !== null) {
      clearInterval(this.#sweeper)
      this.#sweeper = null
    }
  }

  onMessage (sid: string, m: BusMessage): void {
    if (m.t === 'cancel') {
      // Every request of the session in flight with that id: the client cannot tell us which one.
      const sameId = this.#bySession.get(sid)?.byId.get(String(m.requestId))
      if (sameId !== undefined) for (const e of [...sameId]) e.request.abort(new Error('cancelled by the client'))
    } else if (m.t === 'ended') this.#abortAll(sid, new Error('session ended'))
  }

  #abortAll (sid: string, reason: Error): void {
    const requests = this.#bySession.get(sid)
    if (requests === undefined) return
    for (const sameId of [...requests.byId.values()]) for (const e of [...sameId]) e.request.abort(reason)
  }

  /** Aborts everything in flight (server shutdown). */
  close (): void {
    if (this.#sweeper !== null) clearInterval(this.#sweeper)
    this.#sweeper = null
    this.#unsubscribed.clear()
    this.#seen.clear()
    for (const sid of this.#bySession.keys()) this.#abortAll(sid, new Error('server shutting down'))
  }
}
