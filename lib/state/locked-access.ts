/**
 * Lock + store in one backend call each, where a (store, lock) pair can do it: the state scope
 * takes the lease and reads the state in one call, and saves and releases in another. Which pairs
 * can is decided here, once per plugin.
 */
import { RedisSessionLock } from '../locks/redis-lock.js'
import type { LocalAcquireOptions, SessionLease, SessionLock } from '../locks/session-lock.js'
import { RedisSessionStore } from '../sessions/redis-store.js'
import {
  isLockingStore,
  type LockedSession, type SaveGuard, type SaveResult, type SessionChanges, type SessionStore
} from '../sessions/session-store.js'
import { RedisFastPath } from './redis-fast-path.js'

/** The combined operations (see the module doc). */
export interface LockedAccess {
  /**
   * Waits for the key's lease like `lock.acquire()` (same timeout, signal, owner and errors), then
   * reads the state in the same backend call. Resolves `null`, holding nothing, when the state does
   * not exist.
   */
  acquireAndLoad (id: string, options?: LocalAcquireOptions): Promise<LockedSession | null>
  /** Saves fenced by the lease and releases it in the same call; the lease ends even on failure. */
  saveAndRelease (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease): Promise<SaveResult>
  /**
   * For a request that changed nothing: hands the lease and the state as read under it to the next
   * request of this process waiting for the same key, without a backend call. False, holding on,
   * when it cannot; the caller then releases the lease as usual.
   */
  passOn (id: string, lease: SessionLease): boolean
}

/** The combined operations of `store` with `lock`, or `null` when the pair has none. */
export function lockedAccess (store: SessionStore, lock: SessionLock | null): LockedAccess | null {
  if (lock === null) return null
  if (store instanceof RedisSessionStore && lock instanceof RedisSessionLock) return new RedisFastPath(store, lock)
  if (!isLockingStore(store, lock)) return null
  // A custom store that implements the LockingSessionStore contract for this lock.
  return {
    // Not a bundled lock (takesSources in state-scope.ts): the options' signal is a real one.
    acquireAndLoad: async (id, options) => await store.acquireAndLoad(id, lock, options as { signal?: AbortSignal }),
    saveAndRelease: async (id, changes, guard, lease) => await store.saveAndRelease(id, changes, guard, lease),
    passOn: (id, lease) => store.passOn?.(id, lease) === true
  }
}
