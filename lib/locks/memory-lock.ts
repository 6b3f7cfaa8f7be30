/**
 * `MemorySessionLock`: the per-session lock of one process, a keyed FIFO mutex. Right for the
 * memory store, or for any store when the app runs as one process. Nothing is kept for a session
 * nobody holds or waits for.
 */
import { SteadySet } from '../util/steady-map.js'
import { SessionLockTimeoutError, alreadyHeldError, closedError } from './errors.js'
import { KeyedFifo } from './keyed-fifo.js'
import { Lease } from './lease.js'
import { DEFAULT_LOCK_TIMEOUT, checkTimeout } from './wait.js'
import type { AcquireOptions, LocalAcquireOptions, SessionLease, SessionLock } from './session-lock.js'

/** Options of {@link MemorySessionLock}. */
export interface MemorySessionLockOptions {
  /** Default acquire timeout in milliseconds (default 30,000; `0` tries once). Must be >= 0. */
  timeout?: number
}

/** The memory lock's `#acquireNow` (set by the class's static block; see {@link memoryLockNow}). */
let grantNow: (lock: MemorySessionLock, id: string, options: LocalAcquireOptions) => Lease | null

/** In-process session lock (FIFO per session). */
export class MemorySessionLock implements SessionLock {
  readonly timeout: number
  readonly #fifo = new KeyedFifo()
  /** A lease enters and leaves on every request: a set whose table never empties. */
  readonly #leases = new SteadySet<Lease>()
  #closed = false

  /** @throws {RangeError} when `timeout` is negative. */
  constructor (options: MemorySessionLockOptions = {}) {
    this.timeout = checkTimeout(options.timeout ?? DEFAULT_LOCK_TIMEOUT)
  }

  /** Sessions held right now (0 when idle). */
  get size (): number {
    return this.#fifo.size
  }

  /** Requests queued behind a holder, over all sessions. */
  get pending (): number {
    return this.#fifo.waiting
  }

  async acquire (id: string, options: AcquireOptions = {}): Promise<SessionLease> {
    if (this.#closed) throw closedError()
    const timeout = options.timeout === undefined ? this.timeout : checkTimeout(options.timeout)
    if (this.#fifo.isHeldBy(id, options.owner)) throw alreadyHeldError(id)
    const release = await this.#fifo.acquire(id, {
      timeout,
      signal: options.signal,
      owner: options.owner,
      front: options.priority,
      onTimeout: () => new SessionLockTimeoutError(id, timeout)
    })
    return this.#lease(id, release)
  }

  /**
   * {@link acquire} without a promise when it would grant at once (the key is free): the lease, or
   * `null`, doing nothing, when it would wait or refuse; then `await acquire()`.
   */
  #acquireNow (id: string, options: LocalAcquireOptions): Lease | null {
    if (this.#closed || options.signal?.aborted === true) return null
    const release = this.#fifo.tryAcquire(id, options.owner)
    return release === null ? null : this.#lease(id, release)
  }

  static {
    grantNow = (lock, id, options) => lock.#acquireNow(id, options)
  }

  async tryAcquire (id: string, options: Pick<AcquireOptions, 'owner'> = {}): Promise<SessionLease | null> {
    if (this.#closed) throw closedError()
    if (this.#fifo.isHeldBy(id, options.owner)) throw alreadyHeldError(id)
    const release = this.#fifo.tryAcquire(id, options.owner)
    return release === null ? null : this.#lease(id, release)
  }

  /** Rejects waiters, releases held leases (aborting their signals). Never throws. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#fifo.rejectAll(closedError())
    await Promise.all(this.#leases.values().map(lease => lease.revoke(closedError())))
  }

  #lease (id: string, release: () => void): Lease {
    const lease: Lease = new MemoryLease(id, () => {
      this.#leases.delete(lease)
      release()
    })
    this.#leases.add(lease)
    return lease
  }
}

/** The memory lock's lease: its release does all its work before it returns. */
class MemoryLease extends Lease {
  /** `release()` without a promise; throws what `release()` would reject with. */
  releaseNow (): void {
    if (this.beginRelease()) void this.runRelease()
  }
}

/**
 * The memory lock's acquire and release without a promise, for the memory pairing
 * (`state/pairings/memory-pairing.ts`) only: `acquireNow` grants a free key at once (never ahead
 * of a waiter) and returns `null`, doing nothing, when `acquire()` would wait or refuse;
 * `releaseNow` releases one of this lock's leases at once.
 * @internal
 */
export const memoryLockNow = {
  acquireNow: (lock: MemorySessionLock, id: string, options: LocalAcquireOptions): SessionLease | null => grantNow(lock, id, options),
  releaseNow: (lease: SessionLease): void => { (lease as MemoryLease).releaseNow() }
}
