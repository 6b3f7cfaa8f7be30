/**
 * A database of its own for a bench run, on the PostgreSQL server the tests use
 * (`PGBENCH_URL`, default postgres://postgres@127.0.0.1:5432/postgres): created with a random
 * name, dropped when the run ends (its connections ended first).
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'

export interface BenchDatabase {
  /** Connection string of the run's database. */
  readonly url: string
  /** Drops it. Never throws. */
  drop (): Promise<void>
}

export async function createBenchDatabase (): Promise<BenchDatabase> {
  const serverUrl = process.env.PGBENCH_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
  const server = new pg.Client({ connectionString: serverUrl, connectionTimeoutMillis: 5000 })
  try {
    await server.connect()
  } catch (err) {
    throw new Error(`PostgreSQL cannot be reached at ${serverUrl} (${(err as Error).message}); set PGBENCH_URL, or leave out the stores and handles scenarios`, { cause: err })
  }
  const name = `mcp_bench_${randomBytes(6).toString('hex')}`
  await server.query(`CREATE DATABASE ${name}`)
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return {
    url: url.href,
    drop: async () => {
      try {
        await server.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [name])
        await server.query(`DROP DATABASE IF EXISTS ${name}`)
      } catch {}
      await server.end().catch(() => {})
    }
  }
}
