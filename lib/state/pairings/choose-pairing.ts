/**
 * Which pairing a (store, lock) pair runs on: chosen once, when the plugin builds its state
 * engine. With `matching-lock.ts`, the only code in `state/` that looks at which classes the
 * store and lock are.
 */
import { FileSessionLock } from '../../locks/file-lock.js'
import { MemorySessionLock } from '../../locks/memory-lock.js'
import { PgSessionLock } from '../../locks/pg-lock.js'
import { RedisSessionLock } from '../../locks/redis-lock.js'
import type { SessionLock } from '../../locks/session-lock.js'
import { MemorySessionStore } from '../../sessions/memory-store.js'
import { PgSessionStore } from '../../sessions/pg-store.js'
import { RedisSessionStore } from '../../sessions/redis-store.js'
import { isLockingStore, type SessionStore } from '../../sessions/session-store.js'
import { AnyPairing } from './any-pairing.js'
import { LockingStorePairing } from './locking-store-pairing.js'
import { MemoryPairing } from './memory-pairing.js'
import type { Pairing } from './pairing.js'
import { PgPairing } from './pg-pairing.js'
import { RedisPairing } from './redis-pairing.js'

/**
 * The pairing of `store` and `lock` (`null`: no lock). Both must be the backends of one kind of
 * state for the plugin's whole life. A Redis store and lock must use the same server and database
 * (nothing can check it); a PostgreSQL store and lock pair up on the same pool and prefix.
 */
export function pairingFor (store: SessionStore, lock: SessionLock | null): Pairing {
  if (store instanceof RedisSessionStore && lock instanceof RedisSessionLock) return new RedisPairing(store, lock)
  if (store instanceof PgSessionStore && lock instanceof PgSessionLock && lock.pool === store.pool && lock.prefix === store.prefix) return new PgPairing(store, lock)
  if (isLockingStore(store, lock)) return new LockingStorePairing(store, lock as SessionLock)
  if (ownMemoryStore(store) && (lock === null || ownMemoryLock(lock))) return new MemoryPairing(store, lock as MemorySessionLock | null)
  // Without a lock, holds on the memory store get an in-process lock of their own (see KeyHolds).
  const holdLock = lock ?? (store instanceof MemorySessionStore ? new MemorySessionLock() : null)
  return new AnyPairing(store, lock, takesSources(lock), holdLock)
}

/**
 * Whether the requests on `store` count their backend round trips (the Redis store's commands do:
 * the `fastify_mcp.redis.round_trips` span attribute).
 */
export function countsRoundTrips (store: SessionStore): boolean {
  return store instanceof RedisSessionStore
}

/**
 * Whether `store` reads with the memory store's own `load`: a subclass that overrides it (to fail,
 * count or delay it) is asked through it, never around it.
 */
function ownMemoryStore (store: SessionStore): store is MemorySessionStore {
  return store instanceof MemorySessionStore && store.load === MemorySessionStore.prototype.load
}

/** The same for the memory lock's `acquire`. */
function ownMemoryLock (lock: SessionLock): lock is MemorySessionLock {
  return lock instanceof MemorySessionLock && lock.acquire === MemorySessionLock.prototype.acquire
}

/** Whether `lock` takes an `AbortSource` in place of a signal (the bundled locks). */
function takesSources (lock: SessionLock | null): boolean {
  return lock instanceof RedisSessionLock || lock instanceof PgSessionLock || lock instanceof MemorySessionLock || lock instanceof FileSessionLock
}
