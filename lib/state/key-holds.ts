/**
 * Holds on single keys for work that outlives a request (a task's runner): the lease is taken
 * without waiting, every save under it is fenced by it, and `end()` lets it go. The dead-runner
 * check takes one the same way: a key whose lease is free has lost its holder. Without a lock a
 * hold has no lease: its saves are checked by version only, and a lost holder cannot be told.
 */
import type { SessionLease, SessionLock } from '../locks/session-lock.js'
import type { SaveResult, SessionChanges, SessionStore } from '../sessions/session-store.js'

/** One hold (see the module doc). */
export class KeyHold {
  readonly key: string
  readonly #store: SessionStore
  readonly #lease: SessionLease | null

  constructor (store: SessionStore, key: string, lease: SessionLease | null) {
    this.#store = store
    this.key = key
    this.#lease = lease
  }

  /** Aborted when the lease is lost (a Redis lease that could not be renewed); `null` without a lock. */
  get signal (): AbortSignal | null { return this.#lease?.signal ?? null }

  /** Saves `changes` if the record is still at `version` and the lease still this hold's. */
  async save (changes: SessionChanges, version: number): Promise<SaveResult> {
    return await this.#store.save(this.key, changes, { version, fence: this.#lease?.fence })
  }

  /** Lets the lease go (a release that fails leaves it to expire in the backend). Never rejects. */
  async end (): Promise<void> {
    await this.#lease?.release().catch(() => {})
  }
}

/** Holds on the keys of one store (see the module doc). */
export class KeyHolds {
  readonly store: SessionStore
  readonly #lock: SessionLock | null

  /**
   * `lock`: the pairing's (`Pairing.holds()`); the in-process store without one gets an in-process
   * one of its own (a dead runner is then told within this process; a store shared by instances
   * cannot tell without a shared lock).
   */
  constructor (store: SessionStore, lock: SessionLock | null) {
    this.store = store
    this.#lock = lock
  }

  /** Whether holds take a lease (else a lost holder cannot be told). */
  get locking (): boolean { return this.#lock !== null }

  /**
   * Takes the key's lease if it is free right now (never waits): the hold, or `null` when the
   * key is held by someone else. Without a lock, a hold without a lease. Rejects with the lock's errors.
   */
  async tryHold (key: string): Promise<KeyHold | null> {
    if (this.#lock === null) return new KeyHold(this.store, key, null)
    const lease = await this.#lock.tryAcquire(key)
    return lease === null ? null : new KeyHold(this.store, key, lease)
  }
}
