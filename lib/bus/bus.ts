/**
 * The bus wakes whoever waits for something that happens elsewhere: a client's answer to a server
 * request, a cancellation, a notification for a session's GET stream, a registry change. The memory
 * bus delivers in-process; the Redis bus (many instances) delivers across processes. A bus is never
 * the only copy of what must not be lost: that is stored first, then published.
 */
import { EventEmitter } from 'node:events'
import { performance } from 'node:perf_hooks'

/** A message on the bus (JSON-serializable). */
export type BusMessage =
  /** A client's answer to a server→client request (stored first where the bus can store). */
  | { t: 'answer', sid: string, msg: Record<string, unknown>, via?: string }
  /** `notifications/cancelled` for a running request. */
  | { t: 'cancel', sid: string, requestId: string | number }
  /** A server notification for the session's GET stream. */
  | { t: 'notify', sid: string, msg: Record<string, unknown> }
  /** The session's resource subscriptions changed. */
  | { t: 'subs', sid: string, uris: string[] }
  /** An event appended to a resumable stream (after it was logged), for followers. */
  | { t: 'event', sid: string, streamId: string, id: string, data: string }
  /** A resumable stream ended. */
  | { t: 'streamEnd', sid: string, streamId: string }
  /** A GET stream of the session opened (on some instance): any other one steps down. */
  | { t: 'getStream', sid: string, claim: string }
  /** The session ended. */
  | { t: 'ended', sid: string }
  /** A notification for every session's GET stream and every matching listen stream. */
  | { t: 'broadcast', msg: Record<string, unknown>, kind: string }
  /** A resource changed. */
  | { t: 'resource', uri: string }
  /** A task was cancelled, or got answers to its input requests (the record has them): wakes its runner. */
  | { t: 'task', id: string, what: 'cancel' | 'input' }

/** The channel every instance listens to for broadcasts. */
export const BROADCAST_CHANNEL = 'broadcast'

/** Listener of a channel. */
export type BusListener = (message: BusMessage) => void

/**
 * The bus contract.
 *
 * Answers of the client to server→client requests (elicitation, sampling, roots) go through
 * `expect` → `keep` → `publish`, so that only an answer somebody waits for is ever stored: the
 * waiting side calls `expect` before the request goes out (the answer may land on any instance),
 * the receiving side `keep`s it (which claims the expectation) and publishes it only when kept, and
 * the waiting side `forget`s once it is done. An answer nobody expects (never asked, asked on
 * another session, already answered, given up) is dropped without being stored.
 */
export interface Bus {
  /** Delivers a message to every subscriber of the channel (on any instance). */
  publish (channel: string, message: BusMessage): Promise<void>
  /** Subscribes; resolves once the subscription is active. The returned function unsubscribes. */
  subscribe (channel: string, listener: BusListener): Promise<() => Promise<void>>
  /**
   * Registers, before the request is sent, that a handler waits for the client's answer `key`
   * (the server→client request id) of session `sid`, for at most `ttl` ms: until then an answer
   * with that key is accepted by `keep` on any instance sharing this bus. Resolves once the
   * expectation is visible to every instance. It ends with `keep` (the first answer claims it),
   * `forget`, or its `ttl`. A bus implementing `expect` implements `keep` and `forget` too.
   * `tag` (the waiting side's trace context, a `traceparent`) is handed to the `keep` that claims it.
   */
  expect? (sid: string, key: string, ttl: number, tag?: string): Promise<void>
  /**
   * Receiving side of an answer: claims the expectation of `key` and keeps `value` for take()
   * (which a waiter whose publish was missed polls), for at most `ttl` ms, atomically. Resolves
   * whether it was kept: `false` when the answer was not expected (nothing is stored; the caller
   * drops it), `true` when it was (the caller then publishes it). Buses that cannot lose messages
   * (in-process) need not store the value. A bus without `expect` keeps every value (and may
   * resolve `undefined`, the contract before `expect`, read as kept). An expectation made with a
   * `tag` may resolve that tag (a string) instead of `true`: kept, and here is the waiting side's tag.
   */
  keep? (sid: string, key: string, value: string, ttl: number): Promise<boolean | string | void>
  /** Takes (reads and deletes) a kept value; `null` when there is none. */
  take? (sid: string, key: string): Promise<string | null>
  /**
   * Waiting side, once it is done (answered, timed out, cancelled): drops the expectation of `key`
   * and any kept copy, so that nothing of it outlives the wait.
   */
  forget? (sid: string, key: string): Promise<void>
  /** Stops delivery and releases what the bus created. */
  close (): Promise<void>
}

/**
 * In-process bus: one EventEmitter, delivery on the next microtask. Answers are delivered only
 * when expected (a handler of a plugin instance sharing this bus waits for them); as nothing can
 * be missed in-process, they are never stored (no `take`).
 */
export class MemoryBus implements Bus {
  #ee = new EventEmitter()
  /** Expected answers: `<sid>\n<key>` → when the expectation ends (`performance.now()` ms), and its tag. */
  readonly #expected = new Map<string, { until: number, tag: string | undefined }>()
  constructor () { this.#ee.setMaxListeners(0) }

  async expect (sid: string, key: string, ttl: number, tag?: string): Promise<void> {
    this.#expected.set(`${sid}\n${key}`, { until: performance.now() + ttl, tag })
  }

  async keep (sid: string, key: string): Promise<boolean | string> {
    const k = `${sid}\n${key}`
    const e = this.#expected.get(k)
    if (e === undefined) return false
    this.#expected.delete(k)
    if (performance.now() > e.until) return false
    return e.tag ?? true
  }

  async forget (sid: string, key: string): Promise<void> {
    this.#expected.delete(`${sid}\n${key}`)
  }

  /** Expectations held (tests check it returns to 0). */
  get expected (): number { return this.#expected.size }

  async publish (channel: string, message: BusMessage): Promise<void> {
    this.#ee.emit(channel, message)
  }

  async subscribe (channel: string, listener: BusListener): Promise<() => Promise<void>> {
    this.#ee.on(channel, listener)
    return async () => { this.#ee.off(channel, listener) }
  }

  /** Number of channels with listeners (tests check it returns to 0). */
  get channels (): number { return this.#ee.eventNames().length }

  async close (): Promise<void> {
    this.#ee.removeAllListeners()
    this.#expected.clear()
  }
}
