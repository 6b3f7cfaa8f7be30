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
import { Lease } from '../locks/lease.js'
import { FileSessionLock } from '../locks/file-lock.js'
import { MemorySessionLock } from '../locks/memory-lock.js'
import { RedisSessionLock } from '../locks/redis-lock.js'
import { signalOf, type AbortSource, type LocalAcquireOptions, type SessionLease, type SessionLock } from '../locks/session-lock.js'
import { MemorySessionStore } from '../sessions/memory-store.js'
import { SessionHandle } from '../sessions/session-handle.js'
import type { SessionRecord, SessionStore } from '../sessions/session-store.js'
import { AbandonedLeases, type Watched } from './abandoned-leases.js'
import { lockedAccess, type LockedAccess } from './locked-access.js'
import type { CloseResult } from './outcome.js'

export type { SessionLock, CloseResult }
import { RedisFastPath } from './redis-fast-path.js'

/** The store and lock a kind of state lives in, with their combined path when they have one. */
export class StateBackend {
  readonly store: SessionStore
  readonly lock: SessionLock | null
  readonly fast: LockedAccess | null
  /** The leases of cancelled requests, let go after the grace (`null`: no lock, nothing to let go). */
  readonly abandoned: AbandonedLeases | null
  /** Whether the lock takes an `AbortSource` as it is (see {@link ScopeOptions.signal}). */
  readonly #sources: boolean
  /** The store when it reads without a promise, and the lock when there is none or it grants without one (see {@link openNow}). */
  readonly #now: { store: MemorySessionStore, lock: MemorySessionLock | null } | null

  /** `cancelGrace`: see `SessionOptions.cancelGrace` (default 5,000 ms). */
  constructor (store: SessionStore, lock: SessionLock | null, options: { cancelGrace?: number } = {}) {
    this.store = store
    this.lock = lock
    this.abandoned = lock === null ? null : new AbandonedLeases(options.cancelGrace ?? 5000)
    this.fast = lockedAccess(store, lock)
    // A custom store's combined path may pass the options on to code that wants a real signal.
    this.#sources = takesSources(lock) && (this.fast === null || this.fast instanceof RedisFastPath)
    // Only where load() and acquire() are the memory backends' own: a subclass that overrides one
    // (to fail, count or delay it) is asked through it, never around it.
    this.#now = store instanceof MemorySessionStore && store.load === MemorySessionStore.prototype.load &&
      (lock === null || (lock instanceof MemorySessionLock && lock.acquire === MemorySessionLock.prototype.acquire && this.fast === null))
      ? { store, lock }
      : null
  }

  /**
   * {@link open} without a promise when it needs no wait: the memory store, with no lock to take
   * or the memory lock's key free (taken as `acquire()` would grant it: never ahead of a waiter).
   * Returns `undefined`, doing nothing, otherwise (the lock would wait or refuse, another
   * backend): then `await open()`. Most requests of a process-local backend need no wait.
   * @internal
   */
  openNow (id: string, options: ScopeOptions): StateScope | null | undefined {
    const now = this.#now
    if (now === null) return undefined
    if (!options.lock || now.lock === null) {
      const record = now.store.loadNow(id)
      return record === null ? null : new StateScope(this, id, record, null, options)
    }
    const lease = now.lock.acquireNow(id, options)
    if (lease === null) return undefined
    // Taken before the read. open() asks exists() first so that an unknown id makes no lock key or
    // file in a backend; the memory lock keeps nothing once released, so an unknown id is released at once.
    let record
    try {
      record = now.store.loadNow(id)
    } catch (err) {
      lease.releaseNow()
      throw err
    }
    if (record === null) { lease.releaseNow(); return null }
    return new StateScope(this, id, record, lease, options)
  }

  /**
   * Opens a scope on `id`: takes the lock first when `options.lock` is set and a lock is
   * configured. Resolves `null`, holding nothing, when the state does not exist (unknown ids never
   * create a lock key or file). Rejects with the lock's errors (`SessionLockTimeoutError`,
   * `SessionLockError`, the signal's reason) or the store's.
   */
  async open (id: string, options: ScopeOptions): Promise<StateScope | null> {
    if (options.lock && this.lock !== null) {
      const taken = await this.#lockAndLoad(id, options)
      return taken === null ? null : new StateScope(this, id, taken.record, taken.lease, options)
    }
    const record = await this.store.load(id)
    return record === null ? null : new StateScope(this, id, record, null, options)
  }

  /** @internal Takes the lease and reads the state (one backend call on the fast path). */
  async lockAndLoad (id: string, options: LocalAcquireOptions): Promise<{ lease: SessionLease, record: SessionRecord } | null> {
    return await this.#lockAndLoad(id, options)
  }

  /**
   * Not async: the fast path's promise is returned as it is, without a frame that only awaits it
   * (each such frame is one more step, and one more object kept, when the reply arrives). Called
   * only by async functions, which turn a throw into a rejection.
   */
  #lockAndLoad (id: string, options: LocalAcquireOptions): Promise<{ lease: SessionLease, record: SessionRecord } | null> {
    const acquiring = acquireOptions(options)
    if (!this.#sources) acquiring.signal = signalOf(acquiring.signal)
    if (this.fast !== null) return this.fast.acquireAndLoad(id, acquiring)
    return this.#lockThenLoad(id, this.lock as SessionLock, acquiring)
  }

  /** Any other store and lock: existence, then the lock, then the read (three backend calls). */
  async #lockThenLoad (id: string, lock: SessionLock, acquiring: LocalAcquireOptions): Promise<{ lease: SessionLease, record: SessionRecord } | null> {
    // Existence first: an unknown id must not create a lock key or file.
    if (!await this.store.exists(id)) return null
    const lease = await lock.acquire(id, acquiring as { signal?: AbortSignal })
    try {
      const record = await this.store.load(id)
      if (record === null) { await lease.release(); return null }
      return { lease, record }
    } catch (err) {
      await lease.release().catch(() => {})
      throw err
    }
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

function acquireOptions (options: LocalAcquireOptions): LocalAcquireOptions {
  return { owner: options.owner, signal: options.signal, priority: options.priority }
}

/** Whether `lock` takes an `AbortSource` in place of a signal (the bundled locks). */
function takesSources (lock: SessionLock | null): boolean {
  return lock instanceof RedisSessionLock || lock instanceof MemorySessionLock || lock instanceof FileSessionLock
}

/** Releases a lease (if any); resolves the error when that failed (it then expires in the backend). */
async function release (lease: SessionLease | null): Promise<unknown> {
  if (lease === null) return undefined
  try {
    await lease.release()
    return undefined
  } catch (err) {
    return err
  }
}

function withRelease (result: CloseResult, releaseError: unknown): CloseResult {
  return releaseError === undefined ? result : { ...result, releaseError }
}

const UNCHANGED: CloseResult = { status: 'unchanged' }
const LOST: CloseResult = { status: 'lost' }
const ABANDONED: CloseResult = { status: 'abandoned' }

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
    const lost = (): void => {
      if (this.#lease !== lease) return
      this.#lost = true
      this.#onLost?.()
    }
    // The bundled locks' leases tell without an AbortSignal; other locks' through the signal (a
    // signal aborted already never fires its listeners: look first).
    if (lease instanceof Lease) lease.whenLost(lost)
    else if (lease.signal.aborted) lost()
    else lease.signal.addEventListener('abort', lost, { once: true })
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
    void release(lease)
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
   * changed, and there is no lease or it is one whose release is synchronous (the memory lock's;
   * it is passed on, as by `close()`, when the backend's fast path takes it). Returns `null`, doing
   * nothing, otherwise: then `await close()`. Most requests change nothing.
   * @internal
   */
  closeNow (): CloseResult | null {
    if (this.#closed) return this.#afterEnd()
    if (this.handle.dirty) return null
    const lease = this.#lease
    if (lease !== null && !(lease instanceof Lease && lease.releasesNow)) return null
    this.#closed = true
    this.#letGo()
    if (lease === null) return UNCHANGED
    // Unchanged: the next request of this process for the key may take the lease as it is.
    if (this.#backend.fast?.passOn(this.id, lease) === true) return UNCHANGED
    try {
      (lease as Lease).releaseNow()
    } catch (releaseError) {
      return { status: 'unchanged', releaseError }
    }
    return UNCHANGED
  }

  /** What a close says once the scope is closed: how it ended, or lost when it could not be taken back. */
  #afterEnd (): CloseResult {
    return this.#lost && this.#ended.status === 'unchanged' ? LOST : this.#ended
  }

  /** The rest of {@link close}: a lease released asynchronously, or changes to write. */
  async #write (): Promise<CloseResult> {
    this.#closed = true
    const lease = this.#letGo()
    const fast = lease !== null ? this.#backend.fast : null
    if (!this.handle.dirty) {
      // Unchanged: the next request of this process for the key may take the lease as it is.
      if (fast?.passOn(this.id, lease as SessionLease) === true) return UNCHANGED
      return withRelease({ status: 'unchanged' }, await release(lease))
    }
    // A lease known to be lost may be someone else's by now: the save is not tried (the fast
    // path's script would check the fence, but the answer must not depend on what it finds).
    if (this.#lost || (lease instanceof Lease && lease.expired)) {
      this.#ended = LOST
      return withRelease(LOST, await release(lease))
    }
    let result: CloseResult
    try {
      const guard = { version: this.handle.version, fence: lease?.fence }
      const changes = this.handle.changes()
      const status = fast !== null
        ? await fast.saveAndRelease(this.id, changes, guard, lease as SessionLease)
        : await this.#backend.store.save(this.id, changes, guard)
      if (status === 'ok') this.handle.markSaved()
      result = { status }
    } catch (error) {
      result = { status: 'failed', error }
    }
    if (result.status !== 'ok') this.#ended = result
    // saveAndRelease ends the lease itself, even when it fails.
    return fast !== null ? result : withRelease(result, await release(lease))
  }

  /**
   * Ends the scope without writing what the work changed (a run that will be repeated from the
   * start, such as a 2026-07-28 `input_required` round), and releases the lease.
   */
  async abandon (): Promise<CloseResult> {
    if (this.#closed) return this.#afterEnd()
    this.#closed = true
    const lease = this.#letGo()
    return withRelease({ status: 'unchanged' }, await release(lease))
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
      const record = await this.#backend.store.load(this.id)
      if (record === null) throw new Error('the state ended while waiting for the client')
      this.#closed = false
      this.handle.reload(record)
      return
    }
    let taken
    try {
      taken = await this.#backend.lockAndLoad(this.id, { ...this.#options, priority: true })
    } catch (err) {
      this.#lost = true
      throw err
    }
    if (taken === null) {
      this.#lost = true
      throw new Error('the state ended while waiting for the client')
    }
    this.#closed = false
    this.#hold(taken.lease)
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
      await release(lease)
    }
  }
}
