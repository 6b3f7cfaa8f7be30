/**
 * `PgSessionLock`: the per-session lock of many machines on PostgreSQL, a lease row.
 *
 * - Acquire: `INSERT … ON CONFLICT (id) DO UPDATE … WHERE expired` into `<prefix>leases`, with a
 *   fresh random 128-bit token per acquisition; one statement, atomic under concurrent takers. In
 *   front of it, an in-process FIFO, so only one request per process contends in the database;
 *   while the lease is busy, polls with exponential backoff and full jitter (cap 50 ms).
 * - Release: delete the row where the token is ours, so a holder whose lease ran out never frees
 *   the next holder's lease.
 * - Renewal: every ttl/3, push `expires_at` where the token is ours and the lease has not expired
 *   (it never revives a lease that ran out). "Not ours any more" aborts `lease.signal` at once;
 *   database errors are retried until the lease would have expired, then the signal aborts.
 * - Fencing: `lease.fence` lets the PostgreSQL store refuse, in the save's own call, the save of a
 *   holder whose lease was lost once someone else took it or wrote the state.
 *
 * Lease rows, not advisory locks: a session-level advisory lock belongs to one connection, which
 * a pooler in transaction mode (PgBouncer, most managed poolers) hands to other clients between
 * transactions, and which the holder must keep checked out for the whole request. A row works
 * through any pooler, expires by itself when its holder dies, and can be checked by a save.
 * Every time is the database's clock. Taking, renewing and releasing a lease commit without
 * waiting for the WAL flush (`synchronous_commit` off for those transactions only): a lease lost
 * in a database crash is safe, as every save is fenced; saves wait for the flush as usual.
 */
import { randomBytes } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { resolvePgPool, type PgPoolLike } from '../postgres/pool.js'
import { DEFAULT_PG_PREFIX, checkPgPrefix, ensureSchema } from '../postgres/schema.js'
import { settleWithin } from '../util/settle.js'
import { SteadySet } from '../util/steady-map.js'
import { roundTrip } from '../telemetry/index.js'
import {
  SessionLockError, SessionLockTimeoutError, alreadyHeldError, backendError, closedError, notHeldError
} from './errors.js'
import { KeyedFifo, type FifoRelease } from './keyed-fifo.js'
import { Lease } from './lease.js'
import { PgLease, type LeaseStatements } from './pg-lease.js'
import { RenewalClock } from './renewal.js'
import { signalOf, type AcquireOptions, type LocalAcquireOptions, type SessionLease, type SessionLock } from './session-lock.js'
import { DEFAULT_LOCK_TIMEOUT, checkTimeout, delay, fullJitter } from './wait.js'

/** Options of {@link PgSessionLock}. */
export interface PgSessionLockOptions {
  /**
   * A pg Pool (never closed by the lock), or a connection string from which the lock makes a
   * pool of the app's pg with bounded waits (closed by `close()`).
   */
  pool: PgPoolLike | string
  /** Default acquire timeout in milliseconds (default 30,000; `0` tries once). Must be >= 0. */
  timeout?: number
  /** Lease time-to-live in milliseconds (default 30,000), renewed every ttl/3 while held. */
  ttl?: number
  /** Table-name prefix (default `'mcp_'`): the leases are rows of `<prefix>leases`. */
  prefix?: string
}

/** What a {@link PgLeaseAttempt} resolves when the lease is busy. */
export const PG_LEASE_BUSY: unique symbol = Symbol('lease busy')
/** What a {@link PgLeaseAttempt} resolves when the state does not exist (no lease taken). */
export const PG_STATE_MISSING: unique symbol = Symbol('state missing')

/**
 * One try at the lease (one statement), given the pool, the lease id and the token: resolves
 * the value read when the lease was taken, else a marker.
 */
export type PgLeaseAttempt<T> = (pool: PgPoolLike, id: string, token: string) =>
Promise<T | typeof PG_LEASE_BUSY | typeof PG_STATE_MISSING>

/** What an `adopt` of {@link PgSessionLock.acquireWith} returns for a value it does not know. */
export const PG_NOT_ADOPTED: unique symbol = Symbol('not adopted')

/**
 * Leases passed on in a row inside one process before the lease goes back through the database
 * (the release and the next take re-read the record and refresh its idle TTL there).
 */
export const PG_MAX_PASS_ON = 16

/** A lease on its way from one holder of this process to the next (see `passOn`). */
interface Baton {
  readonly token: string
  /** When the last statement that confirmed the lease was sent (`performance.now()`). */
  readonly confirmedAt: number
  readonly passes: number
  /** What the passing holder hands over (the store: the record as read under the lease). */
  readonly value: unknown
}

/** Milliseconds between two tries at deleting the rows of releases that failed. */
const ORPHAN_RETRY = 1000

/** How long close() waits for the lease releases and the pool's end (ms). */
const CLOSE_TIMEOUT = 1000

/** Session lock backed by PostgreSQL lease rows. */
export class PgSessionLock implements SessionLock {
  readonly timeout: number
  /** Lease time-to-live in milliseconds. */
  readonly ttl: number
  /** Table-name prefix. */
  readonly prefix: string
  readonly #pool: PgPoolLike
  readonly #ownsPool: boolean
  readonly #fifo = new KeyedFifo()
  readonly #leases = new SteadySet<Lease>()
  readonly #closing = new AbortController()
  readonly #renewals: RenewalClock
  /** Leases being passed on, by key: set just before the slot goes to the next waiter. */
  readonly #batons = new Map<string, Baton>()
  readonly #take: { name: string, text: string }
  readonly #statements: LeaseStatements
  #schemaReady = false

  /** @throws {RangeError} for a negative `timeout` or a `ttl` below 3; {@link TypeError} for a bad prefix or pool. */
  constructor (options: PgSessionLockOptions) {
    this.timeout = checkTimeout(options.timeout ?? DEFAULT_LOCK_TIMEOUT)
    const ttl = options.ttl ?? 30_000
    if (!Number.isInteger(ttl) || ttl < 3) throw new RangeError('ttl must be an integer greater than or equal to 3.')
    this.ttl = ttl
    this.#renewals = new RenewalClock(ttl)
    const p = this.prefix = checkPgPrefix(options.prefix ?? DEFAULT_PG_PREFIX)
    const { pool, owned } = resolvePgPool(options.pool)
    this.#pool = pool
    this.#ownsPool = owned
    // The functions of schema.ts: each commits without waiting for the WAL flush (see there).
    this.#take = { name: `${p}lease_take`, text: `SELECT ${p}lease_take($1, $2, $3) AS ok` }
    this.#statements = {
      release: { name: `${p}lease_release`, text: `SELECT ${p}lease_release($1, $2)` },
      extend: { name: `${p}lease_extend`, text: `SELECT ${p}lease_extend($1, $2, $3) AS ok` },
      orphan: (id, token, ttl) => { this.#orphan(id, token, ttl) }
    }
  }

  /**
   * Lease rows this process failed to release (the database was unreachable), by token: the id,
   * and until when the row can still hold the key (`performance.now()` ms). Deleted once the
   * database answers again (a retry every second, and before this process takes the key again),
   * so that a restart does not leave a key busy for a whole lease ttl; at most a ttl, as the row
   * would expire by then anyway.
   */
  readonly #orphans = new Map<string, { id: string, until: number }>()
  #orphanTimer: NodeJS.Timeout | null = null

  #orphan (id: string, token: string, ttl: number): void {
    if (this.#closing.signal.aborted) return
    this.#orphans.set(token, { id, until: performance.now() + ttl })
    if (this.#orphanTimer !== null) return
    this.#orphanTimer = setInterval(() => { void this.#releaseOrphans() }, ORPHAN_RETRY)
    this.#orphanTimer.unref()
  }

  async #releaseOrphans (id?: string): Promise<void> {
    const now = performance.now()
    for (const [token, orphan] of this.#orphans) {
      if (id !== undefined && orphan.id !== id) continue
      if (orphan.until <= now) { this.#orphans.delete(token); continue }
      try {
        await this.#pool.query({ ...this.#statements.release, values: [orphan.id, token] })
        this.#orphans.delete(token)
      } catch {
        if (id === undefined) break // still unreachable: the next tick tries again
      }
    }
    if (this.#orphans.size === 0 && this.#orphanTimer !== null) {
      clearInterval(this.#orphanTimer)
      this.#orphanTimer = null
    }
  }

  /** The pool this lock uses. */
  get pool (): PgPoolLike {
    return this.#pool
  }

  /** Sessions held or waited for by this instance right now (0 when idle). */
  get size (): number {
    return this.#fifo.size
  }

  /** Requests of this process queued behind a holder, over all sessions. */
  get pending (): number {
    return this.#fifo.waiting
  }

  /** Leases this instance holds right now. */
  get held (): number {
    return this.#leases.size
  }

  /** Resolves once the database answers and the schema exists; rejects with a `SessionLockError` otherwise. */
  async ready (): Promise<void> {
    try {
      await this.#schema()
    } catch (err) {
      throw new SessionLockError(`PostgreSQL is not reachable (${(err as Error).message})`, { cause: err })
    }
  }

  async #schema (): Promise<void> {
    if (this.#schemaReady) return
    await ensureSchema(this.#pool, this.prefix)
    this.#schemaReady = true
  }

  async acquire (id: string, options: LocalAcquireOptions = {}): Promise<SessionLease> {
    const taken = await this.acquireWith(id, options, async (pool, key, token) => {
      roundTrip()
      const { rows } = await pool.query({ ...this.#take, values: [key, token, this.ttl] })
      return rows[0]?.ok === true ? undefined : PG_LEASE_BUSY
    })
    return (taken as NonNullable<typeof taken>).lease
  }

  async tryAcquire (id: string, options: Pick<AcquireOptions, 'owner'> = {}): Promise<SessionLease | null> {
    try {
      return await this.acquire(id, { owner: options.owner, timeout: 0 })
    } catch (err) {
      if (err instanceof SessionLockTimeoutError) return null
      throw err
    }
  }

  /**
   * Rejects waiters, stops renewals, releases held leases (aborting their signals) and ends the
   * pool if the lock made it. Bounded; never throws.
   */
  async close (): Promise<void> {
    if (this.#closing.signal.aborted) return
    this.#closing.abort(closedError())
    this.#fifo.rejectAll(closedError())
    // Leases on their way to a next holder, who will find the lock closed.
    const passing = [...this.#batons].map(async ([id, b]) => { await this.#pool.query({ ...this.#statements.release, values: [id, b.token] }).catch(() => {}) })
    this.#batons.clear()
    await settleWithin(Promise.all([...passing, ...this.#leases.values().map(lease => lease.revoke(closedError()))]), CLOSE_TIMEOUT, { keepAlive: false })
    this.#renewals.stopAll()
    if (this.#orphanTimer !== null) clearInterval(this.#orphanTimer)
    this.#orphans.clear()
    if (this.#ownsPool) await settleWithin(this.#pool.end(), CLOSE_TIMEOUT, { keepAlive: false })
  }

  /**
   * Waits for the lease like `acquire()`, taking it with `attempt` (one statement). Resolves null,
   * holding nothing, when the attempt reports the state missing. For the store + lock pairing
   * (`sessions/pg-store.ts`).
   * @internal
   */
  async acquireWith<T> (id: string, options: LocalAcquireOptions, attempt: PgLeaseAttempt<T>,
    adopt: (handed: unknown) => T | typeof PG_NOT_ADOPTED = () => PG_NOT_ADOPTED): Promise<{ lease: Lease, value: T } | null> {
    if (this.#closing.signal.aborted) throw closedError()
    const timeout = options.timeout === undefined ? this.timeout : checkTimeout(options.timeout)
    if (this.#fifo.isHeldBy(id, options.owner)) throw alreadyHeldError(id)
    const deadline = performance.now() + timeout
    const onTimeout = (): Error => new SessionLockTimeoutError(id, timeout)
    const slot = this.#fifo.grantNow(id, options) ??
      await this.#fifo.acquire(id, { timeout, signal: options.signal, owner: options.owner, front: options.priority, onTimeout })
    const baton = this.#batons.get(id)
    if (baton !== undefined) {
      this.#batons.delete(id)
      const adopted = adopt(baton.value)
      if (adopted !== PG_NOT_ADOPTED) return { lease: this.#lease(id, baton.token, slot, baton.confirmedAt, baton.passes), value: adopted }
      // Not ours to adopt: its row goes before our take (on a pool, a release sent alongside
      // could run after it, and the take would find the key busy).
      try {
        await this.#pool.query({ ...this.#statements.release, values: [id, baton.token] })
      } catch (err) {
        this.#orphan(id, baton.token, this.ttl)
        slot()
        throw backendError(id, err)
      }
    }
    const token = randomBytes(16).toString('hex')
    try {
      // A row of ours left by a release that failed: deleted first, or we would wait for it.
      if (this.#orphans.size > 0) await this.#releaseOrphans(id)
      for (let poll = 0; ; poll++) {
        const sentAt = performance.now()
        let result: Awaited<ReturnType<PgLeaseAttempt<T>>>
        try {
          await this.#schema()
          result = await attempt(this.#pool, id, token)
        } catch (err) {
          // A statement whose connection broke may still have committed: free what we may hold.
          this.#releaseQuietly(id, token)
          throw backendError(id, err)
        }
        if (result === PG_STATE_MISSING) {
          slot()
          return null
        }
        if (result !== PG_LEASE_BUSY) {
          if (this.#closing.signal.aborted) {
            this.#releaseQuietly(id, token)
            throw closedError()
          }
          return { lease: this.#lease(id, token, slot, sentAt), value: result }
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

  #releaseQuietly (id: string, token: string): void {
    this.#pool.query({ ...this.#statements.release, values: [id, token] }).catch(() => { this.#orphan(id, token, this.ttl) })
  }

  #lease (id: string, token: string, slot: FifoRelease, sentAt: number, passes = 0): Lease {
    return new PgLease(id, this, this.ttl, this.#pool, this.#statements, token, slot, this.#leases, this.#renewals, sentAt, passes)
  }

  /**
   * Passes a held lease to the next request of this process waiting for the same key, with
   * `value` for it (see {@link acquireWith}'s `adopt`): no statement is sent, and the row stays
   * ours, renewed as before. Ends the caller's lease (like `release()`) and returns true; returns
   * false, changing nothing, when there is no such waiter, when the lease was lost or is not
   * confirmed recently enough, when the lock is closing, or after {@link PG_MAX_PASS_ON} passes
   * in a row (the caller then releases it, so that another instance can take the key).
   * @internal
   */
  passOn (lease: SessionLease, value: unknown): boolean {
    if (!(lease instanceof PgLease) || !lease.tracked || lease.lock !== this || lease.lost || !lease.held) return false
    if (this.#closing.signal.aborted || lease.passes >= PG_MAX_PASS_ON || !this.#fifo.hasWaiters(lease.id)) return false
    // Renewals confirm the lease every ttl/3; one overdue means the database is slow or gone.
    if (performance.now() - lease.renewal.confirmedAt > this.ttl / 2) return false
    lease.claim()
    lease.forget()
    this.#batons.set(lease.id, { token: lease.token, confirmedAt: lease.renewal.confirmedAt, passes: lease.passes + 1, value })
    lease.slot()
    return true
  }

  /**
   * Ends a lease of this lock with `finish` (one statement that also deletes the lease row)
   * instead of the plain release; the local slot is freed once `finish` has answered.
   * @internal
   */
  async releaseWith<T> (lease: SessionLease, finish: (pool: PgPoolLike, id: string, token: string) => Promise<T>): Promise<T> {
    const state = lease instanceof PgLease && lease.tracked && lease.lock === this ? lease : undefined
    if (state === undefined) {
      if (lease instanceof Lease && !lease.held) throw notHeldError(lease.id)
      throw new TypeError('Not a lease of a PgSessionLock')
    }
    if (!state.claim()) throw notHeldError(lease.id)
    state.forget()
    try {
      return await finish(this.#pool, state.id, state.token)
    } catch (err) {
      // The call failed (connection lost): it may not have released the row; try once more.
      this.#releaseQuietly(state.id, state.token)
      throw err
    } finally {
      state.slot()
    }
  }
}
