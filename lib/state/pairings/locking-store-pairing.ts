/**
 * A store that implements the `LockingSessionStore` contract for its lock (the PostgreSQL store
 * with the PostgreSQL lock on its pool, or an app's own): the store takes the lease and reads in
 * one backend call, saves and releases in another, and may hand an unchanged record's lease on.
 */
import type { LocalAcquireOptions, SessionLease, SessionLock } from '../../locks/session-lock.js'
import type { LockingSessionStore, SaveGuard, SaveResult, SessionChanges } from '../../sessions/session-store.js'
import { AnyPairing } from './any-pairing.js'
import type { Taken } from './pairing.js'

/** See the module doc. */
export class LockingStorePairing extends AnyPairing {
  override readonly oneCall = true
  readonly #store: LockingSessionStore
  readonly #lock: SessionLock

  constructor (store: LockingSessionStore, lock: SessionLock) {
    // The store may pass the options on to code that wants a real signal.
    super(store, lock, false)
    this.#store = store
    this.#lock = lock
  }

  protected override async takeWith (id: string, options: LocalAcquireOptions): Promise<Taken | null> {
    return await this.#store.acquireAndLoad(id, this.#lock, options as { signal?: AbortSignal })
  }

  override passOn (id: string, lease: SessionLease): boolean {
    return this.#store.passOn?.(id, lease) === true
  }

  /** The store's save-and-release: one call, the lease ends even when it fails. */
  protected override async saveAndRelease (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease): Promise<SaveResult> {
    return await this.#store.saveAndRelease(id, changes, guard, lease)
  }
}
