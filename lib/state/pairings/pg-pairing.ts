/**
 * The PostgreSQL pairing: with a `PgSessionStore` and a `PgSessionLock` on the same pool and prefix,
 * take-lease+read is one statement and save+release another, so a locked request costs two round
 * trips instead of four; and a request that changed nothing hands the lease, with the row it read,
 * to the next request of this process queued for the same key, for none.
 *
 * This pairing is the one place that knows both: it runs the store's statements through the lock's
 * lease machinery (FIFO, token, renewal, pass-on), as the Redis pairing does with its scripts.
 */
import { LEASE_BUSY, SESSION_MISSING, type BackendLeases, type LeaseAttempt } from '../../locks/backend-leases.js'
import { pgLeaseEngine, type PgSessionLock } from '../../locks/pg-lock.js'
import type { LocalAcquireOptions, SessionLease } from '../../locks/session-lock.js'
import type { PgPoolLike } from '../../postgres/pool.js'
import { pgFields, type PgFields, type PgSessionStore, type TakenRow } from '../../sessions/pg-store.js'
import type { SaveGuard, SaveResult, SessionChanges } from '../../sessions/session-store.js'
import type { CloseResult } from '../outcome.js'
import { AnyPairing } from './any-pairing.js'
import type { Taken, WriteItem } from './pairing.js'

/** The take-lease+read statement's row as a lease attempt's outcome. */
function takenOrNot (row: TakenRow): TakenRow | typeof SESSION_MISSING | typeof LEASE_BUSY {
  if (row.status === 2) return SESSION_MISSING
  return row.status === 0 ? LEASE_BUSY : row
}

/** Store + lock in one backend call each (see the module doc). */
export class PgPairing extends AnyPairing {
  override readonly oneCall = true
  readonly #store: PgSessionStore
  /** The lock's lease machinery. */
  readonly #leases: BackendLeases<PgPoolLike>
  /**
   * One try at the lease: take it and read the record. A lease it read is passed on with the row,
   * which the next holder it takes decodes anew: what one request mutated without saving never
   * reaches the next.
   */
  readonly #attempt: LeaseAttempt<PgPoolLike, TakenRow>

  /** Both on the same pool and prefix (`choose-pairing.ts` checks). */
  constructor (store: PgSessionStore, lock: PgSessionLock) {
    super(store, lock, true)
    this.#store = store
    this.#leases = pgLeaseEngine(lock)
    this.#attempt = (_pool, key, token, id, lockTtl) => store.takeAndLoad(key, id, token, lockTtl).then(takenOrNot)
  }

  /**
   * Waits for the key's lease as `lock.acquire()` does (FIFO, backoff, timeout, signal, owner,
   * errors) where each try is one call: lock the row, take the lease, read the record. Resolves
   * null, holding nothing, when the record does not exist. A record that cannot be decoded
   * releases the lease and rejects.
   */
  protected override async takeWith (id: string, options: LocalAcquireOptions): Promise<Taken | null> {
    const taken = await this.#leases.acquireWith(id, options, this.#attempt)
    if (taken === null) return null
    let record
    try {
      record = this.#store.decode(id, taken.value.data, taken.value.version)
    } catch (err) {
      await taken.lease.release().catch(() => {})
      throw err
    }
    return { lease: taken.lease, record }
  }

  /**
   * Passes an unchanged record and its lease to the next request of this process waiting for it
   * (no round trip: nobody else can have written the record while the lease was held, since every
   * locked write goes through it). False when the lease cannot be passed on; release it then.
   */
  override passOn (_id: string, lease: SessionLease): boolean {
    return this.#leases.passOn(lease, this.#attempt)
  }

  /**
   * Several records' fenced saves and their leases' releases in one call, all or none (see
   * `save_many` in `postgres/schema.ts`). Every lease ends here, even when the call fails.
   */
  writeTogether?: (items: readonly WriteItem[]) => Promise<CloseResult[]> = async (items) => {
    const leases = items.map(i => i.lease)
    let sets: PgFields[]
    try {
      if (leases.includes(null)) throw new TypeError('a write of several records takes their leases')
      // Checked before anything is sent.
      sets = items.map(i => pgFields(i.changes.set))
    } catch (error) {
      await Promise.all(leases.map(async lease => await lease?.release().catch(() => {})))
      return items.map(() => ({ status: 'failed', error }))
    }
    try {
      const results = await this.#leases.releaseAllWith(leases as SessionLease[], async (_pool, keys, tokens) =>
        await this.#store.saveManyReleasing(items.map((item, i) => ({
          id: item.id, lock: keys[i], token: tokens[i], version: item.guard.version ?? null, keys: sets[i][0], values: sets[i][1], delete: item.changes.delete
        }))))
      return results.map(status => ({ status }))
    } catch (error) {
      return items.map(() => ({ status: 'failed', error }))
    }
  }

  /**
   * Fenced save (by the lease's token, and `guard.version`) and the lease's release in one call.
   * The lease ends here even if the call fails (it then expires after the lock's ttl).
   * Not async: the release's promise is returned as it is.
   */
  protected override saveAndRelease (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease): Promise<SaveResult> {
    let set: PgFields
    try {
      // Checked before anything is sent.
      set = pgFields(changes.set)
    } catch (err) {
      // Nothing to save: the lease ends all the same, as promised.
      return lease.release().then(() => { throw err }, () => { throw err })
    }
    return this.#leases.releaseWith(lease, (_pool, key, token) => this.#store.saveReleasing(id, key, token, set, changes.delete, guard.version))
  }
}
