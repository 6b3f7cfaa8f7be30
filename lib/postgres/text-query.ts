/**
 * The plugin's hot statements (take a lease and read, save and release, renew) run through pg as a
 * "submittable" query (`client.query(submittable)`, the interface pg-cursor and pg-query-stream
 * use) rather than pg's own `Query`. Per query, pg's `Query` copies its config through property
 * descriptors, makes an event emitter and a `Result`, asks the server to describe the portal, parses
 * that row description, looks up a type parser per column and builds an object per row. These
 * statements need none of it: their columns are known, read by position, as the server's text.
 * The wire is the same otherwise: a named statement parsed once per connection (pg's own
 * bookkeeping of prepared statements is kept, so pg's queries and these share it), then Bind,
 * Execute, Sync, encoded here into one buffer and written to the socket at once (pg writes each
 * message apart, corked, which Node's stream sends through its writev path). The read timeout,
 * pool checkout, reading and error handling stay pg's.
 */
import type { PgPoolLike } from './pool.js'

/** A statement: its text, and a name that makes it a prepared statement on each connection. */
export interface PgStatement { readonly name: string, readonly text: string }

/** Rows as the server's text, one array of columns each (`null` for SQL NULL). */
export interface PgTextResult {
  rows: Array<Array<string | null>>
  rowCount: number | null
}

/** A value the hot statements send: text, a number, a boolean, NULL, or an array of texts. */
export type PgTextValue = string | number | boolean | null | undefined | ReadonlyArray<string | null>

/** The part of pg's connection a submittable query uses (as pg-cursor does). */
interface PgConnection {
  parsedStatements: Record<string, string>
  submittedNamedStatements?: Record<string, string>
  stream: { writable: boolean, write: (chunk: Buffer) => unknown }
  sendCopyFail (message: string): void
}

/** A client the plugin checked out: `query` takes a submittable and calls its `callback`. */
interface SubmittingClient { query: (query: never) => unknown }

/**
 * The frontend messages of one execution (the protocol's "extended query"): Parse when the
 * statement is new on the connection (no parameter types: the server infers them), Bind of the
 * unnamed portal with every parameter and result as text, Execute of all rows, Sync.
 */
function encode (name: string, text: string | null, values: ReadonlyArray<string | null>): Buffer {
  const nameBytes = Buffer.byteLength(name)
  const textBytes = text === null ? 0 : Buffer.byteLength(text)
  let size = text === null ? 0 : 1 + 4 + nameBytes + 1 + textBytes + 1 + 2
  const bindStart = size
  let bind = 4 + 1 + nameBytes + 1 + 2 + 2 + 2
  const lengths: number[] = new Array(values.length)
  for (let i = 0; i < values.length; i++) {
    const v = values[i] as string | null
    const n = v === null ? -1 : Buffer.byteLength(v)
    lengths[i] = n
    bind += 4 + (n > 0 ? n : 0)
  }
  size += 1 + bind + EXECUTE_SYNC.length
  const buf = Buffer.allocUnsafe(size)
  let o = 0
  if (text !== null) {
    buf[o++] = 0x50 // 'P'
    o = buf.writeInt32BE(4 + nameBytes + 1 + textBytes + 1 + 2, o)
    o += buf.write(name, o, 'utf8'); buf[o++] = 0
    o += buf.write(text, o, 'utf8'); buf[o++] = 0
    o = buf.writeInt16BE(0, o)
  }
  if (o !== bindStart) throw new Error('Parse message length mismatch')
  buf[o++] = 0x42 // 'B'
  o = buf.writeInt32BE(bind, o)
  buf[o++] = 0 // the unnamed portal
  o += buf.write(name, o, 'utf8'); buf[o++] = 0
  o = buf.writeInt16BE(0, o) // every parameter as text
  o = buf.writeInt16BE(values.length, o)
  for (let i = 0; i < values.length; i++) {
    const n = lengths[i] as number
    o = buf.writeInt32BE(n, o)
    if (n > 0) o += buf.write(values[i] as string, o, 'utf8')
  }
  o = buf.writeInt16BE(0, o) // every result column as text
  EXECUTE_SYNC.copy(buf, o)
  return buf
}

/** Execute (the unnamed portal, every row) and Sync. */
const EXECUTE_SYNC = Buffer.from([0x45, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0x53, 0, 0, 0, 4])

/** An element of a text array literal, quoted as pg quotes it. */
function arrayElement (value: string | null): string {
  if (value === null) return 'NULL'
  return `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`
}

/** A parameter as its text (what pg's `prepareValue` makes of these types). */
function paramText (value: PgTextValue): string | null {
  if (value === null || value === undefined) return null
  if (typeof value === 'string') return value
  if (typeof value === 'object') {
    let out = '{'
    for (let i = 0; i < value.length; i++) out += (i === 0 ? '' : ',') + arrayElement(value[i])
    return `${out}}`
  }
  return String(value)
}

/** The affected-row count at the end of a command tag (`UPDATE 3`, `INSERT 0 1`), null if none. */
function tagCount (tag: string | undefined): number | null {
  if (tag === undefined) return null
  const space = tag.lastIndexOf(' ')
  if (space === -1) return null
  const n = Number(tag.slice(space + 1))
  return Number.isInteger(n) ? n : null
}

/** One execution of a named statement (see the module doc). */
class TextQuery {
  readonly name: string
  readonly text: string
  /** Set by pg's pool or client (and wrapped by the client's read timeout), or by {@link pgTextOn}. */
  callback?: (err: Error | null, result?: PgTextResult) => void
  readonly #values: Array<string | null>
  readonly #rows: Array<Array<string | null>> = []
  #rowCount: number | null = null
  #done = false

  constructor (statement: PgStatement, values: readonly PgTextValue[], callback?: (err: Error | null, result?: PgTextResult) => void) {
    this.name = statement.name
    this.text = statement.text
    this.#values = values.map(paramText)
    if (callback !== undefined) this.callback = callback
  }

  /** Writes Parse (first time on this connection), Bind, Execute and Sync in one write. */
  submit (connection: PgConnection): Error | null {
    const submitted = connection.submittedNamedStatements
    const parsed = connection.parsedStatements[this.name] ?? submitted?.[this.name]
    if (parsed !== undefined && parsed !== this.text) {
      return new Error(`Prepared statements must be unique - '${this.name}' was used for a different statement`)
    }
    const message = encode(this.name, parsed === undefined ? this.text : null, this.#values)
    if (parsed === undefined && submitted !== undefined) submitted[this.name] = this.text
    // As pg's own writes: nothing on a socket that is closing (its error or end fails the query).
    if (connection.stream.writable) connection.stream.write(message)
    return null
  }

  handleRowDescription (): void {}

  handleDataRow (msg: { fields: Array<string | null> }): void {
    this.#rows.push(msg.fields)
  }

  handleCommandComplete (msg: { text?: string }): void {
    this.#rowCount = tagCount(msg.text)
  }

  handleEmptyQuery (): void {}
  handlePortalSuspended (): void {}
  handleCopyData (): void {}

  handleCopyInResponse (connection: PgConnection): void {
    connection.sendCopyFail('No source stream defined')
  }

  handleError (err: Error): void {
    if (this.#done) return
    this.#done = true
    this.callback?.(err)
  }

  handleReadyForQuery (): void {
    if (this.#done) return
    this.#done = true
    this.callback?.(null, { rows: this.#rows, rowCount: this.#rowCount })
  }
}

/**
 * pg refuses submittable queries on a client in pipeline mode (`pipeline: true`); there, and for a
 * pool that is not pg's, pg's own query runs with the same result shape: rows as arrays of text.
 */
const TEXT_TYPES = { getTypeParser: () => (value: string) => value }

function fallback (pool: PgPoolLike): boolean {
  const options = (pool as { options?: { pipeline?: unknown } }).options
  return typeof options !== 'object' || options === null || options.pipeline === true
}

function pgQueryConfig (statement: PgStatement, values: readonly PgTextValue[]): Record<string, unknown> {
  return { name: statement.name, text: statement.text, values, rowMode: 'array', types: TEXT_TYPES }
}

/** Runs `statement` on a connection of `pool` (checked out and returned by the pool). */
export async function pgText (pool: PgPoolLike, statement: PgStatement, values: readonly PgTextValue[]): Promise<PgTextResult> {
  if (fallback(pool)) return await (pool.query(pgQueryConfig(statement, values) as never) as unknown as Promise<PgTextResult>)
  return await (pool.query(new TextQuery(statement, values) as never) as unknown as Promise<PgTextResult>)
}

/** Runs `statement` on a client checked out of `pool` (the caller releases it). */
export async function pgTextOn (pool: PgPoolLike, client: SubmittingClient, statement: PgStatement, values: readonly PgTextValue[]): Promise<PgTextResult> {
  if (fallback(pool)) return await (client.query(pgQueryConfig(statement, values) as never) as unknown as Promise<PgTextResult>)
  return await new Promise<PgTextResult>((resolve, reject) => {
    client.query(new TextQuery(statement, values, (err, result) => {
      if (err !== null) reject(err)
      else resolve(result as PgTextResult)
    }) as never)
  })
}
