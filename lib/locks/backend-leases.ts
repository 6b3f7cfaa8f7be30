/**
 * The lease machinery of the backend locks (`RedisSessionLock`, `PgSessionLock`), one per lock:
 * what they share, with the backend's commands supplied by each lock ({@link LeaseBackend}).
 *
 * - In front of the backend, an in-process FIFO, so only one request per process contends there,
 *   in arrival order; a free slot is taken without a promise.
 * - Each acquisition tries with a fresh token; while the lease is busy, polls with exponential
 *   backoff and full jitter (cap 50 ms), until the timeout, the caller's signal or `close()`.
 * - The held leases and their renewals (one clock per lock); on close, every lease is revoked.
 * - Pass-on: a holder of this process that changed nothing hands the lease, and what it read under
 *   it, to the next waiter for the same key, with no round trip (a baton per key in between).
 *
 * The locks keep it private; a store that takes leases in its own commands (the store + lock
 * pairings) reaches it through its lock's accessor (`redisLeaseEngine`, `pgLeaseEngine`), which
 * the published declarations leave out.
 */
import { performance } from 'node:perf_hooks'
import { SteadySet } from '../util/steady-map.js'
import { settleWithin } from '../util/settle.js'
import { BackendLease, type LeaseHome, type LeaseRelease } from './backend-lease.js'
import { SessionLockTimeoutError, alreadyHeldError, backendError, closedError, notHeldError } from './errors.js'
import { KeyedFifo, type FifoRelease } from './keyed-fifo.js'
import { Lease } from './lease.js'
import { RenewalClock } from './renewal.js'
import { signalOf, type LocalAcquireOptions, type SessionLease } from './session-lock.js'
import { checkTimeout, delay, fullJitter } from './wait.js'

/** What a {@link LeaseAttempt} resolves when the lease is busy (someone else holds it). */
export const LEASE_BUSY: unique symbol = Symbol('lease busy')
/** What a {@link LeaseAttempt} resolves when the session (or state) does not exist: no lease taken. */
export const SESSION_MISSING: unique symbol = Symbol('session missing')
/** What an `adopt` of {@link BackendLeases.acquireWith} returns for a value it does not know. */
export const NOT_ADOPTED: unique symbol = Symbol('not adopted')

/**
 * One try at the lease (one round trip), given the backend's handle, the lease key, the token, the
 * session id and the lease ttl: resolves the value read when the lease was taken, else
 * {@link LEASE_BUSY} or {@link SESSION_MISSING}. (Markers rather than a result object: no object
 * per try on the request path.)
 */
export type LeaseAttempt<H, T> = (handle: H, key: string, token: string, id: string, ttl: number) =>
Promise<T | typeof LEASE_BUSY | typeof SESSION_MISSING>

/**
 * Leases passed on in a row inside one process before the lease goes back through the backend:
 * the release and the next take re-read the session and refresh its idle TTL there (a chain of
 * requests that change nothing would otherwise never touch it).
 */
export const MAX_PASS_ON = 16

/** How long close() waits for the lease releases (ms). */
const CLOSE_TIMEOUT = 1000

/** What a lock supplies: its backend's handle and commands. */
export interface LeaseBackend<H> extends LeaseRelease {
  readonly handle: H
  /** The lease key of a session id. */
  keyOf (id: string): string
  /** A fresh random token for one acquisition. */
  newToken (): string
  /** The lease object of a lease taken (or adopted) by `home`. */
  newLease (home: LeaseHome<H>, id: string, key: string, token: string, slot: FifoRelease, passes: number,
    sentAt: number, read: unknown, readBy: object): BackendLease<H>
  /** Before an acquisition's first attempt (in its slot); undefined when there is nothing to wait for. */
  prepare? (id: string): Promise<void> | undefined
  /** Before each attempt, failing as the attempt would; undefined when there is nothing to wait for. */
  beforeAttempt? (): Promise<void> | undefined
}

/**
 * A lease on its way from one holder of this process to the next (see `passOn`): the token stays
 * valid in the backend, so the next holder skips the round trip that would take it again.
 */
interface Baton {
  readonly key: string
  readonly token: string
  /** When the last command that confirmed the lease was sent (`performance.now()`). */
  readonly confirmedAt: number
  /** How many times in a row it has been passed on. */
  readonly passes: number
  /** What was read under the lease, and the attempt that read it. */
  readonly value: unknown
  readonly by: object
}

/** A lease ttl in ms (default 30,000). @throws {RangeError} for one that is not an integer >= 3. */
export function leaseTtl (ttl = 30_000): number {
  if (!Number.isInteger(ttl) || ttl < 3) throw new RangeError('ttl must be an integer greater than or equal to 3.')
  return ttl
}

/** A lease passed on is as good as a fresh one: `adopt` of a plain `acquire()`. */
export function adoptAny (): undefined {
  return undefined
}

function notAdopted (): typeof NOT_ADOPTED {
  return NOT_ADOPTED
}

/** The lease machinery of one backend lock (see the module doc). */
export class BackendLeases<H> implements LeaseHome<H> {
  readonly lock: object
  /** Default acquire timeout in milliseconds. */
  readonly timeout: number
  readonly ttl: number
  readonly handle: H
  readonly backend: LeaseBackend<H>
  /** A lease enters and leaves on every request: a set whose table never empties. */
  readonly leases = new SteadySet<Lease>()
  /** Renews every held lease of this lock, on one timer. */
  readonly renewals: RenewalClock
  readonly #fifo = new KeyedFifo()
  readonly #closing = new AbortController()
  /** Leases being passed on, by session id: set just before the slot goes to the next waiter. */
  readonly #batons = new Map<string, Baton>()
  /** The lock's class name, for errors. */
  readonly #kind: string

  constructor (lock: object, timeout: number, ttl: number, backend: LeaseBackend<H>) {
    this.lock = lock
    this.#kind = lock.constructor.name
    this.timeout = timeout
    this.ttl = ttl
    this.backend = backend
    this.handle = backend.handle
    this.renewals = new RenewalClock(ttl)
  }

  /** Sessions held or waited for right now (0 when idle). */
  get size (): number {
    return this.#fifo.size
  }

  /** Requests of this process queued behind a holder, over all sessions. */
  get pending (): number {
    return this.#fifo.waiting
  }

  /** Leases held right now. */
  get held (): number {
    return this.leases.size
  }

  /** Whether `close()` has begun. */
  get closed (): boolean {
    return this.#closing.signal.aborted
  }

  /**
   * Waits for the lease like `acquire()`, taking it with `attempt`. Resolves null, holding nothing,
   * when the attempt reports the session missing. The lease keeps what `attempt` read, for
   * {@link passOn}. When the previous holder of this process passed the lease on, no command is
   * sent: what it read becomes the value if the same `attempt` read it, else `adopt` turns it into
   * the value; `adopt` returning {@link NOT_ADOPTED} releases the lease and takes it afresh.
   */
  async acquireWith<T> (id: string, options: LocalAcquireOptions, attempt: LeaseAttempt<H, T>,
    adopt: (handed: unknown) => T | typeof NOT_ADOPTED = notAdopted): Promise<{ lease: BackendLease<H>, value: T } | null> {
    if (this.#closing.signal.aborted) throw closedError()
    const timeout = options.timeout === undefined ? this.timeout : checkTimeout(options.timeout)
    if (this.#fifo.isHeldBy(id, options.owner)) throw alreadyHeldError(id)
    const deadline = performance.now() + timeout
    const onTimeout = (): Error => new SessionLockTimeoutError(id, timeout)
    // A free slot is taken without waiting: no promise and no job, and the attempt below is sent
    // within this call.
    const slot = this.#fifo.grantNow(id, options) ??
      await this.#fifo.acquire(id, { timeout, signal: options.signal, owner: options.owner, front: options.priority, onTimeout })
    const backend = this.backend
    const key = backend.keyOf(id)
    try {
      const baton = this.#batons.get(id)
      if (baton !== undefined) {
        this.#batons.delete(id)
        // close() released it already.
        if (this.#closing.signal.aborted) throw closedError()
        const adopted = baton.by === attempt ? baton.value as T : adopt(baton.value)
        if (adopted !== NOT_ADOPTED) {
          return { lease: backend.newLease(this, id, baton.key, baton.token, slot, baton.passes, baton.confirmedAt, adopted, attempt), value: adopted }
        }
        const dropped = this.#drop(id, baton)
        if (dropped !== undefined) await dropped
      }
      const token = backend.newToken()
      const prepared = backend.prepare?.(id)
      if (prepared !== undefined) await prepared
      for (let poll = 0; ; poll++) {
        const sentAt = performance.now()
        let result: Awaited<ReturnType<LeaseAttempt<H, T>>>
        try {
          const before = backend.beforeAttempt?.()
          if (before !== undefined) await before
          result = await attempt(this.handle, key, token, id, this.ttl)
        } catch (err) {
          // A command that timed out on our side (or whose connection broke) may still have run:
          // free what we may hold, or it would stay busy until its TTL.
          this.#releaseQuietly(key, token, id)
          throw backendError(id, err)
        }
        if (result === SESSION_MISSING) {
          slot()
          return null
        }
        if (result !== LEASE_BUSY) {
          if (this.#closing.signal.aborted) {
            // close() ran while we were taking it: nobody would release this lease.
            this.#releaseQuietly(key, token, id)
            throw closedError()
          }
          return { lease: backend.newLease(this, id, key, token, slot, 0, sentAt, result, attempt), value: result }
        }
        const remaining = deadline - performance.now()
        if (remaining <= 0) throw onTimeout()
        await delay(Math.max(1, Math.min(remaining, fullJitter(poll, 5, 50))), signalOf(options.signal), this.#closing.signal)
      }
    } catch (err) {
      slot()
      throw err
    }
  }

  /**
   * Releases a passed-on lease nobody adopts, before the new holder's own attempt: on one ordered
   * connection sent alongside it (undefined); on a pool awaited first, or the take could run
   * before it and find the key busy.
   */
  #drop (id: string, baton: Baton): Promise<void> | undefined {
    const backend = this.backend
    if (backend.ordered) {
      this.#releaseQuietly(baton.key, baton.token, id)
      return undefined
    }
    return backend.release(baton.key, baton.token, id).then(() => {}, (err: unknown) => {
      backend.releaseFailed?.(baton.key, baton.token, id)
      throw backendError(id, err)
    })
  }

  #releaseQuietly (key: string, token: string, id: string): void {
    const backend = this.backend
    backend.release(key, token, id).catch(() => { backend.releaseFailed?.(key, token, id) })
  }

  /**
   * Passes a held lease that `attempt` read (see {@link acquireWith}) to the next request of this
   * process waiting for the same key, with what was read under it: no command is sent, and the
   * token stays valid in the backend, renewed as before. Ends the caller's lease (like `release()`)
   * and returns true; returns false, changing nothing, when there is no such waiter, when the lease
   * was lost, was not read by `attempt` or is not confirmed recently enough, when the lock is
   * closing, or after {@link MAX_PASS_ON} passes in a row (the caller then releases it normally, so
   * another instance can take it).
   */
  passOn (lease: SessionLease, attempt: object): boolean {
    if (!(lease instanceof BackendLease) || lease.home !== this || lease.readBy !== attempt || !lease.tracked || lease.lost || !lease.held) return false
    if (this.#closing.signal.aborted || lease.passes >= MAX_PASS_ON || !this.#fifo.hasWaiters(lease.id)) return false
    // Renewals confirm the lease every ttl/3; one overdue means the backend is slow or gone.
    if (performance.now() - lease.renewal.confirmedAt > this.ttl / 2) return false
    const value = lease.read
    lease.claim() // held, checked above
    lease.forget()
    this.#batons.set(lease.id, { key: lease.key, token: lease.token, confirmedAt: lease.renewal.confirmedAt, passes: lease.passes + 1, value, by: attempt })
    lease.slot()
    return true
  }

  /**
   * Ends a lease of this lock with `finish` (one round trip that also releases it in the backend)
   * instead of the plain release. The local slot is freed once `finish` is sent on an ordered
   * connection (the next waiter's command follows it, so a handoff costs one round trip, not two),
   * once it has answered on a pool. A `finish` that fails may not have released the lease: a plain
   * release follows, where the backend still takes commands.
   */
  async releaseWith<T> (lease: SessionLease, finish: (handle: H, key: string, token: string) => Promise<T>): Promise<T> {
    const state = lease instanceof BackendLease && lease.tracked && lease.home === this ? lease as BackendLease<H> : undefined
    if (state === undefined) {
      if (lease instanceof Lease && !lease.held) throw notHeldError(lease.id)
      throw new TypeError(`Not a lease of a ${this.#kind}`)
    }
    if (!state.claim()) throw notHeldError(lease.id)
    state.forget()
    let finished: Promise<T>
    try {
      finished = finish(this.handle, state.key, state.token)
    } catch (err) {
      // A `finish` that throws before it sends: handled below as a failed one.
      finished = Promise.reject(err)
    }
    const ordered = this.backend.ordered
    if (ordered) state.slot()
    try {
      return await finished
    } catch (err) {
      this.#releaseQuietly(state.key, state.token, state.id)
      throw err
    } finally {
      if (!ordered) state.slot()
    }
  }

  /**
   * {@link releaseWith} for several leases of this engine at once: `finish` gets their keys and
   * tokens, in order, and its one backend call must release them all. Every lease ends here, even
   * when the call fails.
   */
  releaseAllWith<T> (leases: readonly SessionLease[], finish: (handle: H, keys: string[], tokens: string[]) => Promise<T>): Promise<T> {
    const keys: string[] = []
    const tokens: string[] = []
    const step = (i: number): Promise<T> => i === leases.length
      ? finish(this.handle, keys, tokens)
      : this.releaseWith(leases[i], (_handle, key, token) => { keys.push(key); tokens.push(token); return step(i + 1) })
    return step(0)
  }

  /**
   * Rejects waiters, releases the leases being passed on and the held ones (aborting their
   * signals), and stops renewals. Bounded; never throws. The lock then closes its own handle.
   */
  async close (): Promise<void> {
    this.#closing.abort(closedError())
    this.#fifo.rejectAll(closedError())
    // Leases on their way to a next holder, who will find the lock closed.
    const passing = [...this.#batons].map(([id, b]) => this.backend.release(b.key, b.token, id).catch(() => {}))
    await settleWithin(Promise.all([...passing, ...this.leases.values().map(lease => lease.revoke(closedError()))]), CLOSE_TIMEOUT, { keepAlive: false })
    this.renewals.stopAll()
  }
}
