/**
 * `SqliteSessionStore`: the store of the worked example (docs/your-own-engine.md), a row per record
 * and a row per key in the SQLite file its `SqliteSessionLock` shares. What the store contract asks,
 * and how:
 * - only the changed keys are written (an upsert per set key, a delete per deleted one), so two
 *   requests that changed different keys both keep their change;
 * - a save or a take finds the record row or answers `gone`: nothing ever inserts a record but
 *   `create`, so a destroyed or expired record is never brought back;
 * - every value goes through JSON text both ways: a load is the caller's own copy;
 * - fenced: with the lease's token, a save goes through only while that lease row is ours, or when
 *   nobody holds the key and the record is still at the version read; else `fenced`.
 * It implements `LockingSessionStore`: lease + read in one transaction, save + release in another.
 */
import type { CreateOptions, JsonValue, LockedSession, LockingSessionStore, SaveGuard, SaveResult, SessionChanges, SessionLease, SessionLock, SessionRecord } from '../../lib/index.js'
import { writing, type SqliteDb } from './sqlite-db.js'
import { SqliteSessionLock, type SqliteLease } from './sqlite-lock.js'

/** Options of {@link SqliteSessionStore}. */
export interface SqliteSessionStoreOptions {
  db: SqliteDb
  /** Idle TTL of a record in ms (default one hour). */
  ttl?: number
}

/** JSON text of a value; what JSON cannot carry (undefined, a function) is refused before anything is written. */
function encode (key: string, value: unknown): string {
  const json = JSON.stringify(value)
  if (json === undefined) throw new TypeError(`Session key "${key}" has a value that cannot be stored as JSON.`)
  return json
}

interface Row { version: number, expires_at: number, ttl: number, unused_ttl: number | null }

/** See the module doc. */
export class SqliteSessionStore implements LockingSessionStore {
  readonly db: SqliteDb
  readonly ttl: number

  constructor (options: SqliteSessionStoreOptions) {
    this.db = options.db
    this.ttl = options.ttl ?? 3_600_000
  }

  async create (id: string, data: Record<string, JsonValue>, options: CreateOptions = {}): Promise<void> {
    const encoded = Object.entries(data).map(([key, value]) => [key, encode(key, value)] as const)
    const ttl = options.ttl ?? this.ttl
    writing(this.db, () => {
      const now = Date.now()
      const row = this.#row(id)
      if (row !== undefined && row.expires_at > now) throw new Error(`Session ${id.slice(0, 8)}… already exists.`)
      this.#remove(id)
      this.db.prepare('INSERT INTO sessions (id, version, expires_at, ttl, unused_ttl) VALUES (?, 0, ?, ?, ?)')
        .run(id, now + (options.unusedTtl ?? ttl), ttl, options.unusedTtl ?? null)
      const insert = this.db.prepare('INSERT INTO session_keys (id, key, value) VALUES (?, ?, ?)')
      for (const [key, value] of encoded) insert.run(id, key, value)
    })
  }

  async load (id: string): Promise<SessionRecord | null> {
    return writing(this.db, () => this.#load(id))
  }

  async save (id: string, changes: SessionChanges, guard: SaveGuard = {}): Promise<SaveResult> {
    const encoded = Object.entries(changes.set).map(([key, value]) => [key, encode(key, value)] as const)
    return writing(this.db, () => this.#save(id, encoded, changes.delete, guard))
  }

  async destroy (id: string): Promise<boolean> {
    return writing(this.db, () => {
      const row = this.#row(id)
      this.#remove(id)
      return row !== undefined && row.expires_at > Date.now()
    })
  }

  async exists (id: string): Promise<boolean> {
    const row = this.#row(id)
    return row !== undefined && row.expires_at > Date.now()
  }

  async gc (): Promise<string[]> {
    return writing(this.db, () => {
      const ids = (this.db.prepare('SELECT id FROM sessions WHERE expires_at <= ?').all(Date.now()) as Array<{ id: string }>).map(r => r.id)
      for (const id of ids) this.#remove(id)
      return ids
    })
  }

  canLockWith (lock: SessionLock): boolean {
    return lock instanceof SqliteSessionLock && lock.db === this.db
  }

  async acquireAndLoad (id: string, lock: SessionLock, options: Parameters<SessionLock['acquire']>[1] = {}): Promise<LockedSession | null> {
    const taken = await (lock as SqliteSessionLock).acquireAndRead(id, options, () => this.#load(id))
    return taken === null ? null : { lease: taken.lease, record: taken.read as SessionRecord }
  }

  async saveAndRelease (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease): Promise<SaveResult> {
    const own = lease as SqliteLease
    try {
      const encoded = Object.entries(changes.set).map(([key, value]) => [key, encode(key, value)] as const)
      return writing(this.db, () => {
        const result = this.#save(id, encoded, changes.delete, { version: guard.version, fence: own.fence })
        this.db.prepare('DELETE FROM leases WHERE id = ? AND token = ?').run(id, own.fence.token)
        return result
      })
    } finally {
      own.settled() // released here even when the write failed (the row then expires)
    }
  }

  #row (id: string): Row | undefined {
    return this.db.prepare('SELECT version, expires_at, ttl, unused_ttl FROM sessions WHERE id = ?').get(id) as Row | undefined
  }

  #remove (id: string): void {
    this.db.prepare('DELETE FROM sessions WHERE id = ?').run(id)
    this.db.prepare('DELETE FROM session_keys WHERE id = ?').run(id)
  }

  /** Inside a transaction: the record (refreshed), or `null` when missing or expired. */
  #load (id: string): SessionRecord | null {
    const now = Date.now()
    const row = this.#row(id)
    if (row === undefined || row.expires_at <= now) return null
    this.db.prepare('UPDATE sessions SET expires_at = ?, unused_ttl = NULL WHERE id = ?').run(now + row.ttl, id)
    const data: Record<string, JsonValue> = {}
    for (const { key, value } of this.db.prepare('SELECT key, value FROM session_keys WHERE id = ? ORDER BY rowid').all(id) as Array<{ key: string, value: string }>) {
      // defineProperty: a key named "__proto__" stays a plain key.
      Object.defineProperty(data, key, { value: JSON.parse(value) as JsonValue, enumerable: true, writable: true, configurable: true })
    }
    return { data, version: row.version }
  }

  /**
   * Inside a save's transaction: whether a save under `guard.fence` may write. Yes while that lease
   * row is ours and live; or when nobody holds the key (no row, or an expired one) and the record
   * is still at the version the holder read (nobody wrote since). Protected only so that
   * test/testing/fixtures/broken-engines.ts can show what ignoring it costs.
   */
  protected fenceLetsThrough (id: string, guard: SaveGuard, version: number, now: number): boolean {
    const lease = this.db.prepare('SELECT token, expires_at FROM leases WHERE id = ?').get(id) as { token: string, expires_at: number } | undefined
    const ours = lease !== undefined && lease.token === guard.fence?.token && lease.expires_at > now
    const free = lease === undefined || lease.expires_at <= now
    return ours || (free && guard.version === version)
  }

  /** Inside a transaction: the fence, then only the changed keys. */
  #save (id: string, set: ReadonlyArray<readonly [string, string]>, del: string[], guard: SaveGuard): SaveResult {
    const now = Date.now()
    const row = this.#row(id)
    if (row === undefined || row.expires_at <= now) return 'gone'
    if (guard.fence !== undefined && !this.fenceLetsThrough(id, guard, row.version, now)) return 'fenced'
    const upsert = this.db.prepare('INSERT INTO session_keys (id, key, value) VALUES (?, ?, ?) ON CONFLICT (id, key) DO UPDATE SET value = excluded.value')
    for (const [key, value] of set) upsert.run(id, key, value)
    const remove = this.db.prepare('DELETE FROM session_keys WHERE id = ? AND key = ?')
    for (const key of del) remove.run(id, key)
    this.db.prepare('UPDATE sessions SET version = version + 1, expires_at = ?, unused_ttl = NULL WHERE id = ?').run(now + row.ttl, id)
    return 'ok'
  }
}
