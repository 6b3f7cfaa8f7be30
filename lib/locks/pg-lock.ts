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
import { performance } from 'node:perf_hooks'
import { resolvePgPool, type PgPoolLike } from '../postgres/pool.js'
import { pgText } from '../postgres/text-query.js'
import { DEFAULT_PG_PREFIX, checkPgPrefix, ensureSchema } from '../postgres/schema.js'
import { settleWithin } from '../util/settle.js'
import { roundTrip } from '../telemetry/index.js'
import { BackendSessionLock, leaseEngine } from './backend-lock.js'
import { LEASE_BUSY, leaseTtl, type BackendLeases } from './backend-leases.js'
import { SessionLockError } from './errors.js'
import { newLeaseToken } from './lease-token.js'
import { PgLease, type LeaseStatement } from './pg-lease.js'
import { DEFAULT_LOCK_TIMEOUT, checkTimeout } from './wait.js'

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

/** Milliseconds between two tries at deleting the rows of releases that failed. */
const ORPHAN_RETRY = 1000

/** How long close() waits for the pool's end (ms). */
const CLOSE_TIMEOUT = 1000

/**
 * Lease rows this process failed to release (the database was unreachable), by token: the id,
 * and until when the row can still hold the key (`performance.now()` ms). Deleted once the
 * database answers again (a retry every second, and before this process takes the key again),
 * so that a restart does not leave a key busy for a whole lease ttl; at most a ttl, as the row
 * would expire by then anyway.
 */
class Orphans {
  readonly #rows = new Map<string, { id: string, until: number }>()
  #timer: NodeJS.Timeout | null = null
  #stopped = false

  constructor (readonly pool: PgPoolLike, readonly release: LeaseStatement, readonly ttl: number) {}

  get size (): number {
    return this.#rows.size
  }

  add (id: string, token: string): void {
    if (this.#stopped) return
    this.#rows.set(token, { id, until: performance.now() + this.ttl })
    if (this.#timer !== null) return
    this.#timer = setInterval(() => { void this.releaseAll() }, ORPHAN_RETRY)
    this.#timer.unref()
  }

  /** Deletes the rows (of `id` only, if given); one still unreachable stays for the next tick. */
  async releaseAll (id?: string): Promise<void> {
    const now = performance.now()
    for (const [token, orphan] of this.#rows) {
      if (id !== undefined && orphan.id !== id) continue
      if (orphan.until <= now) { this.#rows.delete(token); continue }
      try {
        await pgText(this.pool, this.release, [orphan.id, token])
        this.#rows.delete(token)
      } catch {
        if (id === undefined) break // still unreachable: the next tick tries again
      }
    }
    if (this.#rows.size === 0 && this.#timer !== null) {
      clearInterval(this.#timer)
      this.#timer = null
    }
  }

  /** The lock closes: no more retries, and none kept. */
  stop (): void {
    this.#stopped = true
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#rows.clear()
  }
}

/** Session lock backed by PostgreSQL lease rows. */
export class PgSessionLock extends BackendSessionLock<PgPoolLike> {
  /** Table-name prefix. */
  readonly prefix: string
  readonly #pool: PgPoolLike
  readonly #ownsPool: boolean
  readonly #orphans: Orphans
  /** Resolves once the schema exists (checked once). */
  readonly #schema: () => Promise<void>

  /** @throws {RangeError} for a negative `timeout` or a `ttl` below 3; {@link TypeError} for a bad prefix or pool. */
  constructor (options: PgSessionLockOptions) {
    const timeout = checkTimeout(options.timeout ?? DEFAULT_LOCK_TIMEOUT)
    const ttl = leaseTtl(options.ttl)
    const p = checkPgPrefix(options.prefix ?? DEFAULT_PG_PREFIX)
    const { pool, owned } = resolvePgPool(options.pool)
    // The functions of schema.ts: each commits without waiting for the WAL flush (see there).
    const take = { name: `${p}lease_take`, text: `SELECT ${p}lease_take($1, $2, $3) AS ok` }
    const release = { name: `${p}lease_release`, text: `SELECT ${p}lease_release($1, $2)` }
    const extend = { name: `${p}lease_extend`, text: `SELECT ${p}lease_extend($1, $2, $3) AS ok` }
    const orphans = new Orphans(pool, release, ttl)
    let schemaReady = false
    const schema = async (): Promise<void> => {
      if (schemaReady) return
      await ensureSchema(pool, p)
      schemaReady = true
    }
    super(timeout, ttl, {
      handle: pool,
      // A pool: a release and the next take may run on different connections, in any order.
      ordered: false,
      keyOf: id => id,
      newToken: newLeaseToken,
      newLease: (home, id, _key, token, slot, passes, sentAt, read, readBy) => new PgLease(extend, id, home, token, slot, passes, sentAt, read, readBy),
      release: async (id, token) => await pgText(pool, release, [id, token]),
      releaseFailed: (id, token) => { orphans.add(id, token) },
      // A row of ours left by a release that failed: deleted first, or we would wait for it.
      prepare: id => orphans.size > 0 ? orphans.releaseAll(id) : undefined,
      beforeAttempt: () => schemaReady ? undefined : schema()
    }, async (pool, id, token, _id, ttl) => {
      roundTrip()
      const { rows } = await pgText(pool, take, [id, token, ttl])
      return rows[0]?.[0] === 't' ? undefined : LEASE_BUSY
    })
    this.prefix = p
    this.#pool = pool
    this.#ownsPool = owned
    this.#orphans = orphans
    this.#schema = schema
  }

  /** The pool this lock uses. */
  get pool (): PgPoolLike {
    return this.#pool
  }

  /** Resolves once the database answers and the schema exists; rejects with a `SessionLockError` otherwise. */
  async ready (): Promise<void> {
    try {
      await this.#schema()
    } catch (err) {
      throw new SessionLockError(`PostgreSQL is not reachable (${(err as Error).message})`, { cause: err })
    }
  }

  /** Ends the pool if the lock made it (its leases were released before: see `close()`). */
  protected async closeBackend (): Promise<void> {
    this.#orphans.stop()
    if (this.#ownsPool) await settleWithin(this.#pool.end(), CLOSE_TIMEOUT, { keepAlive: false })
  }
}

/**
 * @internal The lease machinery of `lock`, for the store + lock pairing that takes and releases
 * its leases in its own statements (`sessions/pg-store.ts`).
 */
export function pgLeaseEngine (lock: PgSessionLock): BackendLeases<PgPoolLike> {
  return leaseEngine(lock)
}
