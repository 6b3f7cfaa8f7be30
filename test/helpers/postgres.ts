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

/** A PostgreSQL server of the test's own, which it may stop and start (a database restart). */
export interface PrivateCluster {
  /** Connection string of its `postgres` database. */
  readonly url: string
  /** Stops it (`pg_ctl stop -m fast`: connections are cut, as in a restart) and waits. */
  stop (): Promise<void>
  /** Starts it again on the same port and waits until it accepts connections. */
  start (): Promise<void>
}

const PG_BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin'

/**
 * Makes a throwaway cluster (initdb in a temp dir, trust auth, no fsync) on a free port and starts
 * it; stopped and removed in teardown. Run as root, its programs run as the `postgres` user
 * (initdb refuses root). Throws, saying what is missing, when it cannot be made.
 */
export async function startPrivateCluster (t: Teardown): Promise<PrivateCluster> {
  const { mkdtemp, rm, chown } = await import('node:fs/promises')
  const { execFile } = await import('node:child_process')
  const { promisify } = await import('node:util')
  const { tmpdir } = await import('node:os')
  const { join } = await import('node:path')
  const { createServer } = await import('node:net')
  const run = promisify(execFile)
  const dir = await mkdtemp(join(tmpdir(), 'mcp-pg-'))
  const asRoot = process.getuid?.() === 0
  let uid = 0
  if (asRoot) {
    uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim())
    await chown(dir, uid, Number((await run('id', ['-g', 'postgres'])).stdout.trim()))
  }
  const pg = async (program: string, args: string[]): Promise<void> => {
    const bin = join(PG_BIN, program)
    if (asRoot) await run('runuser', ['-u', 'postgres', '--', bin, ...args])
    else await run(bin, args)
  }
  const port = await new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => { typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port')) })
    })
  })
  const data = join(dir, 'data')
  try {
    await pg('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync'])
  } catch (err) {
    throw new Error(`Cannot make a private PostgreSQL cluster with ${PG_BIN}/initdb (${(err as Error).message}); set PG_BIN to the server's bin directory.`, { cause: err })
  }
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50`
  const start = async (): Promise<void> => { await pg('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', 'start']) }
  const stop = async (): Promise<void> => { await pg('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']) }
  await start()
  t.teardown(async () => {
    await stop().catch(() => {})
    await rm(dir, { recursive: true, force: true })
  })
  return { url: `postgres://postgres@127.0.0.1:${port}/postgres`, stop, start }
}

/**
 * Calls `seen` with the name (or text) of every statement sent through `pool`, by `pool.query`
 * or on a client `pool.connect` hands out (the stores send their writes on a client of their own,
 * to tell a statement never sent from one whose answer was lost): each of the pool's connections
 * is watched from when it connects. Returns the pool (fresh: connections made before are not watched).
 */
export function watchQueries<P extends pg.Pool> (pool: P, seen: (statement: string) => void): P {
  const name = (q: unknown): string => typeof q === 'string' ? q : (q as { name?: string, text?: string }).name ?? (q as { text?: string }).text ?? '?'
  pool.on('connect', (client) => {
    const watched = client as unknown as { query: (...args: unknown[]) => unknown }
    const own = watched.query.bind(client)
    watched.query = (...args: unknown[]) => { seen(name(args[0])); return own(...args) }
  })
  return pool
}
