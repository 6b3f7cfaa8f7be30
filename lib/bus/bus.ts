/**
 * The bus wakes whoever waits for something that happens elsewhere: a client's answer to a server
 * request, a cancellation, a notification for a session's GET stream, a registry change. The memory
 * bus delivers in-process; the Redis bus (many instances) delivers across processes. A bus is never
 * the only copy of what must not be lost: that is stored first, then published.
 */
import { EventEmitter } from 'node:events'

/** A message on the bus (JSON-serializable). */
export type BusMessage =
  | { t: 'answer', sid: string, msg: Record<string, unknown> }
  | { t: 'cancel', sid: string, requestId: string | number }
  | { t: 'notify', sid: string, msg: Record<string, unknown> }
  | { t: 'ended', sid: string }
  | { t: 'broadcast', msg: Record<string, unknown>, kind: string }
  | { t: 'resource', uri: string }

/** Listener of a channel. */
export type BusListener = (message: BusMessage) => void

/** The bus contract. */
export interface Bus {
  /** Delivers a message to every subscriber of the channel (on any instance). */
  publish (channel: string, message: BusMessage): Promise<void>
  /** Subscribes; resolves once the subscription is active. The returned function unsubscribes. */
  subscribe (channel: string, listener: BusListener): Promise<() => Promise<void>>
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
