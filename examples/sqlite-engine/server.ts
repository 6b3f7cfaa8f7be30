/**
 * The worked example of docs/your-own-engine.md as a server: the demo tools over the SQLite store
 * and lock of this folder, all processes started on the same file sharing the sessions.
 *
 *   MCP_SQLITE_FILE=/tmp/state.db PORT=3001 npx tsx examples/sqlite-engine/server.ts
 *   MCP_SQLITE_FILE=/tmp/state.db PORT=3002 npx tsx examples/sqlite-engine/server.ts
 */
import Fastify, { type FastifyInstance } from 'fastify'
import mcp from '../../lib/index.js'
import { registerDemoTools } from '../demo-tools.js'
import { openSqlite } from './sqlite-db.js'
import { SqliteSessionLock } from './sqlite-lock.js'
import { SqliteSessionStore } from './sqlite-store.js'

export async function buildSqliteServer (file: string, options: { logger?: boolean, lockTimeout?: number, noLock?: boolean } = {}): Promise<FastifyInstance> {
  const db = openSqlite(file)
  const store = new SqliteSessionStore({ db })
  const lock = new SqliteSessionLock({ db, timeout: options.lockTimeout })
  const app = Fastify({ logger: options.logger ?? true })
  app.addHook('onClose', async () => { await lock.close(); db.close() })
  await app.register(mcp, {
    serverInfo: { name: 'sqlite-engine-demo', version: '1.0.0' },
    // MCP_SQLITE_LOCK=none leaves the lock out (the control of test/engine/sqlite-processes.test.ts).
    // The store implements LockingSessionStore with this lock: lease + read, save + release, one transaction each.
    sessions: { store, lock: options.noLock === true ? false : lock }
  })
  registerDemoTools(app.mcp)
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildSqliteServer(process.env.MCP_SQLITE_FILE ?? '.mcp-state.db',
    {
      lockTimeout: process.env.MCP_LOCK_TIMEOUT_MS === undefined ? undefined : Number(process.env.MCP_LOCK_TIMEOUT_MS),
      noLock: process.env.MCP_SQLITE_LOCK === 'none'
    })
  await app.listen({ port: Number(process.env.PORT ?? 3000), host: process.env.HOST ?? '127.0.0.1' })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => { app.close().then(() => process.exit(0), () => process.exit(1)) })
  }
}
