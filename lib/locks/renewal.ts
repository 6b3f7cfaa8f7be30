/**
 * Keeping Redis leases alive: every ttl/3 after the last confirmation, a compare-and-PEXPIRE;
 * a local deadline when the lease would expire in Redis (measured from when the last confirming
 * command was sent). "Not ours any more" ends it at once; transport errors are retried until the
 * deadline, which then ends it.
 *
 * One {@link RenewalClock} per lock drives all its leases with a single timer, armed for the
 * earliest moment any lease needs something: a lease that lives less than ttl/3 (nearly every
 * request) costs no timer at all, where a pair of timers per lease was a large part of the CPU of
 * a locked request.
 */
import { performance } from 'node:perf_hooks'
import { EarliestTimer } from '../util/earliest-timer.js'
import { SteadySet } from '../util/steady-map.js'

/**
 * What a renewal renews (the Redis lock's lease itself: methods, not two closures per lease).
 */
export interface RenewalTarget {
  /** Sends the renewal (compare-and-PEXPIRE); resolves 1 when the lease is still ours. */
  extendLease (): Promise<number>
  /** Called once when the lease is (or may be) no longer ours. */
  leaseLost (): void
}

/** The renewal of one lease (see the module doc); made by {@link RenewalClock.start}. */
export class Renewal {
  /** When the last command that confirmed the lease was sent (`performance.now()`). */
  confirmedAt: number
  /** When the next renewal is due (a retry after a transport error, or ttl/3 after confirmation). */
  renewAt: number
  /** Whether a renewal command is on its way. */
  inFlight = false
  stopped = false
  readonly clock: RenewalClock
  readonly target: RenewalTarget

  constructor (clock: RenewalClock, sentAt: number, target: RenewalTarget) {
    this.clock = clock
    this.target = target
    this.confirmedAt = sentAt
    this.renewAt = sentAt + clock.ttl / 3
  }

  /** Stops renewing (the lease ended, was lost, or is being passed on). */
  stop (): void {
    if (this.stopped) return
    this.stopped = true
    this.clock.remove(this)
  }
}

/** The single timer behind the renewals of one lock's leases (see the module doc). */
export class RenewalClock {
  /** Lease time-to-live in milliseconds. */
  readonly ttl: number
  /** A lease's renewal enters and leaves on every request: a set whose table never empties. */
  readonly #renewals = new SteadySet<Renewal>()
  readonly #timer = new EarliestTimer(() => { this.#tick() })

  constructor (ttl: number) {
    this.ttl = ttl
  }

  /**
   * Starts renewing a lease confirmed by a command sent at `sentAt`.
   * @param target renews the lease in Redis, and is told when it is (or may be) lost.
   */
  start (sentAt: number, target: RenewalTarget): Renewal {
    const renewal = new Renewal(this, sentAt, target)
    this.#renewals.add(renewal)
    // A timer armed for an earlier moment will see this lease then; only a lease due sooner
    // (passed on after a while) moves it.
    this.#timer.armFor(renewal.renewAt)
    return renewal
  }

  /** Leases being renewed (for tests). */
  get size (): number {
    return this.#renewals.size
  }

  /** @internal Called by {@link Renewal.stop}; the timer is left armed (it stops when idle). */
  remove (renewal: Renewal): void {
    this.#renewals.delete(renewal)
  }

  /** Stops every renewal and the timer (the lock closes). */
  stopAll (): void {
    for (const renewal of this.#renewals.values()) renewal.stopped = true
    this.#renewals.clear()
    this.#timer.stop()
  }

  #tick (): void {
    const now = performance.now()
    let next = Infinity
    // A copy: a lost lease leaves the set as the walk goes.
    for (const renewal of this.#renewals.values()) {
      if (renewal.stopped) continue // stopped by an earlier one's loss
      const deadline = renewal.confirmedAt + this.ttl
      if (now >= deadline) {
        this.#lost(renewal)
        continue
      }
      if (!renewal.inFlight && now >= renewal.renewAt) void this.#renew(renewal, now)
      // While a renewal is in flight only the deadline is due.
      next = Math.min(next, deadline, !renewal.inFlight ? renewal.renewAt : Infinity)
    }
    if (next !== Infinity) this.#timer.armFor(next)
  }

  async #renew (renewal: Renewal, sentAt: number): Promise<void> {
    const expiresAt = renewal.confirmedAt + this.ttl
    renewal.inFlight = true
    let renewed: number
    try {
      renewed = await renewal.target.extendLease()
    } catch {
      renewal.inFlight = false
      if (renewal.stopped) return
      // Transient: retry until the lease would have expired; the deadline ends it then.
      const wait = Math.min(Math.max(10, Math.floor(this.ttl / 10)), 1000)
      renewal.renewAt = performance.now() + wait
      if (renewal.renewAt < expiresAt) this.#timer.armFor(renewal.renewAt)
      return
    }
    renewal.inFlight = false
    if (renewal.stopped) return
    if (renewed !== 1) {
      this.#lost(renewal)
      return
    }
    renewal.confirmedAt = sentAt
    renewal.renewAt = sentAt + this.ttl / 3
    this.#timer.armFor(renewal.renewAt)
  }

  #lost (renewal: Renewal): void {
    renewal.stop()
    renewal.target.leaseLost()
  }
}
