/**
 * The lease a backend lock (Redis, PostgreSQL) hands out: one object per acquisition, with what
 * releasing, renewing and passing it on need, its release and renewal methods instead of closures.
 * `RedisLease` and `PgLease` add their backend's renewal command.
 */
import { performance } from 'node:perf_hooks'
import type { SteadySet } from '../util/steady-map.js'
import { roundTrip } from '../telemetry/index.js'
import { shownId } from '../util/shown-id.js'
import { SessionLockError, SessionLockErrorCodes } from './errors.js'
import type { FifoRelease } from './keyed-fifo.js'
import { Lease } from './lease.js'
import type { Renewal, RenewalClock, RenewalTarget } from './renewal.js'

/** How a lease is released in its backend (one per lock, supplied by the lock). */
export interface LeaseRelease {
  /** Sends the release of a lease (compare-and-delete); resolves once the backend answered. */
  release (key: string, token: string, id: string): Promise<unknown>
  /** A release that failed (the backend unreachable): what the lock does about it, if anything. */
  releaseFailed? (key: string, token: string, id: string): void
  /**
   * Whether commands run in the order they are sent (Redis: one connection): a lease's local slot
   * is then freed once its release is sent, not when it is answered, as the next holder's command
   * follows it on the wire.
   */
  readonly ordered: boolean
}

/** What a lease needs of the lock machinery that handed it out (see `backend-leases.ts`). */
export interface LeaseHome<H> {
  /** The lock that handed it out. */
  readonly lock: object
  /** Lease time-to-live in milliseconds. */
  readonly ttl: number
  /** The backend's client or pool. */
  readonly handle: H
  readonly backend: LeaseRelease
  /** The leases held, and their renewal clock. */
  readonly leases: SteadySet<Lease>
  readonly renewals: RenewalClock
}

/**
 * A lease of a backend lock. `tracked` is false once the lock stopped tracking it (released by its
 * holder, by close, passed on, or ended by a store's own release).
 */
export abstract class BackendLease<H> extends Lease implements RenewalTarget {
  tracked = true
  readonly renewal: Renewal
  /**
   * What the attempt that took the lease read under it, and that attempt (see
   * `BackendLeases.acquireWith`): what a pass-on hands to the next holder. Fields of the lease
   * rather than a WeakMap entry per request.
   */
  #read: unknown
  #readBy: object | null

  constructor (
    id: string,
    readonly home: LeaseHome<H>,
    readonly key: string,
    readonly token: string,
    readonly slot: FifoRelease,
    /** Times this lease was passed on in a row before this holder got it. */
    readonly passes: number,
    /** When the last command that confirmed the lease was sent (`performance.now()`). */
    sentAt: number,
    read: unknown,
    readBy: object | null
  ) {
    super(id, noRelease, { key, token })
    this.#read = read
    this.#readBy = readBy
    this.renewal = home.renewals.start(sentAt, this)
    home.leases.add(this)
  }

  /** The lock that handed it out. */
  get lock (): object {
    return this.home.lock
  }

  /** @internal What was read under the lease (undefined once it ended). */
  get read (): unknown {
    return this.#read
  }

  /** @internal The attempt that read it (null once the lease ended). */
  get readBy (): object | null {
    return this.#readBy
  }

  /** Lease time-to-live in milliseconds. */
  get ttl (): number {
    return this.home.ttl
  }

  /** Stops tracking the lease; returns false when it was not tracked. */
  forget (): boolean {
    if (!this.tracked) return false
    this.tracked = false
    this.renewal.stop()
    this.home.leases.delete(this)
    // What was read under it is the request's: see `Lease.claim()` on why an ended lease lets go.
    this.#read = undefined
    this.#readBy = null
    return true
  }

  protected override async runRelease (): Promise<void> {
    this.forget()
    const backend = this.home.backend
    roundTrip()
    let released: Promise<unknown>
    try {
      released = backend.release(this.key, this.token, this.id)
    } catch (err) {
      released = Promise.reject(err)
    }
    // Sent: on one ordered connection the next waiter may follow at once (see `releaseWith`).
    if (backend.ordered) this.slot()
    try {
      await released
    } catch (err) {
      backend.releaseFailed?.(this.key, this.token, this.id)
      throw new SessionLockError(`Failed to release the lock of session ${shownId(this.id)}; it expires in ${this.home.ttl} ms`, { cause: err })
    } finally {
      // On a pool, after the reply: the next waiter's take may run on another connection.
      this.slot()
    }
  }

  /** Can it still be ours by the clock (a process paused past the ttl resumes before the timer). */
  override get expired (): boolean {
    return this.lost || performance.now() >= this.renewal.confirmedAt + this.home.ttl
  }

  /** Sends the renewal; resolves 1 when the lease is still ours. */
  abstract extendLease (): Promise<number>

  leaseLost (): void {
    // Our token is gone from the backend (or may be): tell the holder; it still releases the lease.
    this.lose(new SessionLockError(`The lock of session ${shownId(this.id)} was lost`, { code: SessionLockErrorCodes.LEASE_LOST }))
  }
}

/** A backend lease releases through its own method. */
function noRelease (): void {}
