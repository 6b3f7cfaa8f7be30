/**
 * What `RedisSessionLock` and `PgSessionLock` share as locks: the `SessionLock` surface over their
 * lease machinery (`backend-leases.ts`), which each lock keeps in a private field. A store that
 * takes leases in its own commands reaches it through its lock's accessor (`redisLeaseEngine`,
 * `pgLeaseEngine`, left out of the published declarations), which reads that field here.
 */
import { BackendLeases, type LeaseAttempt, type LeaseBackend } from './backend-leases.js'
import { SessionLockTimeoutError } from './errors.js'
import type { AcquireOptions, SessionLease, SessionLock } from './session-lock.js'

/** Reads a lock's engine (set by the class's static block, which alone can read its private field). */
let engineOf: <H>(lock: BackendSessionLock<H>) => BackendLeases<H>

/** A session lock backed by leases in a shared backend (see the module doc). */
export abstract class BackendSessionLock<H> implements SessionLock {
  /** Default acquire timeout in milliseconds. */
  readonly timeout: number
  /** Lease time-to-live in milliseconds. */
  readonly ttl: number
  /** The FIFO, the held leases, their renewal and pass-on. */
  readonly #engine: BackendLeases<H>
  /** One try of `acquire()`, and what it makes of a lease passed on by another reader (if it takes it). */
  readonly #take: LeaseAttempt<H, undefined>
  readonly #adopt: ((handed: unknown) => undefined) | undefined

  static {
    engineOf = lock => lock.#engine
  }

  /**
   * `take`: one try of `acquire()`; `adopt`: given, `acquire()` takes a lease passed on by a
   * store's pairing as it is, else it releases it and takes a fresh one.
   */
  protected constructor (timeout: number, ttl: number, backend: LeaseBackend<H>, take: LeaseAttempt<H, undefined>,
    adopt?: (handed: unknown) => undefined) {
    this.timeout = timeout
    this.ttl = ttl
    this.#engine = new BackendLeases(this, timeout, ttl, backend)
    this.#take = take
    this.#adopt = adopt
  }

  /** Sessions held or waited for by this instance right now (0 when idle). */
  get size (): number {
    return this.#engine.size
  }

  /** Requests of this process queued behind a holder, over all sessions. */
  get pending (): number {
    return this.#engine.pending
  }

  /** Leases this instance holds right now. */
  get held (): number {
    return this.#engine.held
  }

  async acquire (id: string, options: AcquireOptions = {}): Promise<SessionLease> {
    const taken = await this.#engine.acquireWith(id, options, this.#take, this.#adopt)
    return (taken as NonNullable<typeof taken>).lease
  }

  async tryAcquire (id: string, options: Pick<AcquireOptions, 'owner'> = {}): Promise<SessionLease | null> {
    try {
      return await this.acquire(id, { owner: options.owner, timeout: 0 })
    } catch (err) {
      if (err instanceof SessionLockTimeoutError) return null
      throw err
    }
  }

  /**
   * Rejects waiters, stops renewals, releases held leases (aborting their signals), then closes
   * what the lock opened itself (its client or pool). Bounded; never throws.
   */
  async close (): Promise<void> {
    if (this.#engine.closed) return
    await this.#engine.close()
    await this.closeBackend()
  }

  /** What `close()` does once the leases are released: close what the lock opened. Never throws. */
  protected abstract closeBackend (): Promise<void>
}

/** @internal The lease machinery of a backend lock (see the module doc). */
export function leaseEngine<H> (lock: BackendSessionLock<H>): BackendLeases<H> {
  return engineOf(lock)
}
