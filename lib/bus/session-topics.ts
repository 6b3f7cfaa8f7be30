/**
 * A process's subscriptions to session channels. Everything that can arrive from elsewhere for a
 * session (a client's answer, a cancellation, a notification for its GET stream, an event of a
 * stream running on another instance, the session's end) arrives on the session's bus channel; a
 * process listens to it only while one of its jobs (in-flight requests, waiting handlers, GET
 * streams, followers) holds something of that session, and stops when none does.
 */
import { SteadyMap } from '../util/steady-map.js'
import type { Bus, BusMessage } from './bus.js'
import { OutageLog, type OutageLogger } from '../util/outage-log.js'
import { shownId } from '../util/shown-id.js'

/** What a job reports to its logger (a Fastify/pino logger fits). */
export type TopicLogger = OutageLogger

/** One job of the hub: holds things per session, and hears the session's channel. */
export interface SessionJob {
  /** Whether the job holds anything of `sid` on this process (the session stays subscribed while any does). */
  holds (sid: string): boolean
  /** A message arrived on the session's channel. */
  onMessage (sid: string, message: BusMessage): void
}

interface Topic {
  /**
   * Resolves when the bus subscription is active; its value unsubscribes. `null` while only short
   * requests are in flight: subscribing per request would cost two bus round trips each.
   */
  subscription: Promise<() => Promise<void>> | null
  /** The subscription failed (bus down): the next `ready()` subscribes again. */
  failed: boolean
  /** Work `ready()` also waits for (see {@link SessionTopics.gate}); `null` when none. */
  gates: Set<Promise<unknown>> | null
}

export const sessionChannel = (sid: string): string => `s:${sid}`

/** The session channels this process listens to (see the module doc). */
export class SessionTopics {
  readonly #bus: Bus
  readonly #logger: TopicLogger
  /** A session's entry comes and goes with each short request: a map whose table never empties. */
  readonly #topics = new SteadyMap<Topic>()
  readonly #jobs: SessionJob[] = []
  /** Failed subscriptions (the bus down): one error line per outage, not one per session. */
  readonly #outages = new OutageLog()
  readonly #subscribed = (): void => { this.#outages.ok(this.#logger) }

  constructor (bus: Bus, logger: TopicLogger) {
    this.#bus = bus
    this.#logger = logger
  }

  /** Adds a job: it hears every session channel this process listens to. */
  add (job: SessionJob): void {
    this.#jobs.push(job)
  }

  /** Sessions this process holds something of. */
  get size (): number { return this.#topics.size }

  /** Whether this process listens to the session's channel (or is subscribing). */
  subscribed (sid: string): boolean {
    return this.#topics.get(sid)?.subscription != null
  }

  /** Marks the session held; subscribes to its channel unless `subscribe` is false. */
  hold (sid: string, subscribe = true): void {
    let topic = this.#topics.get(sid)
    if (topic === undefined) {
      topic = { subscription: null, failed: false, gates: null }
      this.#topics.set(sid, topic)
    }
    if (subscribe && topic.subscription === null) this.#subscribe(sid, topic)
  }

  /**
   * Waits until this process listens to the session's channel, and the gates registered for the
   * session are through, so that nothing sent after is missed (an answer to a request sent next
   * finds the subscription and its expectation).
   */
  async ready (sid: string): Promise<void> {
    this.hold(sid, false)
    const topic = this.#topics.get(sid) as Topic
    if (topic.failed || topic.subscription === null) this.#subscribe(sid, topic)
    try {
      await topic.subscription
      if (topic.gates !== null) await Promise.all(topic.gates)
    } catch (err) {
      this.release(sid)
      throw err
    }
  }

  /**
   * Makes `ready(sid)` wait for `work` too, until it settles (a failure fails `ready`): what must be
   * in place before the client can answer what comes next, e.g. an answer's expectation on the bus.
   * The session must be held.
   */
  gate (sid: string, work: Promise<unknown>): void {
    const topic = this.#topics.get(sid)
    if (topic === undefined) throw new Error('gate() on a session that is not held')
    const gates = topic.gates ??= new Set()
    gates.add(work)
    const done = (): void => {
      gates.delete(work)
      if (gates.size === 0 && topic.gates === gates) topic.gates = null
    }
    work.then(done, done)
  }

  #subscribe (sid: string, topic: Topic): void {
    const subscription = this.#bus.subscribe(sessionChannel(sid), (m) => { this.#deliver(sid, m) })
    topic.subscription = subscription
    topic.failed = false
    subscription.then(this.#subscribed, (err: unknown) => {
      this.#outages.failed('bus subscription', err, this.#logger, { sessionId: shownId(sid) })
      // A failed subscription is not kept: the next ready() subscribes again.
      if (topic.subscription === subscription) topic.failed = true
    })
  }

  /** Forgets the session (and unsubscribes) once no job holds anything of it. */
  release (sid: string): void {
    const topic = this.#topics.get(sid)
    if (topic === undefined) return
    for (const job of this.#jobs) if (job.holds(sid)) return
    this.#topics.delete(sid)
    if (topic.failed || topic.subscription === null) return
    topic.subscription.then(unsub => unsub())
      .catch((err: unknown) => this.#logger.warn({ err, sessionId: shownId(sid) }, 'bus unsubscribe failed'))
  }

  /** Publishes on the session's channel (reaches whichever process holds the waiter or stream). */
  async publish (sid: string, message: BusMessage): Promise<void> {
    await this.#bus.publish(sessionChannel(sid), message)
    // A session held here without a subscription (short requests only) gets it directly.
    const topic = this.#topics.get(sid)
    if (topic !== undefined && topic.subscription === null) this.#deliver(sid, message)
  }

  #deliver (sid: string, message: BusMessage): void {
    if (!this.#topics.has(sid)) return
    for (const job of this.#jobs) job.onMessage(sid, message)
    // A message can end what a job held (a stream ended, the session ended).
    this.release(sid)
  }

  /** Unsubscribes from everything (server shutdown); the jobs end what they hold themselves. */
  async close (): Promise<void> {
    const unsubs: Array<Promise<unknown>> = []
    for (const topic of this.#topics.values()) {
      if (topic.subscription !== null) unsubs.push(topic.subscription.then(u => u()).catch(() => {}))
    }
    this.#topics.clear()
    await Promise.all(unsubs)
  }
}
