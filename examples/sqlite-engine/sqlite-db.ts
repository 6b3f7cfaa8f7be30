/**
 * The worked example of docs/your-own-engine.md: session state and its lock in one SQLite file
 * (better-sqlite3, embedded: no service), shared by every process of the app that opens the file.
 * This file opens the database and makes the tables; `sqlite-lock.ts` is the lock,
 * `sqlite-store.ts` the store (with the one-call fast path). Times are `Date.now()`: the processes
 * sharing a file share a clock.
 */
import Database from 'better-sqlite3'

export type SqliteDb = Database.Database

/** Opens (and creates) the database file: WAL, so readers never wait for a writer; a busy wait for writers. */
export function openSqlite (path: string): SqliteDb {
  const db = new Database(path)
  db.pragma('journal_mode = WAL')
  db.pragma('busy_timeout = 5000')
  db.pragma('synchronous = NORMAL')
  db.exec(`
    CREATE TABLE IF NOT EXISTS sessions (
      id TEXT PRIMARY KEY, version INTEGER NOT NULL, expires_at INTEGER NOT NULL,
      ttl INTEGER NOT NULL, unused_ttl INTEGER
    );
    CREATE TABLE IF NOT EXISTS session_keys (
      id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (id, key)
    );
    CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, token TEXT NOT NULL, expires_at INTEGER NOT NULL);
  `)
  return db
}

/** Runs `fn` in a write transaction taken at once (BEGIN IMMEDIATE): no read-then-upgrade deadlock. */
export function writing<T> (db: SqliteDb, fn: () => T): T {
  return db.transaction(fn).immediate()
}
