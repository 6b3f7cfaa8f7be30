/**
 * The session store contract. A session is a flat map of keys to JSON values: protocol keys the
 * plugin keeps (negotiated version, client capabilities, log level, subscriptions, pending requests
 * to the client…) and application keys set through the session handle.
 *
 * Every store implements this small async interface; one contract test suite
 * (`lib/testing/contracts/store-contract.ts`, shipped as `fastify-mcp-http/testing/contracts`) runs against all of them.
 */
import type { AcquireOptions, LeaseFence, SessionLease, SessionLock } from '../locks/session-lock.js'

/** JSON value stored under a session key. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }

/** What `load()` returns: the session's keys and the version they were read at. */
export interface SessionRecord {
  /** All keys of the session. The caller owns the object (stores return a fresh copy). */
  data: Record<string, JsonValue>
  /**
   * Monotonic version, bumped by every successful save. Used to fence writes when a lease may have
   * been lost (see {@link SaveGuard.version}).
   */
  version: number
}

/** The keys one request changed: only these are written back. */
export interface SessionChanges {
  /** Keys to set (whole value replaced). */
  set: Record<string, JsonValue>
  /** Keys to remove. */
  delete: string[]
}

/** Conditions under which a save may be written. */
export interface SaveGuard {
  /**
   * The version the request read. Only checked together with a {@link fence}: the save goes
   * through when the lease is still ours, or when nobody holds the lock and the session is still
   * at this version. Without a fence, a save is last-writer-wins per key.
   */
  version?: number
  /** The lease under which the request ran; stores that cannot check it ignore it. */
  fence?: LeaseFence
}

/**
 * Result of a save:
 * - `ok`: written;
 * - `gone`: the session was destroyed (or expired) since it was read; nothing was written, and it
 *   was not re-created;
 * - `fenced`: the lease was lost and someone else changed the session; nothing was written.
 */
export type SaveResult = 'ok' | 'gone' | 'fenced'

/** Options of one {@link SessionStore.create}. */
export interface CreateOptions {
  /** Idle time-to-live of this record in milliseconds (default: the store's `ttl`). */
  ttl?: number
  /**
   * The client the record counts against (the plugin passes its client key: the principal, else
   * the address, IPv6 by network). A bounded store may use it to choose what goes when full
   * (`MemorySessionStore` evicts from the owner holding the most); others ignore it.
   */
  owner?: string
  /**
   * Idle time-to-live in milliseconds until the record is first loaded or saved (a handshake-era
   * session whose client never came back: it expires soon); from then on `ttl` applies. Stores
   * should honour it, the bundled ones do; the memory store also evicts such records first.
   */
  unusedTtl?: number
}

/** Options every store accepts. */
export interface SessionStoreOptions {
  /** Idle time-to-live of a session in milliseconds (default 3,600,000: one hour). */
  ttl?: number
}

/**
 * The store contract. Implementations: `MemorySessionStore`, `FileSessionStore`,
 * `RedisSessionStore`. A store that is down rejects with an error (the plugin answers 503); it
 * never reports a live session as missing.
 */
export interface SessionStore {
  /** Idle TTL in milliseconds, used by the plugin to report expiry. */
  readonly ttl: number
  /**
   * Creates a session with initial data. Rejects if a session with that id already exists.
   * `options.ttl` gives this record an idle TTL of its own (state handles of a kind with a shorter
   * or longer lifetime than sessions); stores should honour it, the bundled ones do.
   */
  create (id: string, data: Record<string, JsonValue>, options?: CreateOptions): Promise<void>
  /** Reads a session, refreshing its idle TTL. `null` when it does not exist or has expired. */
  load (id: string): Promise<SessionRecord | null>
  /** Writes back the changed keys, honouring the guard. Never re-creates a destroyed session. */
  save (id: string, changes: SessionChanges, guard?: SaveGuard): Promise<SaveResult>
  /** Removes a session. Resolves `true` when it existed. */
  destroy (id: string): Promise<boolean>
  /** Whether a session exists (and has not expired), without refreshing it. */
  exists (id: string): Promise<boolean>
  /**
   * Removes expired sessions and returns their ids. For stores whose backend expires keys itself
   * (Redis) this does nothing and returns `[]`. Safe to call from an out-of-band job.
   */
  gc (): Promise<string[]>
  /**
   * Optional: tells `listener` the ids of sessions the store removed on its own (expired and found
   * on access, swept, evicted, collected by `gc()` whoever calls it), so that the plugin removes
   * what else belongs to them. Returns a function that stops it. A store without it (and whose
   * backend does not expire keys itself) is cleaned after only for the sessions the plugin's own
   * `gcProbability` runs of `gc()` report.
   */
  onExpired? (listener: (ids: string[]) => void): () => void
  /** Releases resources the store created (timers, connections it opened). */
  close? (): Promise<void>
}

/** A lease taken together with the session it protects (see {@link LockingSessionStore}). */
export interface LockedSession {
  /** The lease; release it with {@link LockingSessionStore.saveAndRelease} or `lease.release()`. */
  lease: SessionLease
  /** The session as read under the lease (its TTL was refreshed). */
  record: SessionRecord
}

/**
 * A store that can take a lock's lease and read the session in one backend round trip, and save
 * and release in another (Redis store + Redis lock on the same server: 2 round trips per request
 * instead of 4). Detect it with {@link isLockingStore}.
 */
export interface LockingSessionStore extends SessionStore {
  /** Whether this store can run the fast path with that lock (same backend, compatible kind). */
  canLockWith (lock: SessionLock): boolean
  /**
   * Waits for the session's lease like `lock.acquire()` (same timeout, signal, owner and errors),
   * then reads the session in the same backend call. Resolves `null`, holding nothing, when the
   * session does not exist. The lease behaves like one from `lock.acquire()`: it is renewed, its
   * `signal` aborts when it is lost, and `release()` frees it.
   */
  acquireAndLoad (
    id: string,
    lock: SessionLock,
    options?: AcquireOptions
  ): Promise<LockedSession | null>
  /**
   * Saves the changes fenced by the lease (`guard.version` is the version read; the fence is the
   * lease's own) and releases the lease in the same backend call. The lease is released locally
   * even when the call fails (it then expires in the backend); releasing it again rejects with
   * "not held".
   */
  saveAndRelease (
    id: string,
    changes: SessionChanges,
    guard: SaveGuard,
    lease: SessionLease
  ): Promise<SaveResult>
  /**
   * Optional. For a request that changed nothing: hands the lease and the session as read under it
   * to the next request of this process waiting for the same session, without a backend call
   * (that request's `acquireAndLoad` resolves with them). Returns false, holding on, when it
   * cannot (no waiter, lease lost, passed on too often in a row); the caller then releases the
   * lease as usual.
   */
  passOn? (id: string, lease: SessionLease): boolean
}

/** Whether `store` offers the combined lock + session fast path for `lock`. */
export function isLockingStore (
  store: SessionStore,
  lock: SessionLock | undefined | null
): store is LockingSessionStore {
  const candidate = store as Partial<LockingSessionStore>
  return lock != null &&
    typeof candidate.acquireAndLoad === 'function' &&
    typeof candidate.saveAndRelease === 'function' &&
    typeof candidate.canLockWith === 'function' &&
    candidate.canLockWith(lock)
}

/**
 * A store found a session it cannot decode (a value that is not JSON, a file that is not a session
 * file). Stores reject with it (never with a plain parse error) so that the plugin can tell the
 * client what is wrong: the session cannot be served until it is repaired or expires.
 */
export class SessionDataError extends Error {
  declare readonly sessionId: string
  constructor (sessionId: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'SessionDataError'
    // Not enumerable: a logged error (pino's serializer copies own enumerable fields) never carries the whole id.
    Object.defineProperty(this, 'sessionId', { value: sessionId, enumerable: false })
  }
}

/**
 * Encodes one session value as JSON text. Every store goes through JSON (memory included) so that
 * a value behaves the same in development and behind Redis: the caller's object is copied, and
 * what JSON cannot carry fails here rather than later on another store.
 * @throws {TypeError} when the value has no JSON form (undefined, a function, a symbol).
 */
export function encodeSessionValue (key: string, value: unknown): string {
  const json = JSON.stringify(value)
  if (json === undefined) throw new TypeError(`Session key "${key}" has a value that cannot be stored as JSON.`)
  return json
}
