import t from 'tap'
import { PgLimitBackend } from '../../lib/limits/pg-backend.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { until } from '../helpers/time.js'
import { runLimitBackendContract } from './limit-contract.js'

const db = await createTestDatabase(t)
let n = 0

/** Rows of a backend's tables that still count (a lease held, a bucket not full again). */
async function liveRows (prefix: string): Promise<number> {
  const { rows } = await db.admin.query(`SELECT
    (SELECT count(*) FROM ${prefix}buckets WHERE expires_at > clock_timestamp()) +
    (SELECT count(*) FROM ${prefix}slots WHERE expires_at > clock_timestamp()) AS n`)
  return Number(rows[0].n)
}

runLimitBackendContract(t, 'PgLimitBackend', {
  // A prefix per backend: idle() looks at this backend's rows only.
  create: async () => {
    const backend = new PgLimitBackend({ pool: db.pool({ max: 4 }), prefix: `l${n++}_`, timeout: 5000 })
    await backend.ready()
    return backend
  },
  idle: async (t, backend) => {
    await until(async () => await liveRows(backend.prefix) === 0, { timeout: 10_000, what: 'every bucket full and every lease gone' })
    t.equal(await liveRows(backend.prefix), 0, 'nothing live left in the tables')
  }
})

t.test('rows that ran out are deleted by later checks: a flood of callers leaves nothing for long', async t => {
  const backend = new PgLimitBackend({ pool: db.admin, prefix: 'flood_' })
  const spec = { intervalUs: 1000, burst: 1, concurrency: 0, leaseMs: 1000 }
  for (let i = 0; i < 30; i++) await backend.acquire(`tool|caller${i}`, spec, `c${i}`)
  await new Promise(resolve => setTimeout(resolve, 50))
  await backend.acquire('tool|late', spec, 'late')
  await backend.acquire('tool|late2', spec, 'late2')
  const { rows } = await db.admin.query('SELECT count(*)::int AS n FROM flood_buckets')
  t.ok(rows[0].n <= 3, `${rows[0].n} bucket rows left of 32`)
})

t.test('a database that is down: checks reject (the limiter applies onBackendError)', async t => {
  const pg = await import('pg')
  const pool = new pg.default.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', connectionTimeoutMillis: 500 })
  t.teardown(() => pool.end())
  const backend = new PgLimitBackend({ pool, prefix: 'down_' })
  await t.rejects(backend.acquire('k', { intervalUs: 1000, burst: 1, concurrency: 1, leaseMs: 1000 }, 'c'))
})
