/**
 * Handlers of this process waiting for a client's answer to a server→client request
 * (elicitation, sampling, roots). The answer arrives in a separate POST, on any instance. The
 * waiting side registers the expected id on the bus before the request goes out
 * (`Bus.expect`, through `SessionTopics.gate`, which `ready()` waits for); the receiving side
 * keeps the answer where the bus can keep it, and publishes it on the session's channel, only
 * when it was expected; the waiting process also looks for the kept copy now and then, so a
 * missed publish (a reconnect) does not lose it. An answer nobody waits for is dropped (the POST
 * is still answered 202): an id this server never minted without touching the bus at all.
 */
import { randomBytes } from 'node:crypto'
import type { Bus, BusMessage } from './bus.js'
import type { SessionJob, SessionTopics, TopicLogger } from './session-topics.js'
import { shownId } from '../util/shown-id.js'
import { SessionEndedError } from './session-ended.js'

interface Waiter {
  resolve: (msg: Record<string, unknown>) => void
  reject: (err: Error) => void
  /** Instances the answer crossed: 0 received here, 1 through the bus; unset when found by polling. */
  hops?: number
}

/** How often a waiting handler looks for a kept answer whose publish it missed (ms). */
const POLL_KEPT = 1000

/** How long an expectation outlives the handler's own timeout (ms): the handler's timer fires first. */
const EXPECT_MARGIN = 1000

/**
 * Lifetime of an expectation when the hub is not told the handlers' timeout (ms). Generous, so that
 * no configured timeout outlives it: every wait deletes its expectation when it ends anyway; this
 * only bounds what a crashed process leaves behind.
 */
const FALLBACK_EXPECT_TTL = 3_600_000

/** What every id {@link PendingAnswers.nextId} mints looks like (on any instance). */
const MINTED_ID = /^srv-[0-9a-f]{8}-[1-9][0-9]{0,15}$/

/** Options of {@link PendingAnswers}. */
export interface PendingAnswersOptions {
  /**
   * How long a handler waits for the client's answer (ms, the plugin's `clientRequestTimeoutMs`):
   * an expectation lives that long (plus a second). Without it, up to an hour.
   */
  clientRequestTimeoutMs?: number
}

/** The handlers of this process waiting for answers (see the module doc). */
export class PendingAnswers implements SessionJob {
  readonly #bus: Bus
  readonly #topics: SessionTopics
  readonly #logger: TopicLogger
  readonly #expectTtl: number
  readonly #bySession = new Map<string, Map<string, Waiter>>()
  readonly #prefix = randomBytes(4).toString('hex')
  #counter = 0

  constructor (bus: Bus, topics: SessionTopics, logger: TopicLogger, options: PendingAnswersOptions = {}) {
    this.#bus = bus
    this.#topics = topics
    this.#logger = logger
    this.#expectTtl = options.clientRequestTimeoutMs === undefined ? FALLBACK_EXPECT_TTL : options.clientRequestTimeoutMs + EXPECT_MARGIN
    topics.add(this)
  }

  holds (sid: string): boolean { return (this.#bySession.get(sid)?.size ?? 0) > 0 }

  /** Requests to the client of the session pending on this process. */
  count (sid: string): number { return this.#bySession.get(sid)?.size ?? 0 }

  /** Requests to clients pending on this process, over all sessions (status, gauges). */
  get size (): number {
    let n = 0
    for (const waiters of this.#bySession.values()) n += waiters.size
    return n
  }

  /** A request id for a server→client request, unique across processes. */
  nextId (): string {
    return `srv-${this.#prefix}-${++this.#counter}`
  }

  /**
   * Waits for the client's answer to request `id`. Registered at once (so a cap counts requests
   * made in the same turn); the expectation goes to the bus at once too, and `topics.ready(sid)`
   * waits for it. The caller handles timeouts and aborts through `cancel`, and awaits
   * `topics.ready(sid)` before sending the request. `tag` (the request's trace context) goes with
   * the expectation to whichever instance receives the answer; `hops()` tells, once answered,
   * how many instances the answer crossed.
   */
  wait (sid: string, id: string, tag?: string): { answer: Promise<Record<string, unknown>>, cancel: (err: Error) => void, hops: () => number | undefined } {
    this.#topics.hold(sid)
    let waiters = this.#bySession.get(sid)
    if (waiters === undefined) { waiters = new Map(); this.#bySession.set(sid, waiters) }
    let waiter!: Waiter
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => { waiter = { resolve, reject } })
    waiters.set(id, waiter)
    if (this.#bus.expect !== undefined) this.#topics.gate(sid, this.#bus.expect(sid, id, this.#expectTtl, tag))
    const poll = this.#pollKept(sid, id, waiter)
    const map = waiters
    const done = (): void => {
      if (poll !== null) clearInterval(poll)
      if (map.get(id) === waiter) map.delete(id)
      if (map.size === 0 && this.#bySession.get(sid) === map) this.#bySession.delete(sid)
      // Nothing of this wait may outlive it: the expectation, and a kept answer nobody took.
      this.#bus.forget?.(sid, id).catch(() => {})
      this.#topics.release(sid)
    }
    answer.then(done, done)
    return { answer, cancel: (err) => waiter.reject(err), hops: () => waiter.hops }
  }

  #pollKept (sid: string, id: string, waiter: Waiter): NodeJS.Timeout | null {
    const take = this.#bus.take?.bind(this.#bus)
    if (take === undefined) return null
    const poll = setInterval(() => {
      take(sid, id).then((text) => {
        if (text !== null) waiter.resolve(JSON.parse(text) as Record<string, unknown>)
      }, () => {})
    }, POLL_KEPT)
    poll.unref()
    return poll
  }

  /**
   * Delivers a client's answer when a handler (on any instance) waits for it: kept first (where
   * the bus can), then published. Resolves whether it was delivered; an answer nobody waits for is
   * dropped with a debug line (an id this server never minted without a bus round trip).
   * @param ttl how long a kept answer may wait for its handler (ms), at most
   * @param onKept told, once the answer is known to be expected, the tag the waiting side left (its trace context)
   */
  async deliver (sid: string, msg: Record<string, unknown>, ttl: number, onKept?: (tag: string | undefined) => void): Promise<boolean> {
    const id = msg.id
    if (typeof id !== 'string' || !MINTED_ID.test(id)) {
      this.#dropped(sid, id, 'answer to a request this server never sent; dropped')
      return false
    }
    if (this.#bus.keep !== undefined) {
      const kept = await this.#bus.keep(sid, id, JSON.stringify(msg), ttl)
      if (kept === false) {
        this.#dropped(sid, id, 'answer nobody waits for (not asked in this session, already answered, or given up); dropped')
        return false
      }
      onKept?.(typeof kept === 'string' ? kept : undefined)
    } else {
      onKept?.(undefined)
    }
    await this.#topics.publish(sid, { t: 'answer', sid, msg, via: this.#prefix })
    return true
  }

  #dropped (sid: string, id: unknown, why: string): void {
    // The id is the client's: log a bounded piece of it.
    const shown = typeof id === 'string' ? id.slice(0, 64) : typeof id === 'number' ? id : typeof id
    this.#logger.debug({ sessionId: shownId(sid), id: shown }, why)
  }

  onMessage (sid: string, m: BusMessage): void {
    if (m.t === 'answer') this.#answer(sid, m.msg, m.via)
    else if (m.t === 'ended') this.#rejectAll(sid, new SessionEndedError())
  }

  #answer (sid: string, msg: Record<string, unknown>, via: string | undefined): void {
    const id = String(msg.id)
    const waiter = this.#bySession.get(sid)?.get(id)
    if (waiter === undefined) {
      this.#logger.debug({ sessionId: shownId(sid), id }, 'answer for an unknown or expired request; dropped')
      return
    }
    // `via` names the instance that received the answer (one that predates it sends none: another one).
    waiter.hops ??= via === this.#prefix ? 0 : 1
    waiter.resolve(msg)
    // The answer arrived: drop the kept copy (a bus with `forget` does when the wait ends).
    if (this.#bus.forget === undefined) this.#bus.take?.(sid, id).catch(() => {})
  }

  #rejectAll (sid: string, reason: Error): void {
    for (const w of this.#bySession.get(sid)?.values() ?? []) w.reject(reason)
  }

  /** Rejects every waiting handler (server shutdown). */
  close (): void {
    for (const sid of this.#bySession.keys()) this.#rejectAll(sid, new Error('server shutting down'))
  }
}
