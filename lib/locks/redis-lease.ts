/** The lease a `RedisSessionLock` hands out (see `redis-lock.ts`). */
import { performance } from 'node:perf_hooks'
import type { RedisClient } from '../redis/scripts.js'
import type { SteadySet } from '../util/steady-map.js'
import { roundTrip } from '../telemetry/index.js'
import { SessionLockError, SessionLockErrorCodes } from './errors.js'
import type { FifoRelease } from './keyed-fifo.js'
import { Lease } from './lease.js'
import type { Renewal, RenewalClock, RenewalTarget } from './renewal.js'
import { shownId } from '../util/shown-id.js'

/**
 * A lease of a `RedisSessionLock`, with what releasing, renewing and passing it on need: one
 * object per acquisition, its release and renewal methods instead of closures. `tracked` is false
 * once the lock stopped tracking it (released by its holder, by close, or by the store's script).
 */
export class RedisLease extends Lease implements RenewalTarget {
  tracked = true
  readonly renewal: Renewal
  /**
   * What the store + lock fast path read under this lease, and which fast path read it (see
   * `state/redis-fast-path.ts`): fields of the lease rather than a WeakMap entry per request.
   */
  /** @internal Mutable: written by the fast path that reads under the lease. */
  read: unknown = undefined
  /** @internal */
  readBy: object | null = null

  constructor (
    id: string,
    /** The lock that handed it out (whose release paths may end it), and its lease ttl. */
    readonly lock: object,
    readonly ttl: number,
    readonly client: RedisClient,
    readonly key: string,
    readonly token: string,
    readonly slot: FifoRelease,
    /** Times this lease was passed on in a row before this holder got it. */
    readonly passes: number,
    /** The lock's leases, and its renewal clock. */
    readonly leases: SteadySet<Lease>,
    clock: RenewalClock,
    sentAt: number
  ) {
    super(id, noRelease, { key, token })
    this.renewal = clock.start(sentAt, this)
    leases.add(this)
  }

  /** Stops tracking the lease; returns false when it was not tracked. */
  forget (): boolean {
    if (!this.tracked) return false
    this.tracked = false
    this.renewal.stop()
    this.leases.delete(this)
    // What was read under it is the request's: see `Lease.claim()` on why an ended lease lets go.
    this.read = undefined
    this.readBy = null
    return true
  }

  protected override async runRelease (): Promise<void> {
    this.forget()
    roundTrip()
    const released = this.client.mcpLockRelease(this.key, this.token)
    this.slot() // sent: the next waiter may follow at once (see releaseWith)
    try {
      await released
    } catch (err) {
      throw new SessionLockError(`Failed to release the lock of session ${shownId(this.id)}; it expires in ${this.ttl} ms`, { cause: err })
    }
  }

  /** Can it still be ours by the clock (a process paused past the ttl resumes before the timer). */
  override get expired (): boolean {
    return this.lost || performance.now() >= this.renewal.confirmedAt + this.ttl
  }

  async extendLease (): Promise<number> {
    return await this.client.mcpLockExtend(this.key, this.token, this.ttl)
  }

  leaseLost (): void {
    // Our token is gone from Redis (or may be): tell the holder; it still releases the lease.
    this.lose(new SessionLockError(`The lock of session ${shownId(this.id)} was lost`, { code: SessionLockErrorCodes.LEASE_LOST }))
  }
}

/** RedisLease releases through its own method. */
function noRelease (): void {}
