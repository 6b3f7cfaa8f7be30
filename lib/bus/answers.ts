/**
 * Handlers of this process waiting for a client's answer to a server→client request
 * (elicitation, sampling, roots). The answer arrives in a separate POST, on any instance: it is
 * kept first where the bus can keep it, then published on the session's channel; the waiting
 * process also looks for the kept copy now and then, so a missed publish (a reconnect) does not
 * lose it.
 */
import { randomBytes } from 'node:crypto'
import type { Bus, BusMessage } from './bus.js'
import type { SessionJob, SessionTopics, TopicLogger } from './session-topics.js'

interface Waiter {
  resolve: (msg: Record<string, unknown>) => void
  reject: (err: Error) => void
}

/** How often a waiting handler looks for a kept answer whose publish it missed (ms). */
const POLL_KEPT = 1000

/** The handlers of this process waiting for answers (see the module doc). */
export class PendingAnswers implements SessionJob {
  readonly #bus: Bus
  readonly #topics: SessionTopics
  readonly #logger: TopicLogger
  readonly #bySession = new Map<string, Map<string, Waiter>>()
  readonly #prefix = randomBytes(4).toString('hex')
  #counter = 0

  constructor (bus: Bus, topics: SessionTopics, logger: TopicLogger) {
    this.#bus = bus
    this.#topics = topics
    this.#logger = logger
    topics.add(this)
  }

  holds (sid: string): boolean { return (this.#bySession.get(sid)?.size ?? 0) > 0 }

  /** Requests to the client of the session pending on this process. */
  count (sid: string): number { return this.#bySession.get(sid)?.size ?? 0 }

  /** A request id for a server→client request, unique across processes. */
  nextId (): string {
    return `srv-${this.#prefix}-${++this.#counter}`
  }

  /**
   * Waits for the client's answer to request `id`. Registered at once (so a cap counts requests
   * made in the same turn); the caller handles timeouts and aborts through `cancel`, and awaits
   * `topics.ready(sid)` before sending the request.
   */
  wait (sid: string, id: string): { answer: Promise<Record<string, unknown>>, cancel: (err: Error) => void } {
    this.#topics.hold(sid)
    let waiters = this.#bySession.get(sid)
    if (waiters === undefined) { waiters = new Map(); this.#bySession.set(sid, waiters) }
    let waiter!: Waiter
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => { waiter = { resolve, reject } })
    waiters.set(id, waiter)
    const poll = this.#pollKept(sid, id, waiter)
    const map = waiters
    const done = (): void => {
      if (poll !== null) clearInterval(poll)
      if (map.get(id) === waiter) map.delete(id)
      if (map.size === 0 && this.#bySession.get(sid) === map) this.#bySession.delete(sid)
      this.#topics.release(sid)
    }
    answer.then(done, done)
    return { answer, cancel: (err) => waiter.reject(err) }
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

  /** Delivers a client's answer: kept first (where the bus can), then published. */
  async deliver (sid: string, msg: Record<string, unknown>, ttl: number): Promise<void> {
    if (this.#bus.keep !== undefined && (typeof msg.id === 'string' || typeof msg.id === 'number')) {
      await this.#bus.keep(sid, String(msg.id), JSON.stringify(msg), ttl)
    }
    await this.#topics.publish(sid, { t: 'answer', sid, msg })
  }

  onMessage (sid: string, m: BusMessage): void {
    if (m.t === 'answer') this.#answer(sid, m.msg)
    else if (m.t === 'ended') this.#rejectAll(sid, new Error('session ended'))
  }

  #answer (sid: string, msg: Record<string, unknown>): void {
    const id = String(msg.id)
    const waiter = this.#bySession.get(sid)?.get(id)
    if (waiter === undefined) {
      this.#logger.debug({ sessionId: sid, id }, 'answer for an unknown or expired request; dropped')
      return
    }
    waiter.resolve(msg)
    // The answer arrived: drop the kept copy (it would expire anyway).
    this.#bus.take?.(sid, id).catch(() => {})
  }

  #rejectAll (sid: string, reason: Error): void {
    for (const w of this.#bySession.get(sid)?.values() ?? []) w.reject(reason)
  }

  /** Rejects every waiting handler (server shutdown). */
  close (): void {
    for (const sid of this.#bySession.keys()) this.#rejectAll(sid, new Error('server shutting down'))
  }
}
