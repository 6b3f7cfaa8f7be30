/**
 * What the Redis and PostgreSQL pairings share: a bundled lock's lease machinery (FIFO, token,
 * renewal, pass-on) driving the store's own commands, so that take-lease+read is one backend call
 * and save+release another. Each backend gives its one try at the lease, how a value it read
 * becomes a record, and how one or several fenced saves are checked and sent.
 */
import type { BackendLeases, LeaseAttempt } from '../../locks/backend-leases.js'
import type { LocalAcquireOptions, SessionLease, SessionLock } from '../../locks/session-lock.js'
import type { SaveGuard, SaveResult, SessionChanges, SessionRecord, SessionStore } from '../../sessions/session-store.js'
import type { CloseResult } from '../outcome.js'
import { AnyPairing } from './any-pairing.js'
import type { Taken, WriteItem } from './pairing.js'

/** A backend's save of one record, checked (`P`) before anything is sent. */
export interface LeaseWrites<H, P> {
  /** Checks one record's changes and turns them into what is sent; throws for bad keys or values. */
  prepare: (changes: SessionChanges, guard: SaveGuard) => P
  /** One fenced save that also releases the lease (`key`, `token`). */
  save: (handle: H, id: string, key: string, token: string, prepared: P, changes: SessionChanges, guard: SaveGuard) => Promise<SaveResult>
  /** Several records' fenced saves and their leases' releases in one call, all or none: a status per item. */
  saveMany: (handle: H, items: readonly WriteItem[], prepared: P[], keys: string[], tokens: string[]) => Promise<string[]>
}

/** Store + lock in one backend call each (see the module doc). */
export abstract class LeasePairing<H, T, P> extends AnyPairing {
  override readonly oneCall = true
  /** The lock's lease machinery. */
  readonly #leases: BackendLeases<H>
  /**
   * One try at the lease, made once rather than a closure per request. A lease it read is passed
   * on with what it read, which the next holder decodes anew: what one request mutated without
   * saving never reaches the next.
   */
  readonly #attempt: LeaseAttempt<H, T>
  readonly #writes: LeaseWrites<H, P>

  constructor (store: SessionStore, lock: SessionLock, leases: BackendLeases<H>, attempt: LeaseAttempt<H, T>, writes: LeaseWrites<H, P>) {
    super(store, lock, true)
    this.#leases = leases
    this.#attempt = attempt
    this.#writes = writes
  }

  /** The record a try at the lease read (throws for one that cannot be decoded). */
  protected abstract decode (id: string, value: T): SessionRecord

  /**
   * Waits for the key's lease as `lock.acquire()` does (FIFO, backoff, timeout, signal, owner,
   * errors) where each try is one backend call. Resolves null, holding nothing, when the record
   * does not exist. A record that cannot be decoded releases the lease and rejects.
   */
  protected override async takeWith (id: string, options: LocalAcquireOptions): Promise<Taken | null> {
    const taken = await this.#leases.acquireWith(id, options, this.#attempt)
    if (taken === null) return null
    let record
    try {
      record = this.decode(id, taken.value)
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

  /** Several records' fenced saves and their leases' releases in one call, all or none. Every lease ends here, even when the call fails. */
  writeTogether?: (items: readonly WriteItem[]) => Promise<CloseResult[]> = async (items) => {
    const leases = items.map(i => i.lease)
    let prepared: P[]
    try {
      if (leases.includes(null)) throw new TypeError('a write of several records takes their leases')
      // Checked before anything is sent.
      prepared = items.map(i => this.#writes.prepare(i.changes, i.guard))
    } catch (error) {
      await Promise.all(leases.map(async lease => await lease?.release().catch(() => {})))
      return items.map(() => ({ status: 'failed', error }))
    }
    try {
      const statuses = await this.#leases.releaseAllWith(leases as SessionLease[], async (handle, keys, tokens) =>
        await this.#writes.saveMany(handle, items, prepared, keys, tokens))
      return statuses.map(status => ({ status }) as CloseResult)
    } catch (error) {
      return items.map(() => ({ status: 'failed', error }))
    }
  }

  /**
   * Fenced save (by the lease's token, and `guard.version`) and the lease's release in one call.
   * The lease ends here even if the call fails (it then expires after the lock's ttl).
   * Not async: the release's promise is returned as it is.
   * @throws {SessionLockError} "not held" for a lease released already (as a rejection).
   */
  protected override saveAndRelease (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease): Promise<SaveResult> {
    const writes = this.#writes
    let prepared: P
    try {
      // Checked before anything is sent.
      prepared = writes.prepare(changes, guard)
    } catch (err) {
      // Nothing to save: the lease ends all the same, as promised (its caller lets go of it).
      return lease.release().then(() => { throw err }, () => { throw err })
    }
    return this.#leases.releaseWith(lease, (handle, key, token) => writes.save(handle, id, key, token, prepared, changes, guard))
  }
}
