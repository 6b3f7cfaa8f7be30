/**
 * `MemoryLimitBackend`: buckets and leases of tool calls in this process's memory, the same
 * algorithm as the Redis script (a GCRA token bucket in integer microseconds, leases with expiry),
 * for one instance.
 *
 * Bounded: an entry is dropped once its bucket is full again and it holds no live lease (it is
 * then the same as no entry), by a sweep every `sweepInterval` and lazily at the front of the map;
 * and when `max` entries are held, the least recently used one is evicted (its caller starts over
 * with a full bucket; a lease of a call still running there is forgotten). A flood of distinct
 * anonymous addresses can therefore never grow the map beyond `max`.
 */
import { ALLOWED, type LimitBackend, type LimitDecision, type LimitSpec } from './backend.js'

/** Options of {@link MemoryLimitBackend}. */
export interface MemoryLimitBackendOptions {
  /** Most (tool, caller) entries kept; past it the least recently used is evicted. Default 50,000. */
  max?: number
  /** Milliseconds between sweeps of idle entries (default 30,000; 0 = only lazily). */
  sweepInterval?: number
}

interface Entry {
  /** Theoretical arrival time (µs): the bucket is full from then on. */
  tat: number
  /** Call id → lease expiry (µs); null without leases. */
  leases: Map<string, number> | null
}

/** This process's clock in integer microseconds. */
function nowUs (): number {
  return Math.round(performance.now() * 1000)
}

/** Drops the expired leases of `e`; true when it holds none and its bucket is full (idle). */
function prune (e: Entry, now: number): boolean {
  if (e.leases !== null) {
    for (const [id, expires] of e.leases) if (expires <= now) e.leases.delete(id)
    if (e.leases.size === 0) e.leases = null
  }
  return e.leases === null && e.tat <= now
}

/** How many idle entries at the front of the map one check removes, at most (amortized cleanup). */
const LAZY_PRUNE = 2

/** Buckets and leases in this process (see the module doc). */
export class MemoryLimitBackend implements LimitBackend {
  readonly max: number
  /** In least-recently-used-first order: every check moves its entry to the end. */
  readonly #entries = new Map<string, Entry>()
  readonly #sweeper: NodeJS.Timeout | undefined

  /** @throws {RangeError} for a `max` below 1 or a negative `sweepInterval`. */
  constructor (options: MemoryLimitBackendOptions = {}) {
    const { max = 50_000, sweepInterval = 30_000 } = options
    if (!Number.isInteger(max) || max < 1) throw new RangeError('max must be an integer greater than or equal to 1.')
    if (typeof sweepInterval !== 'number' || !(sweepInterval >= 0)) throw new RangeError('sweepInterval must be greater than or equal to 0.')
    this.max = max
    if (sweepInterval > 0 && Number.isFinite(sweepInterval)) {
      this.#sweeper = setInterval(() => { this.sweep() }, sweepInterval).unref()
    }
  }

  /** Entries held (idle ones included until they are swept). */
  get size (): number { return this.#entries.size }

  async acquire (key: string, spec: LimitSpec, callId: string): Promise<LimitDecision> {
    const now = nowUs()
    const entries = this.#entries
    let e = entries.get(key)
    if (e === undefined) {
      this.#pruneFront(now)
      if (entries.size >= this.max) entries.delete(entries.keys().next().value as string)
      e = { tat: now, leases: null }
    } else {
      entries.delete(key)
    }
    entries.set(key, e)
    const interval = spec.intervalUs
    const tat = Math.max(e.tat, now)
    const wait = interval > 0 ? tat + interval - now - interval * spec.burst : 0
    let busy = false
    if (spec.concurrency > 0) {
      prune(e, now)
      busy = e.leases !== null && e.leases.size >= spec.concurrency
    }
    if (wait > 0) return { ok: false, limit: 'rate', retryAfterMs: Math.ceil(wait / 1000) }
    if (busy) {
      let first = Infinity
      for (const expires of (e.leases as Map<string, number>).values()) if (expires < first) first = expires
      return { ok: false, limit: 'concurrency', retryAfterMs: Math.ceil((first - now) / 1000) }
    }
    if (interval > 0) e.tat = tat + interval
    if (spec.concurrency > 0) (e.leases ??= new Map()).set(callId, now + spec.leaseMs * 1000)
    return ALLOWED
  }

  async renew (key: string, callId: string, leaseMs: number): Promise<boolean> {
    const e = this.#entries.get(key)
    const expires = e?.leases?.get(callId)
    if (e === undefined || expires === undefined) return false
    const now = nowUs()
    if (expires <= now) {
      // Ran out: its slot may have been given away already; never revived.
      e.leases?.delete(callId)
      return false
    }
    e.leases?.set(callId, now + leaseMs * 1000)
    this.#entries.delete(key)
    this.#entries.set(key, e)
    return true
  }

  async release (key: string, callId: string): Promise<void> {
    const e = this.#entries.get(key)
    if (e?.leases?.delete(callId) === true && e.leases.size === 0) e.leases = null
  }

  /** Removes every idle entry (see the module doc); runs on the sweep timer. */
  sweep (): void {
    const now = nowUs()
    for (const [key, e] of this.#entries) if (prune(e, now)) this.#entries.delete(key)
  }

  #pruneFront (now: number): void {
    let n = 0
    for (const [key, e] of this.#entries) {
      if (n++ >= LAZY_PRUNE || !prune(e, now)) return
      this.#entries.delete(key)
    }
  }

  async close (): Promise<void> {
    clearInterval(this.#sweeper)
    this.#entries.clear()
  }
}
