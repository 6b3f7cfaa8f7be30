/**
 * The PostgreSQL pairing: with a `PgSessionStore` and a `PgSessionLock` on the same pool and prefix,
 * take-lease+read is one statement and save+release another, so a locked request costs two round
 * trips instead of four; and a request that changed nothing hands the lease, with the row it read,
 * to the next request of this process queued for the same key, for none.
 *
 * This pairing is the one place that knows both: it runs the store's statements through the lock's
 * lease machinery (FIFO, token, renewal, pass-on), as the Redis pairing does with its scripts.
 */
import { LEASE_BUSY, SESSION_MISSING, type LeaseAttempt } from '../../locks/backend-leases.js'
import { pgLeaseEngine, type PgSessionLock } from '../../locks/pg-lock.js'
import type { PgPoolLike } from '../../postgres/pool.js'
import { pgFields, type PgFields, type PgSessionStore, type TakenRow } from '../../sessions/pg-store.js'
import type { SessionRecord } from '../../sessions/session-store.js'
import { LeasePairing, type LeaseWrites } from './lease-pairing.js'

/** The take-lease+read statement's row as a lease attempt's outcome. */
function takenOrNot (row: TakenRow): TakenRow | typeof SESSION_MISSING | typeof LEASE_BUSY {
  if (row.status === 2) return SESSION_MISSING
  return row.status === 0 ? LEASE_BUSY : row
}

/** The store's save statements (`save` and `save_many` in `postgres/schema.ts`). */
function writes (store: PgSessionStore): LeaseWrites<PgPoolLike, PgFields> {
  return {
    // Checked before anything is sent.
    prepare: (changes) => pgFields(changes.set),
    save: (_pool, id, key, token, set, changes, guard) => store.saveReleasing(id, key, token, set, changes.delete, guard.version),
    saveMany: async (_pool, items, sets, keys, tokens) => await store.saveManyReleasing(items.map((item, i) => ({
      id: item.id, lock: keys[i], token: tokens[i], version: item.guard.version ?? null, keys: sets[i][0], values: sets[i][1], delete: item.changes.delete
    })))
  }
}

/** Store + lock in one backend call each (see the module doc). */
export class PgPairing extends LeasePairing<PgPoolLike, TakenRow, PgFields> {
  readonly #store: PgSessionStore

  /** Both on the same pool and prefix (`choose-pairing.ts` checks). */
  constructor (store: PgSessionStore, lock: PgSessionLock) {
    // Each try at the lease is one call: lock the row, take the lease, read the record.
    const attempt: LeaseAttempt<PgPoolLike, TakenRow> = (_pool, key, token, id, lockTtl) => store.takeAndLoad(key, id, token, lockTtl).then(takenOrNot)
    super(store, lock, pgLeaseEngine(lock), attempt, writes(store))
    this.#store = store
  }

  protected decode (id: string, row: TakenRow): SessionRecord {
    return this.#store.decode(id, row.data, row.version)
  }
}
