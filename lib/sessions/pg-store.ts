/**
 * `PgSessionStore`: sessions, state handles and task records shared by every instance, one row of
 * `<prefix>state` each (see `postgres/schema.ts`: each key's JSON text in a jsonb object, the
 * version, the record's own TTL, when it expires). The database's clock keeps the idle TTL;
 * `gc()` deletes the expired rows (an expired row is already gone for every operation).
 *
 * Every operation is one statement (a function where it reads and writes). A save writes only the
 * changed keys, never re-creates a destroyed or expired record and, given a lease's fence, refuses
 * to overwrite a record whose lease was lost and which someone else has since locked or written.
 *
 * With a `PgSessionLock` on the same database and prefix, the PostgreSQL pairing
 * (`state/pairings/pg-pairing.ts`) takes the lease and reads the record in one call of this store,
 * and saves and releases in another: two round trips per locked request.
 */
import { resolvePgPool, type PgPoolLike, type PgResult } from '../postgres/pool.js'
import { DEFAULT_PG_PREFIX, checkPgPrefix, ensureSchema, positioned } from '../postgres/schema.js'
import { pgText, type PgStatement, type PgTextValue } from '../postgres/text-query.js'
import { pgWrite } from '../postgres/write-outcome.js'
import { settleWithin } from '../util/settle.js'
import { DecodedReplies } from './decoded-replies.js'
import { roundTrip } from '../telemetry/index.js'
import {
  SessionDataError, encodeSessionValue,
  type CreateOptions, type JsonValue, type SaveGuard, type SaveResult, type SessionChanges, type SessionRecord, type SessionStore,
  type SessionStoreOptions
} from './session-store.js'
import { DEFAULT_SESSION_TTL, checkTtl } from './ttl.js'

/** Options of {@link PgSessionStore}. */
export interface PgSessionStoreOptions extends SessionStoreOptions {
  /**
   * A pg Pool (never closed by the store), or a connection string from which the store makes a
   * pool of the app's pg with bounded waits (closed by `close()`).
   */
  pool: PgPoolLike | string
  /** Table-name prefix (default `'mcp_'`): the records are rows of `<prefix>state`. */
  prefix?: string
}

/** Most expired rows one `gc()` deletes (it is called again by the next gc run). */
const GC_BATCH = 1000

/** A statement: its text, and a name that makes it a prepared statement on each connection. */
type Statement = PgStatement

/**
 * What take_and_load answered: `status` 1 with the record read under the lease just taken (`data`
 * the row's jsonb as text, `version`), 0 when the lease is busy, 2 when the record does not exist
 * (no lease taken).
 */
export interface TakenRow { status: number, data: string | null, version: string | null }

/** A save's set, encoded: the keys and their JSON texts. */
export type PgFields = [keys: string[], texts: string[]]

/** One record of {@link PgSessionStore.saveManyReleasing}: its save, fenced by the lease `lock` held with `token`. */
export interface PgManyItem { id: string, lock: string, token: string, version: number | null, keys: string[], values: string[], delete: string[] }

/** Sessions in PostgreSQL rows. */
export class PgSessionStore implements SessionStore {
  readonly ttl: number
  /** Table-name prefix. */
  readonly prefix: string
  readonly #pool: PgPoolLike
  readonly #ownsPool: boolean
  readonly #sql: Record<'create' | 'load' | 'save' | 'saveMany' | 'destroy' | 'exists' | 'gc' | 'takeAndLoad', Statement>
  /** The records read last, decoded: one read again unchanged is copied, not parsed (`decoded-replies.ts`). */
  readonly #decoded = new DecodedReplies()
  #schemaReady = false
  #closed = false

  /** @throws {RangeError} for a bad ttl; {@link TypeError} for a bad prefix or pool. */
  constructor (options: PgSessionStoreOptions) {
    this.ttl = checkTtl(options.ttl ?? DEFAULT_SESSION_TTL)
    if (!Number.isInteger(this.ttl)) throw new RangeError('ttl must be an integer number of milliseconds.')
    const p = this.prefix = checkPgPrefix(options.prefix ?? DEFAULT_PG_PREFIX)
    const { pool, owned } = resolvePgPool(options.pool)
    this.#pool = pool
    this.#ownsPool = owned
    const live = 'expires_at > clock_timestamp()'
    const expiresIn = (ms: string): string => `clock_timestamp() + (${ms})::float8 * interval '1 millisecond'`
    this.#sql = {
      // An expired row is not taken: it is replaced, version 0. A never-used record expires by
      // `unusedTtl` ($6) until its first load or save, which set `expires_at` from the ttl again.
      create: {
        name: `${p}state_create`,
        text: `INSERT INTO ${p}state AS s (id, data, next_pos, version, ttl_ms, expires_at)
          VALUES ($1, ${positioned("'{}'::jsonb", '0', '$2::text[]', '$3::text[]')}, cardinality($2::text[]), 0, $4::bigint,
            ${expiresIn('least(coalesce($4::bigint, $5::bigint), coalesce($6::bigint, $5::bigint))')})
          ON CONFLICT (id) DO UPDATE SET data = excluded.data, next_pos = excluded.next_pos, version = 0,
            ttl_ms = excluded.ttl_ms, expires_at = excluded.expires_at
          WHERE s.expires_at <= clock_timestamp()`
      },
      // A read; the idle TTL pushed at most once per least(1 s, ttl/10), unflushed (see schema.ts).
      load: { name: `${p}state_load`, text: `SELECT data, version FROM ${p}load($1, $2) WHERE version IS NOT NULL` },
      save: { name: `${p}state_save`, text: `SELECT ${p}save($1, $2, $3, $4, $5, $6::text[], $7::text[], $8::text[], $9) AS result` },
      // The results as a JSON array (read as text: see postgres/text-query.ts).
      saveMany: { name: `${p}state_save_many`, text: `SELECT to_json(${p}save_many($1::jsonb, $2)) AS result` },
      destroy: { name: `${p}state_destroy`, text: `DELETE FROM ${p}state WHERE id = $1 RETURNING ${live} AS live` },
      exists: { name: `${p}state_exists`, text: `SELECT 1 FROM ${p}state WHERE id = $1 AND ${live}` },
      gc: {
        name: `${p}state_gc`,
        text: `WITH gone AS (
            DELETE FROM ${p}state WHERE id IN (
              SELECT id FROM ${p}state WHERE expires_at <= clock_timestamp() LIMIT ${GC_BATCH} FOR UPDATE SKIP LOCKED)
            RETURNING id),
          stale AS (DELETE FROM ${p}leases WHERE expires_at <= clock_timestamp() - interval '1 minute')
          SELECT id FROM gone`
      },
      takeAndLoad: { name: `${p}state_take_and_load`, text: `SELECT status, data, version FROM ${p}take_and_load($1, $2, $3, $4, $5)` }
    }
  }

  /** The pool this store uses. */
  get pool (): PgPoolLike {
    return this.#pool
  }

  async #query (statement: Statement, values: unknown[]): Promise<Array<Record<string, unknown>>> {
    return (await this.#run(statement, values)).rows
  }

  async #run (statement: Statement, values: unknown[]): Promise<PgResult> {
    if (!this.#schemaReady) await this.#ensureSchema()
    roundTrip()
    return await this.#pool.query({ ...statement, values })
  }

  /** A hot statement, its rows as text (`postgres/text-query.ts`). */
  async #text (statement: Statement, values: PgTextValue[]): Promise<Array<Array<string | null>>> {
    if (!this.#schemaReady) await this.#ensureSchema()
    roundTrip()
    return (await pgText(this.#pool, statement, values)).rows
  }

  /**
   * A save, its one result column as text: its failure tells a refused write from one whose
   * outcome is unknown (`postgres/write-outcome.ts`).
   */
  async #write (statement: Statement, values: PgTextValue[]): Promise<string | null | undefined> {
    if (!this.#schemaReady) await this.#ensureSchema()
    roundTrip()
    const { rows } = await pgWrite(this.#pool, statement, values)
    return rows[0]?.[0]
  }

  async #ensureSchema (): Promise<void> {
    await ensureSchema(this.#pool, this.prefix)
    this.#schemaReady = true
  }

  /** @throws {TypeError} for a value JSON cannot carry. */
  async create (id: string, data: Record<string, JsonValue>, options: CreateOptions = {}): Promise<void> {
    const ttl = options.ttl === undefined ? null : checkTtl(options.ttl)
    if (ttl !== null && !Number.isInteger(ttl)) throw new RangeError('ttl must be an integer number of milliseconds.')
    const unused = options.unusedTtl === undefined ? null : checkTtl(options.unusedTtl)
    if (unused !== null && !Number.isInteger(unused)) throw new RangeError('unusedTtl must be an integer number of milliseconds.')
    const [keys, values] = pgFields(data)
    const { rowCount } = await this.#run(this.#sql.create, [id, keys, values, ttl === this.ttl ? null : ttl, this.ttl, unused])
    // ON CONFLICT … WHERE: nothing written when a live record holds the id.
    if (rowCount !== 1) throw new Error('Session already exists')
  }

  async load (id: string): Promise<SessionRecord | null> {
    const row = (await this.#text(this.#sql.load, [id, this.ttl]))[0]
    return row === undefined ? null : this.decode(id, row[0], row[1])
  }

  /**
   * Writes the changed keys in one call. With `guard.fence` (the lease the request ran under) the
   * save goes through when the lease is still ours, or when nobody holds it and the record is
   * still at `guard.version`; otherwise `'fenced'`.
   */
  async save (id: string, changes: SessionChanges, guard: SaveGuard = {}): Promise<SaveResult> {
    const fence = guard.fence
    const [keys, values] = pgFields(changes.set)
    return await this.#write(this.#sql.save, [id, fence?.key ?? id, fence?.token ?? null, guard.version ?? null, this.ttl, keys, values, changes.delete, false]) as SaveResult
  }

  async destroy (id: string): Promise<boolean> {
    this.#decoded.forget(id)
    const rows = await this.#query(this.#sql.destroy, [id])
    return rows[0]?.live === true
  }

  async exists (id: string): Promise<boolean> {
    return (await this.#query(this.#sql.exists, [id])).length === 1
  }

  /** Deletes expired records (at most 1,000 per call) and returns their ids. */
  async gc (): Promise<string[]> {
    return (await this.#query(this.#sql.gc, [])).map(row => row.id as string)
  }

  /**
   * One try at the lease of lock key `key` with `token` (lease ttl `lockTtl`), reading the record
   * under it in the same call (see {@link TakenRow}).
   * @internal For the store + lock fast path (`state/pairings/pg-pairing.ts`).
   */
  async takeAndLoad (key: string, id: string, token: string, lockTtl: number): Promise<TakenRow> {
    const row = (await this.#text(this.#sql.takeAndLoad, [key, id, token, lockTtl, this.ttl]))[0]
    // The function has OUT parameters: always one row.
    if (row === undefined) throw new Error('take_and_load answered no row')
    return { status: Number(row[0]), data: row[1], version: row[2] }
  }

  /**
   * A row's data and version, as {@link takeAndLoad} read them → the record.
   * @throws {SessionDataError} when the data cannot be decoded.
   * @internal For the store + lock fast path (`state/pairings/pg-pairing.ts`).
   */
  decode (id: string, data: string | null, version: string | null): SessionRecord {
    if (data === null) throw notJson(id)
    return { data: this.#decoded.data(id, data, decodeData), version: Number(version) }
  }

  /**
   * Saves the changed keys (`set`: encoded by {@link pgFields}) fenced by the lease of lock key
   * `key` held with `token`, and releases that lease, in one call.
   * @internal For the store + lock fast path (`state/pairings/pg-pairing.ts`).
   */
  async saveReleasing (id: string, key: string, token: string, set: PgFields, deleted: string[], version: number | undefined): Promise<SaveResult> {
    return await this.#write(this.#sql.save, [id, key, token, version ?? null, this.ttl, set[0], set[1], deleted, true]) as SaveResult
  }

  /**
   * Several records' fenced saves and their leases' releases in one call, all or none: each
   * record's result in order (all `ok`, or the failures and `skipped`).
   * @internal For the store + lock fast path (`state/pairings/pg-pairing.ts`).
   */
  async saveManyReleasing (items: readonly PgManyItem[]): Promise<Array<SaveResult | 'skipped'>> {
    const result = await this.#write(this.#sql.saveMany, [JSON.stringify(items), this.ttl])
    return JSON.parse(result as string) as Array<SaveResult | 'skipped'>
  }

  /** Ends the pool if the store made it. Bounded; twice is fine. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#ownsPool) await settleWithin(this.#pool.end(), 1000, { keepAlive: false })
  }
}

/** The keys and their JSON texts, in the caller's order. @throws {TypeError} for a value JSON cannot carry. */
export function pgFields (data: Record<string, JsonValue>): PgFields {
  const keys = Object.keys(data)
  return [keys, keys.map(key => encodeSessionValue(key, data[key]))]
}

/**
 * A row's data (as text: a jsonb object of each key's `[position, JSON text]`) → the record's
 * data, its keys in the order of their positions; a value that is not JSON text fails.
 */
function decodeData (id: string, text: string): Record<string, JsonValue> {
  let fields: unknown
  try {
    fields = JSON.parse(text)
  } catch (err) {
    throw notJson(id, err)
  }
  if (typeof fields !== 'object' || fields === null || Array.isArray(fields)) throw notJson(id)
  const entries: Array<[key: string, position: number, text: string]> = []
  for (const key of Object.keys(fields)) {
    const field = (fields as Record<string, unknown>)[key]
    if (!Array.isArray(field) || typeof field[0] !== 'number' || typeof field[1] !== 'string') throw notJson(id)
    entries.push([key, field[0], field[1]])
  }
  entries.sort((a, b) => a[1] - b[1])
  const data: Record<string, JsonValue> = {}
  for (const [key, , text] of entries) {
    let value: JsonValue
    try {
      value = JSON.parse(text) as JsonValue
    } catch (err) {
      throw notJson(id, err)
    }
    // An own data property: a key named "__proto__" stays a key.
    if (key === '__proto__') Object.defineProperty(data, key, { value, enumerable: true, writable: true, configurable: true })
    else data[key] = value
  }
  return data
}

function notJson (id: string, cause?: unknown): SessionDataError {
  return new SessionDataError(id, 'Session holds a value that is not JSON', cause === undefined ? undefined : { cause })
}
