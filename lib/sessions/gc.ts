/**
 * Probabilistic garbage collection of sessions, run from the request path: each request starts
 * `store.gc()` in the background with probability `gcProbability / gcDivisor` (PHP's
 * `session.gc_probability` / `session.gc_divisor`). Stores whose backend expires keys itself
 * (Redis) make this a cheap no-op; an out-of-band job may call `store.gc()` instead and set
 * `gcProbability: 0`.
 */
import type { SessionStore } from './session-store.js'

/** Options of {@link GcPolicy}. */
export interface GcPolicyOptions {
  /** Numerator of the chance to collect on a request (default 1; 0 disables). Must be >= 0. */
  gcProbability?: number
  /** Denominator of the chance to collect on a request (default 100). Must be >= 1. */
  gcDivisor?: number
  /** Source of randomness in [0, 1); tests may inject one. Defaults to `Math.random`. */
  random?: () => number
}

/** The logger a background run reports to (a Fastify/pino logger fits). */
export interface GcLogger {
  warn (obj: object, msg: string): void
  debug? (obj: object, msg: string): void
}

/** Decides, per request, whether to collect expired sessions, and runs the collection. */
export class GcPolicy {
  /** Numerator of the chance per request. */
  readonly gcProbability: number
  /** Denominator of the chance per request. */
  readonly gcDivisor: number
  readonly #random: () => number
  /** Stores with a run in flight: a slow gc is not started again on top of itself. */
  readonly #running = new WeakSet<SessionStore>()

  /**
   * @throws {RangeError} "gcProbability must be greater than or equal to 0." or
   *   "gcDivisor must be greater than or equal to 1."
   */
  constructor (options: GcPolicyOptions = {}) {
    const { gcProbability = 1, gcDivisor = 100, random = Math.random } = options
    // Written as negations so that NaN and non-numbers are refused too.
    if (typeof gcProbability !== 'number' || !(gcProbability >= 0)) {
      throw new RangeError('gcProbability must be greater than or equal to 0.')
    }
    if (typeof gcDivisor !== 'number' || !(gcDivisor >= 1)) {
      throw new RangeError('gcDivisor must be greater than or equal to 1.')
    }
    this.gcProbability = gcProbability
    this.gcDivisor = gcDivisor
    this.#random = random
  }

  /** Draws once: true with probability `gcProbability / gcDivisor` (always when p >= divisor). */
  shouldRun (): boolean {
    if (this.gcProbability === 0) return false
    return this.#random() * this.gcDivisor < this.gcProbability
  }

  /**
   * Maybe starts `store.gc()` in the background. Never throws and never rejects: a failing gc is
   * logged as a warning. Returns the background run (for tests and graceful shutdown), or
   * `undefined` when the draw said no or a run on this store is still in flight. `onRemoved` is
   * told the ids the run removed (what else belongs to them goes too).
   */
  maybeRun (store: SessionStore, log?: GcLogger, onRemoved?: (ids: string[]) => void): Promise<void> | undefined {
    if (!this.shouldRun() || this.#running.has(store)) return undefined
    this.#running.add(store)
    return (async () => {
      try {
        const removed = await store.gc()
        if (removed.length > 0) {
          log?.debug?.({ removed: removed.length }, 'expired sessions collected')
          onRemoved?.(removed)
        }
      } catch (err) {
        // Nobody awaits this run: even a throwing logger must not become an unhandled rejection.
        try { log?.warn({ err }, 'session gc failed') } catch {}
      } finally {
        this.#running.delete(store)
      }
    })()
  }
}
