/**
 * `PgLimitBackend`: buckets and leases of tool calls in PostgreSQL, shared by every instance. One
 * check is one call of `<prefix>limit_acquire` (bucket and cap together, under a transaction-level
 * advisory lock of the key, so concurrent checks of one key are serialized); a renewal and a
 * release are one statement each. The buckets are GCRA token buckets as in the Redis backend
 * (`redis-scripts.ts`): `<prefix>buckets` holds each key's theoretical arrival time (µs, the
 * database's clock) and expires when the bucket is full again; `<prefix>slots` the leases of
 * calls in flight. Rows that ran out are deleted a few at a time by every check, so a flood of
 * distinct callers leaves nothing behind for long.
 *
 * Failing fast: a check that takes longer than `timeout` rejects (`bounded.ts`) (the limiter then applies its
 * `onBackendError`); a lease it may still have taken is released when the late answer arrives.
 */
import type { PgPoolLike } from '../postgres/pool.js'
import { DEFAULT_PG_PREFIX, checkPgPrefix, ensureSchema } from '../postgres/schema.js'
import { ALLOWED, type LimitBackend, type LimitDecision, type LimitSpec } from './backend.js'
import { bounded } from './bounded.js'

/** Options of {@link PgLimitBackend}. */
export interface PgLimitBackendOptions {
  /** A pg Pool; never ended by the backend. */
  pool: PgPoolLike
  /** Table-name prefix (default `'mcp_'`). */
  prefix?: string
  /** Milliseconds a check may take before it counts as a backend failure (default 1,000; 0 = unbounded). */
  timeout?: number
}

/** Buckets and leases in PostgreSQL (see the module doc). */
export class PgLimitBackend implements LimitBackend {
  readonly prefix: string
  readonly timeout: number
  readonly #pool: PgPoolLike
  #schemaReady = false

  /** @throws {TypeError} for a bad prefix; {RangeError} for a negative timeout. */
  constructor (options: PgLimitBackendOptions) {
    this.prefix = checkPgPrefix(options.prefix ?? DEFAULT_PG_PREFIX)
    const timeout = options.timeout ?? 1000
    if (!Number.isInteger(timeout) || timeout < 0) throw new RangeError('timeout must be an integer greater than or equal to 0.')
    this.timeout = timeout
    this.#pool = options.pool
  }

  async #query (name: string, text: string, values: unknown[]): Promise<{ rows: Array<Record<string, unknown>>, rowCount: number | null }> {
    if (!this.#schemaReady) {
      await ensureSchema(this.#pool, this.prefix)
      this.#schemaReady = true
    }
    return await this.#pool.query({ name: `${this.prefix}${name}`, text, values })
  }

  async acquire (key: string, spec: LimitSpec, callId: string): Promise<LimitDecision> {
    const work = this.#query('limit_acquire', `SELECT ok, kind, retry_ms FROM ${this.prefix}limit_acquire($1, $2, $3, $4, $5, $6)`,
      [key, spec.intervalUs, spec.burst, spec.concurrency, spec.leaseMs, callId])
    const { rows } = await bounded(work, this.timeout, (late) => {
      // Answered after we gave up on it: a lease it took is nobody's.
      if (late.rows[0]?.ok === true && spec.concurrency > 0) this.release(key, callId).catch(() => {})
    })
    const row = rows[0] as { ok: boolean, kind: 'rate' | 'concurrency', retry_ms: string }
    if (row.ok) return ALLOWED
    return { ok: false, limit: row.kind, retryAfterMs: Number(row.retry_ms) }
  }

  async renew (key: string, callId: string, leaseMs: number): Promise<boolean> {
    // A lease that ran out is not revived (its slot may have been given to another call).
    const { rowCount } = await this.#query('limit_renew', `UPDATE ${this.prefix}slots
      SET expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond'
      WHERE key = $1 AND holder = $2 AND expires_at > clock_timestamp()`, [key, callId, leaseMs])
    return rowCount === 1
  }

  async release (key: string, callId: string): Promise<void> {
    await this.#query('limit_release', `DELETE FROM ${this.prefix}slots WHERE key = $1 AND holder = $2`, [key, callId])
  }

  /** Resolves once the database answers (at most `timeout` ms); rejects otherwise. */
  async ready (timeout = 5000): Promise<void> {
    await bounded(this.#query('limit_ping', 'SELECT 1', []), timeout, () => {})
  }
}
