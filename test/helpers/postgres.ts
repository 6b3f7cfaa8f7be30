/**
 * A database of its own per test file on the PostgreSQL server the tests use (127.0.0.1:5432,
 * trust auth, user `postgres`; `PGTEST_URL` names another server): created with a random name,
 * dropped in teardown (its connections terminated first). When the server cannot be reached the
 * helper throws, naming it and how to start it: PostgreSQL tests never skip.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'

/** What a test gets (the subset of tap's Test we use, so any tap version fits). */
interface Teardown {
  teardown (fn: () => unknown): void
}

export interface TestDatabase {
  /** Connection string of the test's own database. */
  readonly url: string
  /** Its name. */
  readonly name: string
  /** A pool on it (ended in teardown), for the test's own checks. */
  readonly admin: pg.Pool
  /** A new pool on it, ended in teardown. */
  pool (config?: pg.PoolConfig): pg.Pool
  /** Ends every connection to the database except the admin pool's own (a server restart, as clients see it). */
  terminateBackends (): Promise<number>
}

const SERVER_URL = process.env.PGTEST_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'

/** Creates a database for this test file; dropped in `t`'s teardown. */
export async function createTestDatabase (t: Teardown): Promise<TestDatabase> {
  const server = new pg.Client({ connectionString: SERVER_URL, connectionTimeoutMillis: 5000 })
  try {
    await server.connect()
  } catch (err) {
    throw new Error(`PostgreSQL cannot be reached at ${SERVER_URL.replace(/:[^:@/]*@/, ':***@')} (${(err as Error).message}). ` +
      'The PostgreSQL tests need a server there with trust auth for user postgres (.ci/run starts one; ' +
      'locally: pg_ctlcluster 15 main start), or PGTEST_URL naming another.', { cause: err })
  }
  const name = `mcp_test_${randomBytes(6).toString('hex')}`
  await server.query(`CREATE DATABASE ${name}`)
  const url = new URL(SERVER_URL)
  url.pathname = `/${name}`
  const pools: pg.Pool[] = []
  const pool = (config: pg.PoolConfig = {}): pg.Pool => {
    const made = new pg.Pool({ connectionString: url.href, ...config })
    made.on('error', () => {}) // terminated backends, in the fault tests
    pools.push(made)
    return made
  }
  const admin = pool()
  t.teardown(async () => {
    await Promise.allSettled(pools.map(async p => { await p.end() }))
    await server.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [name])
    await server.query(`DROP DATABASE IF EXISTS ${name}`)
    await server.end()
  })
  return {
    url: url.href,
    name,
    admin,
    pool,
    terminateBackends: async () => {
      const { rows } = await server.query(
        'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [name])
      return rows[0].n as number
    }
  }
}
