/**
 * Leases of requests that were cancelled, or whose client left, while their handler still runs
 * without looking at `ctx.signal`. Such a lease is kept at most the grace after the cancellation
 * is seen, then let go: the scope releases it (the Redis lease is no longer renewed) and drops
 * what the handler saves later, so the next request on that key runs.
 *
 * One timer for all the scopes of a backend: it looks a few times a second at the scopes holding
 * a lease (a request's cancellation is read without a listener), and stops once none is left.
 */
import { performance } from 'node:perf_hooks'
import { SteadySet } from '../util/steady-map.js'

/** A scope as the watcher sees it. */
export interface Watched {
  /** Releases the lease if the request was cancelled at least `grace` ms before `now` (and notes when it first sees it). */
  checkCancelled (now: number, grace: number): void
}

/** The longest time between two looks (ms): a short grace is looked at more often (a quarter of it). */
const MAX_TICK = 1000
const MIN_TICK = 50

/** See the module doc. */
export class AbandonedLeases {
  readonly grace: number
  readonly #tick: number
  /** Scopes holding a lease: one enters and leaves on every request (a set whose table never empties). */
  readonly #held = new SteadySet<Watched>()
  #timer: ReturnType<typeof setInterval> | null = null

  constructor (grace: number) {
    this.grace = grace
    this.#tick = Math.min(MAX_TICK, Math.max(MIN_TICK, Math.floor(grace / 4)))
  }

  /** Watches a scope from when it holds a lease. */
  watch (scope: Watched): void {
    this.#held.add(scope)
    // Kept running between requests: stopped by a look that finds nothing held.
    if (this.#timer === null) {
      this.#timer = setInterval(() => { this.#look() }, this.#tick)
      this.#timer.unref()
    }
  }

  /** Stops watching a scope (its lease was released, or passed on). */
  unwatch (scope: Watched): void {
    this.#held.delete(scope)
  }

  #look (): void {
    if (this.#held.size === 0) {
      if (this.#timer !== null) clearInterval(this.#timer)
      this.#timer = null
      return
    }
    const now = performance.now()
    for (const scope of this.#held.values()) scope.checkCancelled(now, this.grace)
  }
}
