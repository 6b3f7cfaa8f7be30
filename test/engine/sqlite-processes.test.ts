/**
 * The worked example's engine (examples/sqlite-engine/) across processes: three servers on one
 * SQLite file, 50 parallel `counter_add {delayMs: 20}` on ONE session round-robin through them.
 * Every increment is kept (counters 1..50, each once; 50 as every process reads it), and no lease
 * row is left. The control: three servers on the same store without the lock lose increments, so
 * the test tells the lock's work from luck.
 */
import t from 'tap'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { openSqlite } from '../../examples/sqlite-engine/sqlite-db.js'
import { callTool, counterIn, counterOf, initialize } from '../helpers/http-client.js'
import { startServer, type ServerProcess } from '../helpers/processes.js'

t.setTimeout(120_000)

const ENTRY = fileURLToPath(new URL('../../examples/sqlite-engine/server.ts', import.meta.url))
const dir = await mkdtemp(join(tmpdir(), 'mcp-sqlite-processes-'))
t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
const file = join(dir, 'state.db')
openSqlite(file).close() // the tables exist before three processes race to make them

const N = 50
const start = async (env: Record<string, string>): Promise<ServerProcess[]> =>
  await Promise.all([1, 2, 3].map(async () => await startServer(t, ENTRY, { MCP_SQLITE_FILE: file, MCP_LOCK_TIMEOUT_MS: '30000', ...env })))
const [locked, unlocked] = await Promise.all([start({}), start({ MCP_SQLITE_LOCK: 'none' })]) as [ServerProcess[], ServerProcess[]]

/** N parallel increments of one session, round-robin over the servers. */
async function hammer (servers: ServerProcess[]): Promise<{ counters: number[], failures: string[], final: number[] }> {
  const session = await initialize((servers[0] as ServerProcess).url)
  const replies = await Promise.all(Array.from({ length: N }, async (_, i) =>
    await callTool((servers[i % servers.length] as ServerProcess).url, session, 'counter_add', { delayMs: 20 })))
  const counters: number[] = []
  const failures: string[] = []
  for (const r of replies) {
    const counter = counterIn(r)
    if (r.status === 200 && r.last?.result?.isError !== true && typeof counter === 'number') counters.push(counter)
    else failures.push(`${r.status} ${r.text}`)
  }
  const final = await Promise.all(servers.map(async s => await counterOf(s.url, session)))
  return { counters: counters.sort((a, b) => a - b), failures, final }
}

t.test('3 processes × 50 parallel updates of one session on one SQLite file: 50 of 50 kept', async t => {
  const run = await hammer(locked)
  t.same(run.failures, [], 'every call succeeded')
  t.same(run.counters, Array.from({ length: N }, (_, i) => i + 1), 'each call saw the one before: counters 1..50, each once')
  t.same(run.final, [N, N, N], 'the counter ends at 50, as every process reads it')
  const db = openSqlite(file)
  t.teardown(() => { db.close() })
  t.same(db.prepare('SELECT id FROM leases').all(), [], 'no lease row left')
})

t.test('the control: the same store without the lock loses updates', async t => {
  const run = await hammer(unlocked)
  t.same(run.failures, [], 'every call answered')
  t.ok((run.final[0] as number) < N, `increments lost without the lock: the counter ends at ${String(run.final[0])} of ${N}`)
})
