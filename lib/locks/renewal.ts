/**
 * Keeping a Redis lease alive: every ttl/3 after the last confirmation, a compare-and-PEXPIRE;
 * a local deadline when the lease would expire in Redis (measured from when the last confirming
 * command was sent). "Not ours any more" ends it at once; transport errors are retried until the
 * deadline, which then ends it.
 */

/** The renewal of one lease (see the module doc). */
export class Renewal {
  /** When the last command that confirmed the lease was sent (`performance.now()`). */
  confirmedAt: number
  readonly #ttl: number
  readonly #extend: () => Promise<number>
  readonly #onLost: () => void
  #renewTimer: NodeJS.Timeout | undefined
  #deadlineTimer: NodeJS.Timeout | undefined
  #stopped = false

  /**
   * @param extend renews the lease in Redis: resolves 1 while it is ours, 0 once it is not.
   * @param onLost called once when the lease is (or may be) lost.
   */
  constructor (ttl: number, sentAt: number, extend: () => Promise<number>, onLost: () => void) {
    this.#ttl = ttl
    this.#extend = extend
    this.#onLost = onLost
    this.confirmedAt = sentAt
    this.#confirmed(sentAt)
  }

  /** The lease is ours until `sentAt + ttl`: arm the local deadline and the next renewal. */
  #confirmed (sentAt: number): void {
    clearTimeout(this.#deadlineTimer)
    this.confirmedAt = sentAt
    const now = performance.now()
    this.#deadlineTimer = setTimeout(() => { this.#lost() }, Math.max(0, sentAt + this.#ttl - now)).unref()
    // A third of the ttl after the confirmation (sooner for a lease passed on from a holder that
    // had it for a while).
    this.#renewTimer = setTimeout(() => { void this.#renew(sentAt + this.#ttl) },
      Math.max(1, Math.floor(sentAt + this.#ttl / 3 - now))).unref()
  }

  async #renew (expiresAt: number): Promise<void> {
    const sentAt = performance.now()
    let renewed: number
    try {
      renewed = await this.#extend()
    } catch {
      if (this.#stopped) return
      // Transient: retry until the lease would have expired; the deadline timer ends it then.
      const wait = Math.min(Math.max(10, Math.floor(this.#ttl / 10)), 1000)
      if (performance.now() + wait < expiresAt) {
        this.#renewTimer = setTimeout(() => { void this.#renew(expiresAt) }, wait).unref()
      }
      return
    }
    if (this.#stopped) return
    if (renewed === 1) this.#confirmed(sentAt)
    else this.#lost()
  }

  #lost (): void {
    this.stop()
    this.#onLost()
  }

  /** Stops renewing (the lease ended, was lost, or is being passed on). */
  stop (): void {
    this.#stopped = true
    clearTimeout(this.#renewTimer)
    clearTimeout(this.#deadlineTimer)
    this.#renewTimer = undefined
    this.#deadlineTimer = undefined
  }
}
