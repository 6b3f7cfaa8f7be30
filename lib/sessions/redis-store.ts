/**
 * `RedisSessionStore`: sessions shared by every instance, one hash per session at
 * `<prefix>{<sid>}:s`. Each session key is a hash field holding its JSON text; the reserved field
 * `\0v` holds the version. Redis keeps the idle TTL (PEXPIRE on create, load and save), so `gc()`
 * has nothing to do.
 *
 * Every operation is one round trip (a Lua script where it reads and writes). A save never
 * re-creates a destroyed session and, given a lease's fence, refuses to overwrite a session whose
 * lease was lost and which someone else has since locked or written (see `SaveGuard`).
 *
 * With a `RedisSessionLock` on the same Redis, `acquireAndLoad()` and `saveAndRelease()` make a
 * locked request cost two round trips instead of four (see `LockingSessionStore`), and `passOn()`
 * lets a request that changed nothing hand the lease to the next one queued in its process for
 * none.
 */
import { RedisSessionLock, kAcquireWith, kPassOn } from '../locks/redis-lock.js'
import type { AcquireOptions, SessionLease, SessionLock } from '../locks/session-lock.js'
import { DEFAULT_KEY_PREFIX, RESERVED_FIELD_PREFIX, VERSION_FIELD, assertKeyPrefix, lockKey, sessionKey } from '../redis/keys.js'
import { defineScripts, type RedisClient } from '../redis/scripts.js'
import { DEFAULT_SESSION_TTL, checkTtl } from './memory-store.js'
import {
  encodeSessionValue,
  type JsonValue, type LockedSession, type LockingSessionStore, type SaveGuard, type SaveResult,
  type SessionChanges, type SessionRecord, type SessionStoreOptions
} from './session-store.js'

/** Options of {@link RedisSessionStore}. */
export interface RedisSessionStoreOptions extends SessionStoreOptions {
  /** An ioredis client (standalone, Sentinel or Cluster). The store never closes it. */
  redis: RedisClient
  /** Key prefix (default `'mcp:'`). */
  prefix?: string
}

/** Sessions in Redis hashes. */
export class RedisSessionStore implements LockingSessionStore {
  readonly ttl: number
  /** Key prefix. */
  readonly prefix: string
  readonly #redis: RedisClient
  /**
   * The session as read under each lease of the fast path (the raw HGETALL reply), for passing it
   * on: every holder decodes its own copy, so what one request mutated without saving never
   * reaches the next.
   */
  readonly #read = new WeakMap<SessionLease, string[]>()

  constructor (options: RedisSessionStoreOptions) {
    this.ttl = checkTtl(options.ttl ?? DEFAULT_SESSION_TTL)
    if (!Number.isInteger(this.ttl)) throw new RangeError('ttl must be an integer number of milliseconds.')
    const prefix = options.prefix ?? DEFAULT_KEY_PREFIX
    assertKeyPrefix(prefix)
    this.prefix = prefix
    if (typeof options.redis?.defineCommand !== 'function') throw new TypeError('redis must be an ioredis client.')
    this.#redis = options.redis
    defineScripts(this.#redis)
  }

  /** @throws {TypeError} for a key starting with NUL (reserved) or a value JSON cannot carry. */
  async create (id: string, data: Record<string, JsonValue>): Promise<void> {
    const pairs: string[] = []
    for (const key of Object.keys(data)) pairs.push(checkKey(key), encodeSessionValue(key, data[key]))
    const created = await this.#redis.mcpSessionCreate(sessionKey(this.prefix, id), this.ttl, ...pairs)
    if (created !== 1) throw new Error(`Session ${id} already exists`)
  }

  async load (id: string): Promise<SessionRecord | null> {
    const fields = await this.#redis.mcpSessionLoad(sessionKey(this.prefix, id), this.ttl)
    return fields === null ? null : decode(fields)
  }

  /**
   * Writes the changed keys in one script. With `guard.fence` (the lease the request ran under) the
   * save goes through when the lease is still ours, or when nobody holds it and the session is
   * still at `guard.version`; otherwise `'fenced'`.
   */
  async save (id: string, changes: SessionChanges, guard: SaveGuard = {}): Promise<SaveResult> {
    const fence = guard.fence
    return await this.#redis.mcpSessionSave(
      sessionKey(this.prefix, id),
      fence?.key ?? lockKey(this.prefix, id),
      ...this.#saveArguments(changes, fence?.token ?? '', guard.version))
  }

  async destroy (id: string): Promise<boolean> {
    return await this.#redis.del(sessionKey(this.prefix, id)) === 1
  }

  async exists (id: string): Promise<boolean> {
    return await this.#redis.exists(sessionKey(this.prefix, id)) === 1
  }

  /** Redis expires sessions itself: nothing to do. */
  async gc (): Promise<string[]> {
    return []
  }

  /**
   * True for a `RedisSessionLock`. Both must use the same Redis server and database (the store
   * cannot check it): the fast-path scripts run on the lock's client and touch the session too.
   */
  canLockWith (lock: SessionLock): boolean {
    return lock instanceof RedisSessionLock
  }

  /**
   * Waits for the session's lease (as `lock.acquire()` does: FIFO, backoff, timeout, signal,
   * owner, errors) where each try is one script: `SET NX PX` of the lease, then HGETALL and
   * PEXPIRE of the session. Resolves null, holding nothing, when the session does not exist.
   */
  async acquireAndLoad (id: string, lock: SessionLock, options: AcquireOptions = {}): Promise<LockedSession | null> {
    if (!(lock instanceof RedisSessionLock)) throw new TypeError('acquireAndLoad needs a RedisSessionLock')
    const session = sessionKey(this.prefix, id)
    const taken = await lock[kAcquireWith]<string[]>(id, options, async (client, key, token) => {
      const reply = await client.mcpAcquireAndLoad(key, session, token, lock.ttl, this.ttl)
      if (reply[0] === 1) return { status: 'taken', value: reply[1] }
      return reply[0] === 2 ? { status: 'missing' } : { status: 'busy' }
    }, (handed) => handed instanceof PassedSession && handed.store === this ? { value: handed.fields } : null)
    if (taken === null) return null
    this.#read.set(taken.lease, taken.value)
    return { lease: taken.lease, record: decode(taken.value) }
  }

  /**
   * Passes an unchanged session and its lease to the next request of this process waiting for it
   * (no round trip: nobody else can have written the session while the lease was held, since
   * every write goes through it). False when the lease cannot be passed on; release it then.
   */
  passOn (id: string, lease: SessionLease): boolean {
    const fields = this.#read.get(lease)
    if (fields === undefined) return false
    if (!RedisSessionLock[kPassOn](lease, new PassedSession(this, fields))) return false
    this.#read.delete(lease)
    return true
  }

  /**
   * Fenced save (by the lease's token, and `guard.version`) plus compare-and-delete of the lease,
   * in one script on the lock's client. The lease ends here even if the call fails (it then
   * expires in Redis after the lock's ttl).
   * @throws {SessionLockError} "not held" for a lease released already.
   */
  async saveAndRelease (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease): Promise<SaveResult> {
    const args = this.#saveArguments(changes, '', guard.version) // checks keys/values before the lease ends
    return await RedisSessionLock.releaseWith(lease, async (client, key, token) => {
      args[1] = token
      return await client.mcpSaveAndRelease(sessionKey(this.prefix, id), key, ...args)
    })
  }

  /** ARGV of the save scripts: ttl, token, version read, then the changes. */
  #saveArguments (changes: SessionChanges, token: string, version: number | undefined): Array<string | number> {
    const args: Array<string | number> = [this.ttl, token, version === undefined ? '' : String(version)]
    const set = Object.keys(changes.set)
    args.push(set.length)
    for (const key of set) args.push(checkKey(key), encodeSessionValue(key, changes.set[key]))
    for (const key of changes.delete) args.push(checkKey(key))
    return args
  }
}

/**
 * What `passOn` hands to the next holder: the session as read, and the store that read it (the
 * lock hands it on for the same session id, so the store and the id name the same hash).
 */
class PassedSession {
  constructor (readonly store: RedisSessionStore, readonly fields: string[]) {}
}

function checkKey (key: string): string {
  if (key.startsWith(RESERVED_FIELD_PREFIX)) throw new TypeError('Session keys starting with a NUL character are reserved.')
  return key
}

/** A flat HGETALL reply → the record. Reserved fields are not data. */
function decode (fields: string[]): SessionRecord {
  let version = 0
  const data: Array<[string, JsonValue]> = []
  for (let i = 0; i < fields.length; i += 2) {
    const field = fields[i] as string
    const value = fields[i + 1] as string
    if (field === VERSION_FIELD) version = Number(value)
    else if (!field.startsWith(RESERVED_FIELD_PREFIX)) data.push([field, JSON.parse(value)])
  }
  // fromEntries defines own properties: a key named "__proto__" stays a plain key.
  return { data: Object.fromEntries(data), version }
}
