/**
 * In-process keyed FIFO mutex, the first level of every lock: the memory lock is just this, and the
 * file and Redis locks put it in front of their backend so that only one request per process
 * contends for a session there, and requests of one process are served in arrival order.
 *
 * An explicit queue per key (not a promise chain) so that a waiter that times out or is aborted can
 * leave the queue without ever running. A key is in the map only while someone holds it, so the
 * map returns to empty after every burst.
 *
 * Also home to the small helpers the three locks share (timeout validation, errors, backoff).
 */
import type { LeaseFence } from '../sessions/session-store.js'
import { SessionLockError, SessionLockErrorCodes } from './errors.js'
import type { SessionLease } from './session-lock.js'

/** Releases a slot; calling it again does nothing. */
export type FifoRelease = () => void

/** Options of {@link KeyedFifo.acquire}. */
export interface FifoAcquireOptions {
  /** Milliseconds to wait; `0` only takes a free slot; `Infinity` waits forever. */
  timeout: number
  /** Aborting it drops the waiter, which rejects with the signal's reason. */
  signal?: AbortSignal
  /** Recorded as the holder once the slot is granted (see {@link KeyedFifo.isHeldBy}). */
  owner?: object
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
  readonly #entries = new Map<string, Entry>()

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

  /** Waits for the slot of `key`, behind every earlier waiter of that key. */
  acquire (key: string, options: FifoAcquireOptions): Promise<FifoRelease> {
    const { timeout, signal, owner, onTimeout } = options
    if (signal?.aborted === true) return Promise.reject(signal.reason)
    const free = this.tryAcquire(key, owner)
    if (free !== null) return Promise.resolve(free)
    if (!(timeout > 0)) return Promise.reject(onTimeout())
    const entry = this.#entries.get(key) as Entry
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
      entry.queue.push(waiter)
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

// ---- helpers shared by the three locks -------------------------------------------------------

/** Default acquire timeout of every lock (ms). */
export const DEFAULT_LOCK_TIMEOUT = 30_000

/**
 * Validates a timeout in milliseconds (`Infinity` allowed).
 * @throws {RangeError} "<name> must be greater than or equal to 0."
 */
export function checkTimeout (value: unknown, name = 'timeout'): number {
  if (typeof value !== 'number' || !(value >= 0)) {
    throw new RangeError(`${name} must be greater than or equal to 0.`)
  }
  return value
}

/** `release()` of a lease that is no longer held. */
export function notHeldError (id: string): SessionLockError {
  return new SessionLockError(`The lock of session ${id} is not held.`, { code: SessionLockErrorCodes.NOT_HELD })
}

/** `acquire()` by an owner that holds the lock already: an error instead of a deadlock. */
export function alreadyHeldError (id: string): SessionLockError {
  return new SessionLockError(`The lock of session ${id} is already held by this owner.`,
    { code: SessionLockErrorCodes.ALREADY_HELD })
}

/** Anything asked of a closed lock. */
export function closedError (): SessionLockError {
  return new SessionLockError('The session lock is closed.', { code: SessionLockErrorCodes.CLOSED })
}

/** The backend failed: the cause is kept, and its message appended so a log line shows it. */
export function backendError (id: string, cause: unknown): SessionLockError {
  const detail = cause instanceof Error ? cause.message : String(cause)
  return new SessionLockError(`Failed to acquire the lock of session ${id} (${detail})`, { cause })
}

/** Exponential backoff with full jitter: a random delay in [0, min(cap, base * 2^attempt)). */
export function fullJitter (attempt: number, base: number, cap: number): number {
  return Math.random() * Math.min(cap, base * 2 ** Math.min(attempt, 30))
}

/** Waits `ms`, or rejects with the reason of the first of `signals` to abort. */
export function delay (ms: number, ...signals: Array<AbortSignal | undefined>): Promise<void> {
  return new Promise((resolve, reject) => {
    for (const signal of signals) {
      if (signal?.aborted === true) {
        reject(signal.reason)
        return
      }
    }
    const done = (): void => {
      clearTimeout(timer)
      for (const signal of signals) signal?.removeEventListener('abort', onAbort)
    }
    const onAbort = function (this: AbortSignal): void {
      done()
      reject(this.reason)
    }
    const timer = setTimeout(() => {
      done()
      resolve()
    }, ms)
    for (const signal of signals) signal?.addEventListener('abort', onAbort, { once: true })
  })
}

/**
 * The lease the three locks hand out. The lock supplies what releasing does; the lease keeps the
 * state that makes `release()` strict ("not held" the second time) and lets the lock end it from
 * its side: {@link Lease.lose} aborts the signal but leaves the release to the holder (who still
 * runs), {@link Lease.revoke} (on close) aborts and releases, after which the holder's own
 * `release()` resolves quietly instead of failing in its `finally`.
 */
export class Lease implements SessionLease {
  readonly id: string
  readonly fence?: LeaseFence
  // The signal is made on first access: a holder that never looks at it (the plugin's own
  // requests register with whenLost()) does not pay for an AbortController per lease.
  #controller: AbortController | null = null
  #lost = false
  #lostReason: unknown = undefined
  #onLost: (() => void) | null = null
  readonly #onRelease: () => Promise<void>
  #state: 'held' | 'released' | 'revoked' = 'held'

  constructor (id: string, onRelease: () => Promise<void>, fence?: LeaseFence) {
    this.id = id
    this.#onRelease = onRelease
    if (fence !== undefined) this.fence = fence
  }

  get signal (): AbortSignal {
    if (this.#controller === null) {
      this.#controller = new AbortController()
      if (this.#lost) this.#controller.abort(this.#lostReason)
    }
    return this.#controller.signal
  }

  /** Whether the lease was lost or revoked (its signal is, or would be, aborted). */
  get lost (): boolean {
    return this.#lost
  }

  /**
   * @internal Calls `fn` once when the lease is lost or revoked: what a listener on `signal` does,
   * without making the signal.
   */
  whenLost (fn: () => void): void {
    if (this.#lost) { fn(); return }
    this.#onLost = fn
  }

  #markLost (reason: unknown): void {
    if (this.#lost) return
    this.#lost = true
    this.#lostReason = reason
    this.#controller?.abort(reason)
    const fn = this.#onLost
    this.#onLost = null
    fn?.()
  }

  /** Whether neither the holder nor the lock has ended the lease yet. */
  get held (): boolean {
    return this.#state === 'held'
  }

  async release (): Promise<void> {
    if (this.#state === 'revoked') return
    if (!this.claim()) throw notHeldError(this.id)
    await this.#onRelease()
  }

  /**
   * Marks the lease released without running the lock's release, for a caller that releases it
   * its own way (the Redis store's save-and-release script). False when it was not held.
   */
  claim (): boolean {
    if (this.#state !== 'held') return false
    this.#state = 'released'
    return true
  }

  /** Marks the lease lost: aborts its signal with `reason`; the holder still releases it. */
  lose (reason: unknown): void {
    if (this.#state === 'held') this.#markLost(reason)
  }

  /** Ends the lease from the lock's side (close): aborts the signal and releases. Never rejects. */
  async revoke (reason: unknown): Promise<void> {
    if (this.#state !== 'held') return
    this.#state = 'revoked'
    this.#markLost(reason)
    try { await this.#onRelease() } catch {}
  }
}
