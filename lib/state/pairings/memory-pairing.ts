/**
 * The memory store with the memory lock (or no lock): both live in this process, so most requests
 * need no wait at all. A free key is taken and read without a promise, and an unchanged record's
 * lease is released the same way; a key someone holds is waited for as on any pairing. The memory
 * store's and lock's synchronous steps are reached from here only.
 */
import { MemorySessionLock, memoryLockNow } from '../../locks/memory-lock.js'
import type { SessionLease } from '../../locks/session-lock.js'
import { MemorySessionStore, memoryLoadNow, memorySaveAllNow } from '../../sessions/memory-store.js'
import type { CloseResult } from '../outcome.js'
import { AnyPairing, UNCHANGED, withRelease } from './any-pairing.js'
import type { Taken, TakeOptions, WriteItem } from './pairing.js'

/** See the module doc. */
export class MemoryPairing extends AnyPairing {
  override readonly letsGoNow = true
  readonly #store: MemorySessionStore
  readonly #lock: MemorySessionLock | null

  /** Only for the bundled classes' own `load` and `acquire` (`choose-pairing.ts` checks). */
  constructor (store: MemorySessionStore, lock: MemorySessionLock | null) {
    // Without a lock, holds get an in-process lock of their own: a dead runner is told within this process.
    super(store, lock, true, lock ?? new MemorySessionLock())
    this.#store = store
    this.#lock = lock
    // A subclass that saves its own way is asked through its save, one record at a time.
    if (store.save !== MemorySessionStore.prototype.save) this.writeTogether = undefined
  }

  /**
   * Several records in one synchronous step, all or none (nothing else runs in between), then
   * every lease let go. The memory lock's leases cannot be lost, so no fence is looked at.
   */
  writeTogether?: (items: readonly WriteItem[]) => Promise<CloseResult[]> = async (items) => {
    let results: CloseResult[]
    try {
      results = memorySaveAllNow(this.#store, items).map(status => ({ status }))
    } catch (error) {
      results = items.map(() => ({ status: 'failed', error }))
    }
    return results.map((r, i) => { const lease = items[i].lease; return lease === null ? r : withRelease(r, this.letGoNow(items[i].id, lease).releaseError) })
  }

  override takeNow (id: string, options: TakeOptions): Taken | null | undefined {
    const lock = this.#lock
    if (!options.lock || lock === null) {
      const record = memoryLoadNow(this.#store, id)
      return record === null ? null : { lease: null, record }
    }
    // Taken before the read: the memory lock keeps nothing once released, so an unknown id
    // (which on other pairings is looked at first, to make no lock key) is released at once.
    const lease = memoryLockNow.acquireNow(lock, id, options)
    if (lease === null) return undefined
    let record
    try {
      record = memoryLoadNow(this.#store, id)
    } catch (err) {
      memoryLockNow.releaseNow(lease)
      throw err
    }
    if (record === null) { memoryLockNow.releaseNow(lease); return null }
    return { lease, record }
  }

  override letGoNow (_id: string, lease: SessionLease): CloseResult {
    try {
      memoryLockNow.releaseNow(lease)
    } catch (releaseError) {
      return { status: 'unchanged', releaseError }
    }
    return UNCHANGED
  }

  override async letGo (id: string, lease: SessionLease): Promise<CloseResult> {
    return this.letGoNow(id, lease)
  }
}
