/**
 * Any store with any lock (or none): the plain sequence of contract calls. Existence, then the
 * lease, then the read (three backend calls); a save, then the release. The other pairings extend
 * it and replace the steps their backends can do in fewer calls.
 */
import { Lease } from '../../locks/lease.js'
import { signalOf, type LocalAcquireOptions, type SessionLease, type SessionLock } from '../../locks/session-lock.js'
import type { SaveGuard, SaveResult, SessionChanges, SessionRecord, SessionStore } from '../../sessions/session-store.js'
import { KeyHolds } from '../key-holds.js'
import type { CloseResult } from '../outcome.js'
import type { Pairing, Taken, TakeOptions } from './pairing.js'

export const UNCHANGED: CloseResult = Object.freeze({ status: 'unchanged' })

/** `result`, with the error of the release that followed it (if any). */
export function withRelease (result: CloseResult, releaseError: unknown): CloseResult {
  return releaseError === undefined ? result : { ...result, releaseError }
}

/** The lock's options of one take: a fresh object (the lock may keep it), `signal` made real unless the lock takes a source. */
function acquireOptions (options: LocalAcquireOptions, sources: boolean): LocalAcquireOptions {
  return { owner: options.owner, signal: sources ? options.signal : signalOf(options.signal), priority: options.priority, timeout: options.timeout }
}

/** See the module doc. */
export class AnyPairing implements Pairing {
  readonly store: SessionStore
  readonly lock: SessionLock | null
  readonly oneCall: boolean = false
  readonly letsGoNow: boolean = false
  /** Whether the lock takes an `AbortSource` as it is (the bundled locks do; others get its signal). */
  readonly #sources: boolean
  /** The lock of {@link holds}: the pairing's, else (the memory store without one) an in-process one. */
  readonly #holdLock: SessionLock | null

  constructor (store: SessionStore, lock: SessionLock | null, takesSources: boolean, holdLock: SessionLock | null = lock) {
    this.store = store
    this.lock = lock
    this.#sources = takesSources
    this.#holdLock = holdLock
  }

  takeNow (_id: string, _options: TakeOptions): Taken | null | undefined {
    return undefined
  }

  /**
   * Not async: a pairing's one-call path returns its promise as it is, without a frame that only
   * awaits it. Called only by async functions, which turn a throw into a rejection.
   */
  take (id: string, options: LocalAcquireOptions): Promise<Taken | null> {
    return this.takeWith(id, acquireOptions(options, this.#sources))
  }

  /** {@link take} with the lock's options made: existence, then the lease, then the read. */
  protected async takeWith (id: string, options: LocalAcquireOptions): Promise<Taken | null> {
    // Existence first: an unknown id must not create a lock key or file.
    if (!await this.store.exists(id)) return null
    const lease = await (this.lock as SessionLock).acquire(id, options as { signal?: AbortSignal })
    try {
      const record = await this.store.load(id)
      if (record === null) { await lease.release(); return null }
      return { lease, record }
    } catch (err) {
      await lease.release().catch(() => {})
      throw err
    }
  }

  /** Not async: the store's promise as it is (see {@link take}). */
  read (id: string): Promise<SessionRecord | null> {
    return this.store.load(id)
  }

  letGoNow (_id: string, _lease: SessionLease): CloseResult {
    throw new Error('this pairing lets a lease go asynchronously')
  }

  async letGo (id: string, lease: SessionLease): Promise<CloseResult> {
    if (this.passOn(id, lease)) return UNCHANGED
    return withRelease(UNCHANGED, await this.release(lease))
  }

  passOn (_id: string, _lease: SessionLease): boolean {
    return false
  }

  async write (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease | null): Promise<CloseResult> {
    if (lease !== null && this.saveAndRelease !== undefined) {
      try {
        return { status: await this.saveAndRelease(id, changes, guard, lease) }
      } catch (error) {
        // The lease ended all the same (see saveAndRelease).
        return { status: 'failed', error }
      }
    }
    let result: CloseResult
    try {
      result = { status: await this.store.save(id, changes, guard) }
    } catch (error) {
      result = { status: 'failed', error }
    }
    return withRelease(result, await this.release(lease))
  }

  /**
   * Where a pairing saves and releases in one backend call: fenced by the lease, which ends even
   * when the call fails. Without it, {@link write} saves, then releases.
   */
  protected saveAndRelease? (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease): Promise<SaveResult>

  async release (lease: SessionLease | null): Promise<unknown> {
    if (lease === null) return undefined
    try {
      await lease.release()
      return undefined
    } catch (err) {
      return err
    }
  }

  whenLost (lease: SessionLease, fn: () => void): void {
    // The bundled locks' leases tell without an AbortSignal; other locks' through the signal (a
    // signal aborted already never fires its listeners: look first).
    if (lease instanceof Lease) lease.whenLost(fn)
    else if (lease.signal.aborted) fn()
    else lease.signal.addEventListener('abort', fn, { once: true })
  }

  expired (lease: SessionLease): boolean {
    return lease instanceof Lease ? lease.expired : lease.signal.aborted
  }

  holds (): KeyHolds {
    return new KeyHolds(this.store, this.#holdLock, async (key, changes, guard, lease) => await this.write(key, changes, guard, lease))
  }
}
