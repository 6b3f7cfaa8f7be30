/**
 * In-process keyed FIFO mutex, the first level of every lock: the memory lock is just this, and the
 * file and Redis locks put it in front of their backend so that only one request per process
 * contends for a session there, and requests of one process are served in arrival order.
 *
 * An explicit queue per key (not a promise chain) so that a waiter that times out or is aborted can
 * leave the queue without ever running. A key is in the map only while someone holds it, so the
 * map returns to empty after every burst.
 */

import { SteadyMap } from '../util/steady-map.js'
import { signalOf, type AbortSource } from './session-lock.js'

/** Releases a slot; calling it again does nothing. */
export type FifoRelease = () => void

/** Options of {@link KeyedFifo.acquire}. */
export interface FifoAcquireOptions {
  /** Milliseconds to wait; `0` only takes a free slot; `Infinity` waits forever. */
  timeout: number
  /**
   * Aborting it drops the waiter, which rejects with the signal's reason. An `AbortSource`'s signal
   * is asked for only when the caller has to wait.
   */
  signal?: AbortSignal | AbortSource
  /** Recorded as the holder once the slot is granted (see {@link KeyedFifo.isHeldBy}). */
  owner?: object
  /** Queue at the head instead of the tail (before every other waiter of the key). */
  front?: boolean
  /** Builds the rejection of a waiter whose timeout ran out. */
  onTimeout: () => Error
}

interface Waiter {
  readonly owner: object | undefined
  readonly resolve: (release: FifoRelease) => void
  readonly reject: (err: unknown) => void
  timer?: NodeJS.Timeout
  signal?: AbortSignal
  onAbort?: () => void
}

interface Entry {
  owner: object | undefined
  readonly queue: Waiter[]
}

/** A FIFO mutex per key. */
export class KeyedFifo {
  /** A key's entry comes and goes with each request on it: a map whose table never empties. */
  readonly #entries = new SteadyMap<Entry>()

  /** Number of keys held right now (0 when idle: nothing is kept for released keys). */
  get size (): number {
    return this.#entries.size
  }

  /** Number of queued waiters over all keys. */
  get waiting (): number {
    let n = 0
    for (const entry of this.#entries.values()) n += entry.queue.length
    return n
  }

  /** Whether someone is queued behind the holder of `key`. */
  hasWaiters (key: string): boolean {
    const entry = this.#entries.get(key)
    return entry !== undefined && entry.queue.length > 0
  }

  /** Whether `key` is held by `owner` (false for an undefined owner). */
  isHeldBy (key: string, owner: object | undefined): boolean {
    return owner !== undefined && this.#entries.get(key)?.owner === owner
  }

  /** Takes the slot if it is free; `null` otherwise. Never waits and never jumps the queue. */
  tryAcquire (key: string, owner?: object): FifoRelease | null {
    if (this.#entries.has(key)) return null
    const entry: Entry = { owner, queue: [] }
    this.#entries.set(key, entry)
    return this.#releaser(key, entry)
  }

  /**
   * The slot at once, without a promise, when {@link acquire} would grant it at once (the key is
   * free and the signal has not aborted); `null` otherwise, changing nothing (then `acquire()`
   * waits or refuses).
   * @internal
   */
  grantNow (key: string, options: Pick<FifoAcquireOptions, 'owner' | 'signal'>): FifoRelease | null {
    return options.signal?.aborted === true ? null : this.tryAcquire(key, options.owner)
  }

  /** Waits for the slot of `key`, behind every earlier waiter of that key. */
  acquire (key: string, options: FifoAcquireOptions): Promise<FifoRelease> {
    const { timeout, owner, onTimeout } = options
    const free = this.grantNow(key, options)
    if (free !== null) return Promise.resolve(free)
    if (options.signal?.aborted === true) return Promise.reject(options.signal.reason)
    if (!(timeout > 0)) return Promise.reject(onTimeout())
    const entry = this.#entries.get(key) as Entry
    const signal = signalOf(options.signal)
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { owner, resolve, reject }
      const drop = (err: unknown): void => {
        const i = entry.queue.indexOf(waiter)
        if (i >= 0) entry.queue.splice(i, 1)
        cleanup(waiter)
        reject(err)
      }
      if (Number.isFinite(timeout)) {
        // Not unref()ed: a waiter is pending work someone awaits, like a socket read. It is
        // always cleared: on grant, on abort, and by rejectAll() when the lock closes.
        waiter.timer = setTimeout(() => drop(onTimeout()), timeout)
      }
      if (signal !== undefined) {
        waiter.signal = signal
        waiter.onAbort = () => drop(signal.reason)
        signal.addEventListener('abort', waiter.onAbort, { once: true })
      }
      if (options.front === true) entry.queue.unshift(waiter)
      else entry.queue.push(waiter)
    })
  }

  /** Rejects every queued waiter with `err` (used by `close()`); holders keep their slots. */
  rejectAll (err: unknown): void {
    for (const entry of this.#entries.values()) {
      for (const waiter of entry.queue.splice(0)) {
        cleanup(waiter)
        waiter.reject(err)
      }
    }
  }

  #releaser (key: string, entry: Entry): FifoRelease {
    let released = false
    return () => {
      if (released) return
      released = true
      const next = entry.queue.shift()
      if (next === undefined) {
        // The owner (a request) is let go: a rebuilt table may keep the entry (see `Lease.claim()`).
        entry.owner = undefined
        this.#entries.delete(key)
        return
      }
      // Direct hand-off: the slot never looks free, so nobody can overtake the queue.
      cleanup(next)
      entry.owner = next.owner
      next.resolve(this.#releaser(key, entry))
    }
  }
}

function cleanup (waiter: Waiter): void {
  if (waiter.timer !== undefined) clearTimeout(waiter.timer)
  if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort)
}
