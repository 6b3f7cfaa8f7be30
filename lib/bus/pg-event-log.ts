/**
 * The event log on PostgreSQL, for resuming SSE streams on any instance: an append table with a
 * cursor. `<prefix>streams` holds each stream's session, its last sequence number (the cursor)
 * and when it expires; `<prefix>events` its events, numbered by the cursor. Bounded by length
 * (the oldest events beyond `maxEvents` are deleted by the append that adds one) and age (a
 * stream expires `ttl` ms after its last write; expired streams are deleted as new ones open, and
 * are gone for replays at once). Each write is one call of `<prefix>event_write`.
 *
 * An ended session leaves nothing behind, and a writer still running after the end must not
 * create its streams again. A write therefore checks, in the same call, that the session may
 * still write:
 * - with `guardByStore` (the plugin sets it when the sessions live in a `PgSessionStore` on the
 *   same database and prefix): the session's row must be live; nothing is kept for the end;
 * - without: `dropSession` leaves a row in `<prefix>ended` for `ttl` ms that refuses writes.
 *
 * A replay reads from the last event the client saw, inclusive: its presence proves the stream
 * and the id, and a replay from before the kept window (its event deleted) finds nothing.
 */
import type { PgPoolLike } from '../postgres/pool.js'
import { DEFAULT_PG_PREFIX, checkPgPrefix, ensureSchema } from '../postgres/schema.js'
import { parseEventId, type EventLog, type EventLogOptions, type Replay } from './event-log.js'

/** Options of {@link PgEventLog}. */
export interface PgEventLogOptions extends EventLogOptions {
  /** A pg Pool; never ended by the log. */
  pool: PgPoolLike
  /** Table-name prefix (default `'mcp_'`). */
  prefix?: string
  /** Writes need the session's live row in `<prefix>state` (see the module doc). */
  guardByStore?: boolean
}

/** Event log in PostgreSQL tables (see the module doc). */
export class PgEventLog implements EventLog {
  readonly prefix: string
  readonly #pool: PgPoolLike
  readonly #maxEvents: number
  readonly #ttl: number
  readonly #guardByStore: boolean
  #schemaReady = false

  constructor (options: PgEventLogOptions) {
    this.#pool = options.pool
    this.prefix = checkPgPrefix(options.prefix ?? DEFAULT_PG_PREFIX)
    this.#maxEvents = options.maxEvents ?? 1000
    this.#ttl = options.ttl ?? 300_000
    this.#guardByStore = options.guardByStore === true
  }

  async #query (name: string, text: string, values: unknown[]): Promise<Array<Record<string, unknown>>> {
    if (!this.#schemaReady) {
      await ensureSchema(this.#pool, this.prefix)
      this.#schemaReady = true
    }
    return (await this.#pool.query({ name: `${this.prefix}${name}`, text, values })).rows
  }

  async #write (sessionId: string, streamId: string, kind: 's' | 'd' | 'e', data: string): Promise<string | null> {
    const rows = await this.#query('event_write', `SELECT ${this.prefix}event_write($1, $2, $3, $4, $5, $6, $7) AS seq`,
      [sessionId, streamId, kind, data, this.#maxEvents, this.#ttl, this.#guardByStore])
    const seq = rows[0]?.seq
    return seq === null || seq === undefined ? null : `${streamId}_${String(seq)}`
  }

  async open (sessionId: string, streamId: string): Promise<string | null> {
    return await this.#write(sessionId, streamId, 's', '')
  }

  async append (sessionId: string, streamId: string, data: string): Promise<string | null> {
    return await this.#write(sessionId, streamId, 'd', data)
  }

  async finish (sessionId: string, streamId: string): Promise<void> {
    await this.#write(sessionId, streamId, 'e', '')
  }

  async replay (sessionId: string, lastEventId: string): Promise<Replay | null> {
    const parsed = parseEventId(lastEventId)
    if (parsed === null) return null
    const p = this.prefix
    const rows = await this.#query('event_replay', `SELECT e.seq, e.kind, e.data FROM ${p}events e JOIN ${p}streams s ON s.id = e.stream
      WHERE s.id = $1 AND s.session = $2 AND s.expires_at > clock_timestamp() AND e.seq >= $3 ORDER BY e.seq`,
    [parsed.streamId, sessionId, parsed.seq])
    if (rows.length === 0 || Number(rows[0]?.seq) !== parsed.seq) return null
    const events: Replay['events'] = []
    let finished = false
    for (const row of rows.slice(1)) {
      if (row.kind === 'e') { finished = true; continue }
      if (row.kind === 'd') events.push({ id: `${parsed.streamId}_${String(row.seq)}`, data: row.data as string })
    }
    return { streamId: parsed.streamId, events, finished }
  }

  async dropSession (sessionId: string): Promise<void> {
    const p = this.prefix
    if (this.#guardByStore) {
      await this.#query('event_drop', `DELETE FROM ${p}streams WHERE session = $1`, [sessionId])
      return
    }
    await this.#query('event_drop_mark', `WITH gone AS (DELETE FROM ${p}streams WHERE session = $1)
      INSERT INTO ${p}ended (session, until) VALUES ($1, clock_timestamp() + $2::float8 * interval '1 millisecond')
      ON CONFLICT (session) DO UPDATE SET until = excluded.until`, [sessionId, this.#ttl])
  }
}
