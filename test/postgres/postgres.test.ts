/**
 * The `postgres` option: one pool (or a connection string) and the plugin builds the store, the
 * lock (its default there), the bus, the event log and the limits on it. Then the faults: the
 * database's connections cut mid-request (as a restart does), and a pool exhausted.
 */
import t from 'tap'
import Fastify from 'fastify'
import { registerDemoTools } from '../../examples/demo-tools.js'
import mcp, { type McpPluginOptions } from '../../lib/index.js'
import { PgSessionLock } from '../../lib/locks/pg-lock.js'
import { PgSessionStore } from '../../lib/sessions/pg-store.js'
import { watchQueries, createTestDatabase } from '../helpers/postgres.js'
import { build, call, initialize, request } from '../helpers/handshake-app.js'

const db = await createTestDatabase(t)
let n = 0

async function app (t: Parameters<typeof build>[0], opts: McpPluginOptions = {}): ReturnType<typeof build> {
  const made = await build(t, { postgres: { pool: db.url, prefix: `p${n++}_` }, ...opts }, m => { registerDemoTools(m) })
  await made.ready()
  return made
}

const counterOf = (res: Record<string, any>): number => res.result?.structuredContent?.counter

t.test('a connection string: sessions live in <prefix>state, behind the PostgreSQL lock by default', async t => {
  const a = await app(t, { postgres: { pool: db.url, prefix: 'opt_' } })
  const session = await initialize(a)
  const { rows } = await db.admin.query('SELECT id FROM opt_state')
  t.same(rows.map(r => r.id), [session.sid], 'the session is a row')
  // 20 calls of one session at once, each reading the counter, waiting, writing it: the lock
  // serializes them, so none is lost.
  const results = await Promise.all(Array.from({ length: 20 }, async () =>
    await call(a, session, 'tools/call', { name: 'counter_add', arguments: { by: 1, delayMs: 5 } })))
  t.same(results.map(counterOf).sort((x, y) => x - y), Array.from({ length: 20 }, (_, i) => i + 1), 'each saw the one before')
  t.same((await db.admin.query('SELECT * FROM opt_leases')).rows, [], 'no lease left')
})

t.test('sessions.lock: false runs without the lock, and updates are lost (the cost of opting out)', async t => {
  const a = await app(t, { sessions: { lock: false } })
  const session = await initialize(a)
  await Promise.all(Array.from({ length: 20 }, async () =>
    await call(a, session, 'tools/call', { name: 'counter_add', arguments: { by: 1, delayMs: 20 } })))
  const last = counterOf(await call(a, session, 'tools/call', { name: 'counter_get', arguments: {} }))
  t.ok(last < 20, `counter ${last} of 20: lost updates without the lock`)
})

t.test('options: not with redis; a bad prefix or pool is refused', async t => {
  const tryRegister = async (opts: McpPluginOptions): Promise<unknown> => {
    const f = Fastify({ logger: false })
    t.teardown(() => f.close())
    return await f.register(mcp, opts).ready().then(() => null, (e: unknown) => e)
  }
  t.match(await tryRegister({ postgres: db.url, redis: 'redis://127.0.0.1:1' }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /postgres/ })
  t.match(await tryRegister({ postgres: { pool: db.url, prefix: 'Bad;' } }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /postgres\.prefix/ })
  t.match(await tryRegister({ postgres: {} as never }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /postgres/ })
})

t.test('a pool passed in is used for everything and never ended by the plugin', async t => {
  const pool = db.pool({ max: 5 })
  const store = new PgSessionStore({ pool, prefix: 'own_' })
  const lock = new PgSessionLock({ pool, prefix: 'own_' })
  const a = await build(t, { postgres: { pool, prefix: 'own_' }, sessions: { store, lock } }, m => { registerDemoTools(m) })
  const session = await initialize(a)
  t.equal(counterOf(await call(a, session, 'tools/call', { name: 'counter_add', arguments: {} })), 1)
  await a.close()
  await lock.close()
  t.same((await pool.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'still usable')
})

t.test('the database cuts every connection mid-request: 503 at once with Retry-After, then it serves again', async t => {
  const a = await app(t)
  const session = await initialize(a)
  t.equal(counterOf(await call(a, session, 'tools/call', { name: 'counter_add', arguments: {} })), 1)
  // The call holds the lease and waits; the database restarts (its connections are cut) meanwhile.
  const pending = request(a, session, 'tools/call', { name: 'counter_add', arguments: { delayMs: 300 } })
  await new Promise(resolve => setTimeout(resolve, 100))
  t.ok(await db.terminateBackends() > 0, 'connections cut')
  const res = await pending
  const answer = JSON.stringify(res.json?.() ?? res.body)
  // The save after the cut runs on a new connection: kept and told, or refused and not told.
  const after = counterOf(await call(a, session, 'tools/call', { name: 'counter_get', arguments: {} }))
  if (res.statusCode === 200 && /"counter":2/.test(res.body)) {
    t.equal(after, 2, 'what was told kept is kept')
  } else {
    t.equal(res.statusCode, 503, `refused (${answer.slice(0, 200)})`)
    t.equal(after, 1, 'nothing told kept that was not')
  }
  // A request that lands while the connections are cut.
  await db.terminateBackends()
  const next = await request(a, session, 'tools/call', { name: 'counter_add', arguments: {} })
  t.ok([200, 503].includes(next.statusCode), `answered ${next.statusCode}`)
  if (next.statusCode === 503) t.equal(next.headers['retry-after'], '1', 'with Retry-After')
  // Recovery without restarting the app.
  const healed = await call(a, session, 'tools/call', { name: 'counter_add', arguments: {} })
  t.ok(counterOf(healed) >= 2, `serves again (${counterOf(healed)})`)
})

t.test('a pool exhausted: the request waits the pool\'s bounded time, then 503 with Retry-After; nothing is kept', async t => {
  const pool = db.pool({ max: 3, connectionTimeoutMillis: 300 })
  const a = await build(t, { postgres: { pool, prefix: 'full_' } }, m => { registerDemoTools(m) })
  const session = await initialize(a)
  t.equal(counterOf(await call(a, session, 'tools/call', { name: 'counter_add', arguments: {} })), 1)
  // Everything the pool has left is taken by someone else (the bus may hold one for LISTEN).
  const held: Array<{ release: () => void }> = []
  for (;;) {
    const client = await pool.connect().catch(() => null)
    if (client === null) break // the pool's wait ran out: nothing left
    held.push(client)
  }
  t.ok(held.length >= 2, `${held.length} connections taken`)
  const res = await request(a, session, 'tools/call', { name: 'counter_add', arguments: {} })
  t.equal(res.statusCode, 503, 'refused once the pool\'s wait ran out')
  t.equal(res.headers['retry-after'], '1')
  for (const c of held) c.release()
  t.equal(counterOf(await call(a, session, 'tools/call', { name: 'counter_get', arguments: {} })), 1, 'nothing was kept')
  t.equal(counterOf(await call(a, session, 'tools/call', { name: 'counter_add', arguments: {} })), 2, 'served again once connections are free')
})

t.test('through the plugin a locked request is 2 round trips: take+load, then save+release or release', async t => {
  const sent: string[] = []
  const pool = watchQueries(db.pool({ max: 5 }), s => { sent.push(s) })
  const store = new PgSessionStore({ pool, prefix: 'rt_' })
  const lock = new PgSessionLock({ pool, prefix: 'rt_' })
  t.teardown(() => lock.close())
  // The plugin's occasional gc of the store (1 in 100 POSTs by default) is not the request's: off here.
  const a = await build(t, { sessions: { store, lock, gcProbability: 0 } }, m => { registerDemoTools(m) })
  const session = await initialize(a)
  for (let i = 1; i <= 3; i++) {
    sent.length = 0
    t.equal(counterOf(await call(a, session, 'tools/call', { name: 'counter_add', arguments: {} })), i)
    t.same(sent, ['rt_state_take_and_load', 'rt_state_save'], `counter_add ${i}: 2 queries`)
    sent.length = 0
    await call(a, session, 'tools/call', { name: 'counter_get', arguments: {} })
    t.same(sent, ['rt_state_take_and_load', 'rt_lease_release'], `counter_get ${i} (nothing changed): 2 queries`)
  }
})

t.test('without requestState.secret, the postgres option warns: its instances must share one', async t => {
  const lines: Array<{ level: number, msg: string }> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line)) } }
  const f = Fastify({ logger: { level: 'info', stream } })
  t.teardown(() => f.close())
  await f.register(mcp, { postgres: { pool: db.url, prefix: 'warn_' } })
  await f.ready()
  t.ok(lines.some(l => l.level === 40 && /requestState\.secret/.test(l.msg)), 'a warning, not an info line')
})
