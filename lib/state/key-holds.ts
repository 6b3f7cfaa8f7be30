/**
 * Holds on single keys for work that outlives a request (a task's runner): the lease is taken
 * without waiting, every save under it is fenced by it, and `finish()` (the last save) or `end()`
 * lets it go. The dead-runner
 * check takes one the same way: a key whose lease is free has lost its holder. Without a lock a
 * hold has no lease: its saves are checked by version only, and a lost holder cannot be told.
 */
import type { SessionLease, SessionLock } from '../locks/session-lock.js'
import type { SaveGuard, SaveResult, SessionChanges, SessionStore } from '../sessions/session-store.js'
import type { CloseResult } from './outcome.js'

/** The pairing's write: saves fenced by the lease and ends it (one backend call where it can). */
export type WriteAndEnd = (key: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease | null) => Promise<CloseResult>

/** One hold (see the module doc). */
export class KeyHold {
  readonly key: string
  readonly #store: SessionStore
  readonly #lease: SessionLease | null
  readonly #write: WriteAndEnd
  #ended = false

  constructor (store: SessionStore, key: string, lease: SessionLease | null, write: WriteAndEnd) {
    this.#store = store
    this.key = key
    this.#lease = lease
    this.#write = write
  }

  /** Aborted when the lease is lost (a Redis lease that could not be renewed); `null` without a lock. */
  get signal (): AbortSignal | null { return this.#lease?.signal ?? null }

  /** Saves `changes` if the record is still at `version` and the lease still this hold's. */
  async save (changes: SessionChanges, version: number): Promise<SaveResult> {
    return await this.#store.save(this.key, changes, { version, fence: this.#lease?.fence })
  }

  /**
   * The last save: fenced as {@link save}, and the lease ends with it, in the same backend call
   * where the pairing can (Redis, PostgreSQL): whoever reads the record afterwards finds the key
   * free. The lease ends even when the save fails (rejecting with the store's error).
   */
  async finish (changes: SessionChanges, version: number): Promise<SaveResult> {
    this.#ended = true
    const lease = this.#lease
    const result = await this.#write(this.key, changes, { version, fence: lease?.fence }, lease)
    if (result.status === 'failed') throw result.error
    return result.status as SaveResult
  }

  /** Lets the lease go, unless {@link finish} did (a release that fails leaves it to expire in the backend). Never rejects. */
  async end (): Promise<void> {
    if (this.#ended) return
    this.#ended = true
    await this.#lease?.release().catch(() => {})
  }
}

/** Holds on the keys of one store (see the module doc). */
export class KeyHolds {
  readonly store: SessionStore
  readonly #lock: SessionLock | null
  readonly #write: WriteAndEnd

  /**
   * `lock`: the pairing's (`Pairing.holds()`); the in-process store without one gets an in-process
   * one of its own (a dead runner is then told within this process; a store shared by instances
   * cannot tell without a shared lock).
   */
  constructor (store: SessionStore, lock: SessionLock | null, write: WriteAndEnd) {
    this.store = store
    this.#lock = lock
    this.#write = write
  }

  /** Whether holds take a lease (else a lost holder cannot be told). */
  get locking (): boolean { return this.#lock !== null }

  /**
   * Takes the key's lease if it is free right now (never waits): the hold, or `null` when the
   * key is held by someone else. Without a lock, a hold without a lease. Rejects with the lock's errors.
   */
  async tryHold (key: string): Promise<KeyHold | null> {
    if (this.#lock === null) return new KeyHold(this.store, key, null, this.#write)
    const lease = await this.#lock.tryAcquire(key)
    return lease === null ? null : new KeyHold(this.store, key, lease, this.#write)
  }
}
