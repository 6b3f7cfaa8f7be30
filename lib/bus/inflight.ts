/**
 * Requests in flight on this process, per session, so that `notifications/cancelled` (which may
 * arrive on another instance) and the session's end can abort them. Most requests are short: a
 * session is subscribed to its channel only once one of its requests has run for a moment (one
 * sweep timer checks them all), not per request.
 */
import type { BusMessage } from './bus.js'
import type { SessionJob, SessionTopics } from './session-topics.js'

/** What a cancellation aborts. */
export interface Abortable { abort: (reason: unknown) => void }

/** Milliseconds a request runs (10–20) before this process subscribes to its session's channel. */
const SUBSCRIBE_AFTER = 10

/** The in-flight requests of this process (see the module doc). */
export class InflightRequests implements SessionJob {
  readonly #topics: SessionTopics
  readonly #bySession = new Map<string, Map<string, Abortable>>()
  /** Sessions with requests in flight and no subscription, checked every SUBSCRIBE_AFTER ms. */
  readonly #unsubscribed = new Set<string>()
  /** Requests in flight at the last sweep, per unsubscribed session. */
  readonly #seen = new Map<string, Set<Abortable>>()
  #sweeper: NodeJS.Timeout | null = null

  constructor (topics: SessionTopics) {
    this.#topics = topics
    topics.add(this)
  }

  holds (sid: string): boolean { return (this.#bySession.get(sid)?.size ?? 0) > 0 }

  /** Requests of the session in flight here. */
  count (sid: string): number { return this.#bySession.get(sid)?.size ?? 0 }

  /** Registers a running request so a `notifications/cancelled` can abort it; returns the unregister. */
  track (sid: string, requestId: string | number, request: Abortable): () => void {
    this.#topics.hold(sid, false)
    let requests = this.#bySession.get(sid)
    if (requests === undefined) { requests = new Map(); this.#bySession.set(sid, requests) }
    const key = String(requestId)
    requests.set(key, request)
    // A cancel from another instance can only reach a request that runs long enough to be
    // cancelled: its session is subscribed once it has run for a moment (local cancels are
    // delivered directly).
    if (!this.#topics.subscribed(sid)) this.#watch(sid)
    const map = requests
    return () => {
      if (map.get(key) === request) map.delete(key)
      if (map.size === 0 && this.#bySession.get(sid) === map) this.#bySession.delete(sid)
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
      const now = new Set(requests.values())
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
    if (m.t === 'cancel') this.#bySession.get(sid)?.get(String(m.requestId))?.abort(new Error('cancelled by the client'))
    else if (m.t === 'ended') this.#abortAll(sid, new Error('session ended'))
  }

  #abortAll (sid: string, reason: Error): void {
    for (const r of this.#bySession.get(sid)?.values() ?? []) r.abort(reason)
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
