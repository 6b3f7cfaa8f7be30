/**
 * The PostgreSQL pool an app hands to the plugin, as a structural type (the plugin's declarations
 * import nothing from pg), and the pool the plugin makes from a connection string: bounded waits
 * everywhere, so that a database that is down or a pool that is exhausted answers within seconds.
 */
import { loadPg } from './pg-module.js'
import { postgresUrlProblem } from '../util/url-shape.js'

/** What a query resolves to (the part of pg's `QueryResult` the plugin reads). */
export interface PgResult {
  rows: Array<Record<string, unknown>>
  rowCount: number | null
}

/** A query as pg takes it: a name makes it a prepared statement on each connection. */
export interface PgQuery {
  name?: string
  text: string
  values?: unknown[]
}

/**
 * Keeps a checked-out connection's `error` events from becoming uncaught exceptions: pg emits one
 * on a connection that ends under a query (the query's own rejection says what happened), and a
 * pool listens only to its idle connections. Returns the function that stops listening, to call
 * before the connection is released.
 */
export function quietErrors (client: PgClientLike): () => void {
  const quiet = (): void => {}
  client.on('error', quiet)
  return () => { client.off?.('error', quiet) }
}

/** One connection checked out of a pool (the bus's listening connection). */
export interface PgClientLike {
  query (query: PgQuery | string, values?: unknown[]): Promise<PgResult>
  on (event: string, listener: (...args: any[]) => void): unknown
  off? (event: string, listener: (...args: any[]) => void): unknown
  removeListener (event: string, listener: (...args: any[]) => void): unknown
  /** Returns it to the pool; `true` (or an error) destroys it instead. */
  release (destroy?: boolean | Error): void
}

/** A pg `Pool` (or anything with its shape). */
export interface PgPoolLike {
  query (query: PgQuery | string, values?: unknown[]): Promise<PgResult>
  connect (): Promise<PgClientLike>
  on (event: string, listener: (...args: any[]) => void): unknown
  end (): Promise<void>
}

/** Whether `value` looks like a pg Pool. */
export function isPgPool (value: unknown): value is PgPoolLike {
  const pool = value as Partial<PgPoolLike> | null
  return typeof pool === 'object' && pool !== null && typeof pool.query === 'function' && typeof pool.connect === 'function'
}

/**
 * Settings of a pool the plugin makes: a connection that cannot be had within 5 s (database down,
 * pool exhausted) rejects the query, which the plugin answers with a 503; a statement that runs
 * 10 s is cancelled by the server.
 */
export const POOL_DEFAULTS = {
  max: 10,
  connectionTimeoutMillis: 5000,
  idleTimeoutMillis: 30_000,
  statement_timeout: 10_000,
  query_timeout: 15_000,
  application_name: 'fastify-mcp-http'
} as const

/**
 * A pool of the app's pg for `connectionString`, with {@link POOL_DEFAULTS} under `overrides`.
 * Errors of idle connections (the server restarted) are dropped here: pg removes the connection,
 * and the next query opens a new one.
 */
export function createPgPool (connectionString: string, overrides: Record<string, unknown> = {}): PgPoolLike {
  const { Pool } = loadPg()
  const problem = postgresUrlProblem(connectionString)
  if (problem !== null) throw new TypeError(`PostgreSQL connection string ${problem}`)
  const pool = new Pool({ ...POOL_DEFAULTS, ...overrides, connectionString }) as PgPoolLike
  pool.on('error', () => {})
  return pool
}

/**
 * A backend's `pool` option: a pool of the app's (never ended by the backend), or a connection
 * string, from which a pool is made (`owned`: the backend ends it on close).
 * @throws {TypeError} for anything else.
 */
export function resolvePgPool (option: PgPoolLike | string): { pool: PgPoolLike, owned: boolean } {
  if (typeof option === 'string') return { pool: createPgPool(option), owned: true }
  if (isPgPool(option)) return { pool: option, owned: false }
  throw new TypeError('pool must be a pg Pool or a connection string.')
}
