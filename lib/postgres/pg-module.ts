/**
 * The app's `pg` (node-postgres) module. pg is an optional peer dependency: an app that does not
 * use PostgreSQL need not install it. It is loaded on first use (a pool the plugin makes from a
 * connection string), and nowhere else; a pool the app hands in needs no loading at all.
 */
import { createRequire } from 'node:module'

/** The part of the pg module the plugin uses (the pool's shape is `PgPoolLike`, in `pool.ts`). */
export interface PgModule {
  Pool: new (config: Record<string, unknown>) => unknown
}

let pg: PgModule | undefined

/**
 * The app's pg (8), loaded once, on first use.
 * @throws {Error} naming the package when it is not installed.
 */
export function loadPg (): PgModule {
  if (pg !== undefined) return pg
  try {
    // CommonJS, resolved from the app (a peer dependency).
    const loaded = createRequire(import.meta.url)('pg') as Partial<PgModule> & { default?: PgModule }
    const Pool = loaded.Pool ?? loaded.default?.Pool
    if (typeof Pool !== 'function') throw new Error('it exports no Pool')
    pg = { Pool }
  } catch (err) {
    const notInstalled = (err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' &&
      (err as Error).message.startsWith("Cannot find module 'pg'")
    throw new Error(notInstalled
      ? 'fastify-mcp-http: a PostgreSQL connection string needs the "pg" package (node-postgres 8), which is not installed. ' +
        'Install it (npm install pg), or pass a pg Pool you made yourself.'
      : `fastify-mcp-http: the "pg" package failed to load: ${(err as Error).message}`, { cause: err })
  }
  return pg
}
