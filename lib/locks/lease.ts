/** One acquisition of a bundled lock, and the states it goes through. */
import { notHeldError } from './errors.js'
import type { LeaseFence, SessionLease } from './session-lock.js'

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
  readonly #onRelease: () => Promise<void> | void
  #state: 'held' | 'released' | 'revoked' = 'held'

  constructor (id: string, onRelease: () => Promise<void> | void, fence?: LeaseFence) {
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

  #validity: (() => boolean) | null = null

  /**
   * @internal For a lease that expires by time (Redis): tells whether it can still be ours by the
   * clock. A process that was paused past the ttl resumes before the timer that would notice it.
   */
  expiresBy (valid: () => boolean): void {
    this.#validity = valid
  }

  /**
   * Whether the lease was lost, or can no longer be ours by the clock (see {@link expiresBy}; a
   * lock's own lease class may override it).
   */
  get expired (): boolean {
    return this.#lost || (this.#validity !== null && !this.#validity())
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

  /**
   * What releasing does: the lock's `onRelease`. A lock's own lease class may override it (the
   * Redis lock: a method instead of a closure per lease).
   */
  protected runRelease (): Promise<void> | void {
    return this.#onRelease()
  }

  /** Whether neither the holder nor the lock has ended the lease yet. */
  get held (): boolean {
    return this.#state === 'held'
  }

  async release (): Promise<void> {
    if (this.beginRelease()) await this.runRelease()
  }

  /**
   * The first step of a release: false when the lock revoked the lease already (nothing left to
   * do); else marks it released. Throws "not held" when it was released already.
   */
  protected beginRelease (): boolean {
    if (this.#state === 'revoked') return false
    if (!this.claim()) throw notHeldError(this.id)
    return true
  }

  /**
   * Marks the lease released without running the lock's release, for a caller that releases it
   * its own way (the Redis store's save-and-release script). False when it was not held.
   */
  claim (): boolean {
    if (this.#state !== 'held') return false
    this.#state = 'released'
    // The holder's callback (the state scope, and through it the request) is let go: a released
    // lease can stay referenced after the request ends. When V8 rebuilds the table of the lock's set
    // of held leases it leaves the old table's entries in place, and an old table that has reached
    // V8's old generation keeps what they reference alive through young-generation collections, to
    // be moved into the old generation itself (bench/gc.ts measures it; docs/performance.md).
    this.#onLost = null
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
    try { await this.runRelease() } catch {}
  }
}
