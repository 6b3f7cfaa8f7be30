/** The lease a `PgSessionLock` hands out (see `pg-lock.ts`): a row of `<prefix>leases`. */
import { performance } from 'node:perf_hooks'
import type { PgPoolLike } from '../postgres/pool.js'
import type { SteadySet } from '../util/steady-map.js'
import { roundTrip } from '../telemetry/index.js'
import { SessionLockError, SessionLockErrorCodes } from './errors.js'
import type { FifoRelease } from './keyed-fifo.js'
import { Lease } from './lease.js'
import type { Renewal, RenewalClock, RenewalTarget } from './renewal.js'

/** What a lease runs, made once per lock: its statements (the table is the lock's), and where a failed release goes. */
export interface LeaseStatements {
  readonly release: { name: string, text: string }
  readonly extend: { name: string, text: string }
  /** A release that failed (the database unreachable): the lock deletes the row once it can. */
  readonly orphan: (id: string, token: string, ttl: number) => void
}

/** A lease row of a `PgSessionLock`, released, renewed and ended by its own methods. */
export class PgLease extends Lease implements RenewalTarget {
  tracked = true
  readonly renewal: Renewal
  /**
   * What the store + lock pairing read under this lease, and which store read it (see
   * `sessions/pg-store.ts`): what a pass-on hands to the next holder.
   */
  /** @internal Mutable: written by the fast path that reads under the lease. */
  read: unknown = undefined
  /** @internal */
  readBy: object | null = null

  constructor (
    id: string,
    /** The lock that handed it out, and its lease ttl. */
    readonly lock: object,
    readonly ttl: number,
    readonly pool: PgPoolLike,
    readonly statements: LeaseStatements,
    readonly token: string,
    readonly slot: FifoRelease,
    readonly leases: SteadySet<Lease>,
    clock: RenewalClock,
    sentAt: number,
    /** Times this lease was passed on in a row before this holder got it. */
    readonly passes = 0
  ) {
    super(id, noRelease, { key: id, token })
    this.renewal = clock.start(sentAt, this)
    leases.add(this)
  }

  /** Stops tracking the lease; returns false when it was not tracked. */
  forget (): boolean {
    if (!this.tracked) return false
    this.tracked = false
    this.renewal.stop()
    this.leases.delete(this)
    // What was read under it is the request's: an ended lease lets go (see `Lease.claim()`).
    this.read = undefined
    this.readBy = null
    return true
  }

  protected override async runRelease (): Promise<void> {
    this.forget()
    roundTrip()
    try {
      await this.pool.query({ ...this.statements.release, values: [this.id, this.token] })
    } catch (err) {
      this.statements.orphan(this.id, this.token, this.ttl)
      throw new SessionLockError(`Failed to release the lock of session ${this.id}; it expires in ${this.ttl} ms`, { cause: err })
    } finally {
      // After the reply, not when sent: the next waiter's take may run on another connection.
      this.slot()
    }
  }

  /** Can it still be ours by the clock (a process paused past the ttl resumes before the timer). */
  override get expired (): boolean {
    return this.lost || performance.now() >= this.renewal.confirmedAt + this.ttl
  }

  async extendLease (): Promise<number> {
    const { rows } = await this.pool.query({ ...this.statements.extend, values: [this.id, this.token, this.ttl] })
    return rows[0]?.ok === true ? 1 : 0
  }

  leaseLost (): void {
    this.lose(new SessionLockError(`The lock of session ${this.id} was lost`, { code: SessionLockErrorCodes.LEASE_LOST }))
  }
}

/** PgLease releases through its own method. */
function noRelease (): void {}
