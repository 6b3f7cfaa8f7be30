/**
 * Requests in flight on this process, per session, so that `notifications/cancelled` (which may
 * arrive on another instance) and the session's end can abort them. Most requests are short: a
 * session is subscribed to its channel only once one of its requests has run for a moment (one
 * sweep timer checks them all), not per request.
 *
 * Each request is tracked on its own, also when the client reuses a request id (real clients do,
 * and a client may send many requests with one id at once): `count()` counts them all (it is what
 * `maxStreamsPerSession` caps), and `notifications/cancelled` for an id aborts every request of
 * the session in flight with that id — the same id: of the same JSON type and value (JSON-RPC ids
 * are strings or numbers, and `"1"` is not `1`).
 *
 * A session's requests are a list linked through their entries, not maps by id: tracking one
 * request makes its entry (and the session's record when it is the first), nothing else; a cancel,
 * which is rare, walks the session's requests (at most `maxStreamsPerSession`).
 */
import { LinkedList, type Linked } from '../util/linked-list.js'
import { SteadyMap } from '../util/steady-map.js'
import type { BusMessage } from './bus.js'
import type { SessionJob, SessionTopics } from './session-topics.js'
import { SessionEndedError } from './session-ended.js'

/** What a cancellation aborts. */
export interface Abortable { abort: (reason: unknown) => void }

/** A tracked request, as its caller holds it. */
export interface Tracking {
  /** Stops tracking the request (idempotent). */
  untrack (): void
}

/** Milliseconds a request runs (10–20) before this process subscribes to its session's channel. */
const SUBSCRIBE_AFTER = 10

/**
 * The requests of one session in flight here, oldest first (`size`: all ids together); itself a
 * member of the sessions the sweeps watch while it is not subscribed (`watched`).
 */
class SessionRequests extends LinkedList<Entry> implements Linked<SessionRequests> {
  readonly sid: string
  prev: SessionRequests | null = null
  next: SessionRequests | null = null
  /** In `InflightRequests.#unsubscribed`. */
  watched = false
  /** Called when an entry leaves (the owner forgets an empty session and releases the topic). */
  readonly left: (session: SessionRequests) => void

  constructor (sid: string, left: (session: SessionRequests) => void) {
    super()
    this.sid = sid
    this.left = left
  }

  /** The entries in flight now, of request `id` or all (`null`): a copy, since aborting one may untrack it. */
  entries (id: string | number | null): Entry[] {
    const out: Entry[] = []
    for (let e = this.head; e !== null; e = e.next) if (id === null || e.id === id) out.push(e)
    return out
  }
}

/** One `track()`: its own object, so that tracking the same request twice counts twice. */
class Entry implements Tracking, Linked<Entry> {
  readonly request: Abortable
  /** The request's id as the client sent it (several requests may share one). */
  readonly id: string | number
  prev: Entry | null = null
  next: Entry | null = null
  /** Seen in flight by a sweep (see `InflightRequests.#sweep`). */
  swept = false
  /** `null` once untracked. */
  #session: SessionRequests | null

  constructor (session: SessionRequests, id: string | number, request: Abortable) {
    this.#session = session
    this.id = id
    this.request = request
    session.push(this)
  }

  untrack (): void {
    const session = this.#session
    if (session === null) return
    this.#session = null
    session.remove(this)
    session.left(session)
  }
}

/** The in-flight requests of this process (see the module doc). */
export class InflightRequests implements SessionJob {
  readonly #topics: SessionTopics
  /** A session's record comes and goes with each short request: a map whose table never empties. */
  readonly #bySession = new SteadyMap<SessionRequests>()
  /**
   * Sessions with requests in flight and no subscription, checked every SUBSCRIBE_AFTER ms: a list
   * of their records, which a record leaves when its last request does (a set of ids grew by one
   * and was emptied by the sweep on every short request).
   */
  readonly #unsubscribed = new LinkedList<SessionRequests>()
  #sweeper: NodeJS.Timeout | null = null
  readonly #sweepNow = (): void => { this.#sweep() }
  /** Made once: every session's record calls it when one of its requests stops being tracked. */
  readonly #left = (session: SessionRequests): void => {
    if (session.size === 0) {
      if (this.#bySession.get(session.sid) === session) this.#bySession.delete(session.sid)
      this.#unwatch(session)
    }
    this.#topics.release(session.sid)
  }

  constructor (topics: SessionTopics) {
    this.#topics = topics
    topics.add(this)
  }

  /** @internal Sessions with a record here: none is kept once its requests end (tests check this bound). */
  get sessions (): number { return this.#bySession.size }

  /** @internal Sessions the sweeps watch: those with requests in flight and no subscription (tests check this bound). */
  get watched (): number { return this.#unsubscribed.size }

  holds (sid: string): boolean { return (this.#bySession.get(sid)?.size ?? 0) > 0 }

  /** Requests of the session in flight here, each counted (also those sharing an id). */
  count (sid: string): number { return this.#bySession.get(sid)?.size ?? 0 }

  /**
   * Registers a running request so a `notifications/cancelled` can abort it; returns its
   * {@link Tracking}, whose `untrack()` unregisters it (idempotent). Requests that share an id are
   * tracked each on its own.
   */
  track (sid: string, requestId: string | number, request: Abortable): Tracking {
    this.#topics.hold(sid, false)
    let session = this.#bySession.get(sid)
    if (session === undefined) { session = new SessionRequests(sid, this.#left); this.#bySession.set(sid, session) }
    const entry = new Entry(session, requestId, request)
    // A cancel from another instance can only reach a request that runs long enough to be
    // cancelled: its session is subscribed once it has run for a moment (local cancels are
    // delivered directly).
    if (!session.watched && !this.#topics.subscribed(sid)) this.#watch(session)
    return entry
  }

  #watch (session: SessionRequests): void {
    session.watched = true
    this.#unsubscribed.push(session)
    if (this.#sweeper === null) {
      this.#sweeper = setInterval(this.#sweepNow, SUBSCRIBE_AFTER)
      this.#sweeper.unref()
    }
  }

  #unwatch (session: SessionRequests): void {
    if (!session.watched) return
    session.watched = false
    this.#unsubscribed.remove(session)
  }

  /**
   * Subscribes the sessions of requests seen in flight at two sweeps in a row. An entry is marked
   * by the sweep that sees it; entries only ever leave a session's list, so a marked entry still
   * in the list was in flight at the previous sweep too.
   */
  #sweep (): void {
    let session = this.#unsubscribed.head
    while (session !== null) {
      const next: SessionRequests | null = session.next
      if (this.#topics.subscribed(session.sid)) {
        this.#unwatch(session)
      } else {
        let again = false
        for (let e = session.head; e !== null; e = e.next) {
          if (e.swept) again = true
          e.swept = true
        }
        if (again) {
          this.#unwatch(session)
          this.#topics.hold(session.sid)
        }
      }
      session = next
    }
    if (this.#unsubscribed.size === 0 && this.#sweeper !== null) {
      clearInterval(this.#sweeper)
      this.#sweeper = null
    }
  }

  onMessage (sid: string, m: BusMessage): void {
    if (m.t === 'cancel') {
      // Every request of the session in flight with that id: the client cannot tell us which one.
      const session = this.#bySession.get(sid)
      if (session !== undefined) for (const e of session.entries(m.requestId)) e.request.abort(new Error('cancelled by the client'))
    } else if (m.t === 'ended') this.#abortAll(sid, new SessionEndedError())
  }

  #abortAll (sid: string, reason: Error): void {
    const session = this.#bySession.get(sid)
    if (session === undefined) return
    for (const e of session.entries(null)) e.request.abort(reason)
  }

  /** Aborts everything in flight (server shutdown). */
  close (): void {
    if (this.#sweeper !== null) clearInterval(this.#sweeper)
    this.#sweeper = null
    for (let s = this.#unsubscribed.head; s !== null; s = this.#unsubscribed.head) this.#unwatch(s)
    for (const sid of this.#bySession.keys()) this.#abortAll(sid, new Error('server shutting down'))
  }
}
