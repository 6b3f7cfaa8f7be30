/**
 * The lock a store gets when the `sessions.lock` option is not given: the one that serializes
 * requests as far as the store is shared. One row per bundled store; a store of the app's own
 * gets the in-process lock, with a warning that it serializes within one process only.
 */
import { FileSessionLock } from '../../locks/file-lock.js'
import { MemorySessionLock } from '../../locks/memory-lock.js'
import { PgSessionLock } from '../../locks/pg-lock.js'
import { RedisSessionLock } from '../../locks/redis-lock.js'
import type { SessionLock } from '../../locks/session-lock.js'
import { FileSessionStore } from '../../sessions/file-store.js'
import { MemorySessionStore } from '../../sessions/memory-store.js'
import { PgSessionStore } from '../../sessions/pg-store.js'
import { RedisSessionStore } from '../../sessions/redis-store.js'
import type { SessionStore } from '../../sessions/session-store.js'

/** The default lock of a store, and what to warn about it at start-up (if anything). */
export interface MatchedLock {
  lock: SessionLock
  warning?: string
}

/**
 * The lock matching `store` (see the module doc). The lock is the plugin's: it closes it (the Redis
 * lock only releases its leases; the store's client stays the app's).
 * @throws {SessionLockError} for a file store when the file lock's native addon cannot load.
 */
export function matchingLock (store: SessionStore): MatchedLock {
  if (store instanceof MemorySessionStore) return { lock: new MemorySessionLock() }
  if (store instanceof FileSessionStore) return { lock: new FileSessionLock({ dir: store.lockDir }) }
  if (store instanceof RedisSessionStore) return { lock: new RedisSessionLock({ redis: store.client, prefix: store.prefix }) }
  // On the store's pool and tables: the store then takes the lease and reads in one call.
  if (store instanceof PgSessionStore) return { lock: new PgSessionLock({ pool: store.pool, prefix: store.prefix }) }
  return {
    lock: new MemorySessionLock(),
    warning: 'fastify-mcp-http: sessions.store is not a bundled store and sessions.lock is not set; requests on one session or ' +
      'state handle are serialized within this process only. Give a lock shared by every instance (or lock: false to run them concurrently).'
  }
}
