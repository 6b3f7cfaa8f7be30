/**
 * The state scope: for one key of a store (a session id today), take the lock → load → hand a
 * handle to the work → save the keys it changed (fenced) → release. Around a wait for the client it
 * saves and releases, then takes the lock back and re-reads; a request that changed nothing hands
 * the lease on to the next one queued in its process; a request aborted while queued leaves the
 * queue at once. Everything that holds shared state under the lock goes through here; nothing
 * else touches a lease.
 *
 * The scope never logs and never answers a client: it reports what happened (the result of a
 * close, a lost lease, typed errors) and the protocol layer decides what the client is told.
 */
import type { AbortSource, LocalAcquireOptions, SessionLease, SessionLock } from '../locks/session-lock.js'
import { SessionHandle } from '../sessions/session-handle.js'
import type { SessionRecord, SessionStore } from '../sessions/session-store.js'
import { AbandonedLeases, type Watched } from './abandoned-leases.js'
import type { CloseResult } from './outcome.js'
import { UNCHANGED, withRelease } from './pairings/any-pairing.js'
import type { Pairing, Taken, WriteItem } from './pairings/pairing.js'

export type { SessionLock, CloseResult }

/** The store and lock a kind of state lives in, through their pairing. */
export class StateBackend {
  readonly pairing: Pairing
  /** The leases of cancelled requests, let go after the grace (`null`: no lock, nothing to let go). */
  readonly abandoned: AbandonedLeases | null

  /** `cancelGraceMs`: see `SessionOptions.cancelGraceMs` (default 5,000 ms). */
  constructor (pairing: Pairing, options: { cancelGraceMs?: number } = {}) {
    this.pairing = pairing
    this.abandoned = pairing.lock === null ? null : new AbandonedLeases(options.cancelGraceMs ?? 5000)
  }

  get store (): SessionStore { return this.pairing.store }
  get lock (): SessionLock | null { return this.pairing.lock }

  /**
   * {@link open} without a promise when it needs no wait (the pairing can take and read at once:
   * the memory store, with no lock or the memory lock's key free). Returns `undefined`, doing
   * nothing, otherwise: then `await open()`. Most requests of a process-local backend need no wait.
   * @internal
   */
  openNow (id: string, options: ScopeOptions): StateScope | null | undefined {
    const taken = this.pairing.takeNow(id, options)
    if (taken == null) return taken
    return new StateScope(this, id, taken.record, taken.lease, options)
  }

  /**
   * Opens a scope on `id`: takes the lock first when `options.lock` is set and a lock is
   * configured. Resolves `null`, holding nothing, when the state does not exist (unknown ids never
   * create a lock key or file). Rejects with the lock's errors (`SessionLockTimeoutError`,
   * `SessionLockError`, the signal's reason) or the store's.
   */
  async open (id: string, options: ScopeOptions): Promise<StateScope | null> {
    if (options.lock && this.pairing.lock !== null) {
      const taken = await this.pairing.take(id, options)
      return taken === null ? null : new StateScope(this, id, taken.record, taken.lease, options)
    }
    const record = await this.pairing.read(id)
    return record === null ? null : new StateScope(this, id, record, null, options)
  }

  /** Takes the lease and reads the state (one backend call where the pairing can). */
  async take (id: string, options: LocalAcquireOptions): Promise<Taken | null> {
    return await this.pairing.take(id, options)
  }
}

/** How a scope is opened. */
export interface ScopeOptions {
  /** Take the lock (when one is configured): the work writes, or must see every earlier write. */
  lock: boolean
  /** Who asks (the request): taking a key its owner holds already is an error, not a deadlock. */
  owner?: object
  /**
   * Aborting it while queued for the lock gives up at once. An `AbortSource` (a request's
   * cancellation) is asked for its signal only if the scope has to wait: the bundled locks take it
   * as it is; any other lock gets its signal.
   */
  signal?: AbortSignal | AbortSource
}

const LOST: CloseResult = { status: 'lost' }
const ABANDONED: CloseResult = { status: 'abandoned' }
const SKIPPED: CloseResult = { status: 'skipped' }

/** One open scope (see the module doc). */
export class StateScope implements Watched {
  readonly id: string
  readonly handle: SessionHandle
  readonly #backend: StateBackend
  readonly #options: ScopeOptions
  #lease: SessionLease | null = null
  #closed = false
  /** What a close of this scope once closed answers (see {@link CloseResult}). */
  #ended: CloseResult = UNCHANGED
  #onLost: (() => void) | null = null
  #lost = false
  /** When the watcher first saw the request cancelled (`performance.now()`), or -1. */
  #cancelSeenAt = -1

  constructor (backend: StateBackend, id: string, record: SessionRecord, lease: SessionLease | null, options: ScopeOptions) {
    this.#backend = backend
    this.#options = options
    this.id = id
    this.handle = new SessionHandle(id, record)
    this.#hold(lease)
  }

  /** Whether a lease is held right now. */
  get held (): boolean { return this.#lease !== null }

  /** Whether a lease held by this scope was lost (it may have been written by someone else since). */
  get lost (): boolean { return this.#lost }

  /** Whether the scope was opened under the lock (it takes the lock back after a wait). */
  get locking (): boolean { return this.#options.lock && this.#backend.lock !== null }

  /** Calls `fn` once when a lease of this scope is lost (a Redis lease that could not be renewed). */
  onLost (fn: () => void): void {
    this.#onLost = fn
    if (this.#lost) fn()
  }

  #hold (lease: SessionLease | null): void {
    this.#lease = lease
    if (lease === null) return
    // A request that can be cancelled keeps its lease at most the grace after it was.
    if (this.#options.signal !== undefined) this.#backend.abandoned?.watch(this)
    this.#backend.pairing.whenLost(lease, () => {
      if (this.#lease !== lease) return
      this.#lost = true
      this.#onLost?.()
    })
  }

  /** Takes the lease out of the scope (to release or pass on), and out of the watch. */
  #letGo (): SessionLease | null {
    const lease = this.#lease
    this.#lease = null
    if (lease !== null && this.#options.signal !== undefined) this.#backend.abandoned?.unwatch(this)
    return lease
  }

  /**
   * The request was cancelled (or its client left) `grace` ms ago and still holds the lease: its
   * handler ignores `ctx.signal`. Releases the lease so the next request runs; the scope is closed,
   * and every later close answers `abandoned` (nothing it changed is written).
   */
  checkCancelled (now: number, grace: number): void {
    if (this.#lease === null || this.#options.signal?.aborted !== true) return
    if (this.#cancelSeenAt < 0) this.#cancelSeenAt = now
    if (now - this.#cancelSeenAt < grace) return
    const lease = this.#letGo()
    this.#closed = true
    this.#ended = ABANDONED
    // A release that fails leaves the lease to expire in the backend.
    void this.#backend.pairing.release(lease)
  }

  /**
   * Writes back what the work changed and releases the lease (one backend call on the fast path),
   * or passes it on when nothing changed. A destroyed state is never re-created; a lost lease never
   * overwrites newer state. Never throws; a second close does nothing (`unchanged`).
   */
  close (): Promise<CloseResult> {
    // Not async (see #lockAndLoad): #write's promise is returned as it is.
    let now
    try {
      now = this.closeNow()
    } catch (err) {
      return Promise.reject(err)
    }
    return now !== null ? Promise.resolve(now) : this.#write()
  }

  /**
   * {@link close} without a promise when it needs neither a backend call nor a wait: nothing was
   * changed, and there is no lease or the pairing lets it go at once (the memory lock's). Returns
   * `null`, doing nothing, otherwise: then `await close()`. Most requests change nothing.
   * @internal
   */
  closeNow (): CloseResult | null {
    if (this.#closed) return this.#afterEnd()
    if (this.handle.dirty) return null
    const lease = this.#lease
    const pairing = this.#backend.pairing
    if (lease !== null && !pairing.letsGoNow) return null
    this.#closed = true
    this.#letGo()
    return lease === null ? UNCHANGED : pairing.letGoNow(this.id, lease)
  }

  /** What a close says once the scope is closed: how it ended, or lost when it could not be taken back. */
  #afterEnd (): CloseResult {
    return this.#lost && this.#ended.status === 'unchanged' ? LOST : this.#ended
  }

  /** The rest of {@link close}: a lease let go asynchronously, or changes to write. */
  async #write (): Promise<CloseResult> {
    if (!this.handle.dirty) {
      this.#closed = true
      const lease = this.#letGo()
      return lease === null ? UNCHANGED : await this.#backend.pairing.letGo(this.id, lease)
    }
    const item = this.beginWrite()
    if ('lost' in item) return withRelease(LOST, await this.#backend.pairing.release(item.lost))
    // The pairing ends the lease, even when the write fails.
    return this.endWrite(await this.#backend.pairing.write(item.id, item.changes, item.guard, item.lease))
  }

  /**
   * The first half of a close that writes (changes were made): the scope is closed and its lease
   * taken out; returns what to write under it, or — a lease known to be lost: nothing is written,
   * the close is `lost` — the lease, for the caller to release. {@link endWrite} takes the write's
   * result. Lets a unit of work write several scopes in one backend call (`Pairing.writeTogether`).
   * @internal
   */
  beginWrite (): WriteItem | { lost: SessionLease | null } {
    this.#closed = true
    const lease = this.#letGo()
    const pairing = this.#backend.pairing
    // A lease known to be lost may be someone else's by now: the save is not tried (a fenced
    // save would check, but the answer must not depend on what it finds).
    if (this.#lost || (lease !== null && pairing.expired(lease))) {
      this.#ended = LOST
      return { lost: lease }
    }
    return { id: this.id, changes: this.handle.changes(), guard: { version: this.handle.version, fence: lease?.fence }, lease }
  }

  /** The second half (see {@link beginWrite}): what the write did. @internal */
  endWrite (result: CloseResult): CloseResult {
    if (result.status === 'ok') this.handle.markSaved()
    else this.#ended = result
    return result
  }

  /**
   * Ends the scope without writing what the work changed (a run that will be repeated from the
   * start, such as a 2026-07-28 `input_required` round), and releases the lease.
   */
  async abandon (): Promise<CloseResult> {
    if (this.#closed) return this.#afterEnd()
    this.#closed = true
    const lease = this.#letGo()
    return withRelease(UNCHANGED, await this.#backend.pairing.release(lease))
  }

  /**
   * Ends the scope without writing, because an earlier part of the same unit of work was not kept
   * (a backend that cannot write several records at once): answered `skipped`.
   */
  async skip (): Promise<CloseResult> {
    if (this.#closed) return this.#afterEnd()
    this.#closed = true
    this.#ended = SKIPPED
    const lease = this.#letGo()
    return withRelease(SKIPPED, await this.#backend.pairing.release(lease))
  }

  /**
   * Before waiting for the client: saves and releases (see {@link close}), so that the session's
   * other requests, the client's answer among them, are not blocked by the wait.
   */
  async suspend (): Promise<CloseResult> {
    return await this.close()
  }

  /**
   * After the wait: takes the lock back (ahead of newer requests of this process) and re-reads
   * the state; this work's unsaved changes stay on top of it. Rejects with the lock's or store's
   * errors, or when the state ended meanwhile; the scope then counts as lost: its changes are
   * never written.
   */
  async resume (): Promise<void> {
    if (!this.locking) {
      // Opened without the lock: nothing to take back; re-read what others wrote meanwhile.
      const record = await this.#backend.pairing.read(this.id)
      if (record === null) throw new Error('the state ended while waiting for the client')
      this.#closed = false
      this.handle.reload(record)
      return
    }
    let taken
    try {
      taken = await this.#backend.take(this.id, { ...this.#options, priority: true })
    } catch (err) {
      this.#lost = true
      throw err
    }
    if (taken === null) {
      this.#lost = true
      throw new Error('the state ended while waiting for the client')
    }
    this.#closed = false
    this.#hold(taken.lease as SessionLease)
    this.handle.reload(taken.record)
  }

  /**
   * Ends the state, then releases the lease if one is held. Safe without the lease: a save never
   * re-creates a destroyed state (it reports `gone`). Resolves whether it existed.
   */
  async destroy (): Promise<boolean> {
    this.#closed = true
    const lease = this.#letGo()
    try {
      return await this.#backend.store.destroy(this.id)
    } finally {
      await this.#backend.pairing.release(lease)
    }
  }
}
