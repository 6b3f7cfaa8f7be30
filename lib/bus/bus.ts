/**
 * The bus wakes whoever waits for something that happens elsewhere: a client's answer to a server
 * request, a cancellation, a notification for a session's GET stream, a registry change. The memory
 * bus delivers in-process; the Redis bus (many instances) delivers across processes. A bus is never
 * the only copy of what must not be lost: that is stored first, then published.
 */
import { EventEmitter } from 'node:events'

/** A message on the bus (JSON-serializable). */
export type BusMessage =
  /** A client's answer to a server→client request (stored first where the bus can store). */
  | { t: 'answer', sid: string, msg: Record<string, unknown> }
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

/** The channel every instance listens to for broadcasts. */
export const BROADCAST_CHANNEL = 'broadcast'

/** Listener of a channel. */
export type BusListener = (message: BusMessage) => void

/** The bus contract. */
export interface Bus {
  /** Delivers a message to every subscriber of the channel (on any instance). */
  publish (channel: string, message: BusMessage): Promise<void>
  /** Subscribes; resolves once the subscription is active. The returned function unsubscribes. */
  subscribe (channel: string, listener: BusListener): Promise<() => Promise<void>>
  /**
   * Keeps a value that must survive a missed publish (a client's answer), for `ttl` ms. Buses that
   * cannot lose messages (in-process) need not implement it.
   */
  keep? (sid: string, key: string, value: string, ttl: number): Promise<void>
  /** Takes (reads and deletes) a kept value; `null` when there is none. */
  take? (sid: string, key: string): Promise<string | null>
  /** Stops delivery and releases what the bus created. */
  close (): Promise<void>
}

/** In-process bus: one EventEmitter, delivery on the next microtask. */
export class MemoryBus implements Bus {
  #ee = new EventEmitter()
  constructor () { this.#ee.setMaxListeners(0) }

  async publish (channel: string, message: BusMessage): Promise<void> {
    this.#ee.emit(channel, message)
  }

  async subscribe (channel: string, listener: BusListener): Promise<() => Promise<void>> {
    this.#ee.on(channel, listener)
    return async () => { this.#ee.off(channel, listener) }
  }

  /** Number of channels with listeners (tests check it returns to 0). */
  get channels (): number { return this.#ee.eventNames().length }

  async close (): Promise<void> { this.#ee.removeAllListeners() }
}
