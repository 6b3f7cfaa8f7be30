/**
 * Tools on state handles with the `postgres` option, in one process: a call on a handle costs
 * exactly 2 queries (take+read, save+release); the handle is a row of its own; foreign, unknown
 * and garbage handles create no row (garbage never reaches the database); connections cut
 * mid-call: told kept only what was kept, and the basket works again (the restart with the
 * database down: test/postgres/postgres-restart.test.ts).
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import mcp, { injectClient, McpError, type InjectClient } from '../../lib/index.js'
import { registerBasketTools } from '../../examples/demo-tools.js'
import { tokensAuth } from '../../examples/server.js'
import { createTestDatabase, watchQueries } from '../helpers/postgres.js'
import { until } from '../helpers/time.js'

const db = await createTestDatabase(t)
const sent: string[] = []
const pool = watchQueries(db.pool({ max: 6, connectionTimeoutMillis: 2000 }), s => { sent.push(s) })

async function build (): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { requestState: { secret: 'handle-postgres-secret' }, auth: tokensAuth('a:alice,b:bob'), postgres: pool })
  registerBasketTools(app.mcp)
  await app.ready()
  return app
}

const app = await build()
const alice = injectClient(app, { protocolVersion: '2026-07-28', headers: { authorization: 'Bearer a' } })
const bob = injectClient(app, { protocolVersion: '2026-07-28', headers: { authorization: 'Bearer b' } })
const rows = async (): Promise<string[]> => (await db.admin.query('SELECT id FROM mcp_state ORDER BY id')).rows.map(r => r.id as string)

async function newBasket (c: InjectClient): Promise<string> {
  return (await c.callTool('basket_create')).structuredContent?.basket as string
}

t.test('a call on a handle: exactly 2 queries; the handle is a row of its own', async t => {
  const basket = await newBasket(alice)
  t.ok((await rows()).includes(`~basket~${basket}`), 'a row under the handle\'s key')
  sent.length = 0
  const r = await alice.callTool('basket_add', { basket, item: 'pear' })
  t.same(r.structuredContent, { count: 1 })
  t.same(sent, ['mcp_state_take_and_load', 'mcp_state_save'], 'take+read, save+release')
})

t.test('foreign, unknown and garbage handles: one text, no row; garbage never reaches the database', async t => {
  const basket = await newBasket(alice)
  const before = await rows()
  const refused = async (c: InjectClient, id: string): Promise<string[]> => {
    sent.length = 0
    const value = await c.callTool('basket_add', { basket: id, item: 'x' })
    t.same([value.content, value.isError], [[{ type: 'text', text: 'Unknown or expired basket handle.' }], true], JSON.stringify(id.slice(0, 24)))
    return [...sent]
  }
  t.ok((await refused(bob, basket)).length > 0, 'someone else\'s: looked up')
  t.ok((await refused(alice, 'Q'.repeat(32))).length > 0, 'unknown: looked up')
  for (const garbage of ['{x}', '*', '../x', 'a'.repeat(4096), '~basket~x', 'a b', "x'; DROP TABLE mcp_state; --"]) {
    t.same(await refused(alice, garbage), [], 'garbage: no query at all')
  }
  t.same(await rows(), before, 'no row created')
  t.same((await db.admin.query('SELECT * FROM mcp_leases')).rows, [], 'no lease row left behind')
})

t.test('the connections cut mid-call: told kept only what was kept (503 and nothing, or the save on a new connection); the basket works again', async t => {
  const basket = await newBasket(alice)
  await alice.callTool('basket_add', { basket, item: 'before' })
  const running = alice.callTool('basket_add', { basket, item: 'during', delayMs: 300 }).catch((err: unknown) => err)
  await until(async () => (await db.admin.query('SELECT 1 FROM mcp_leases')).rows.length === 1, { what: 'the lease to be taken' })
  // Cut while the handler runs: the save finds its pooled connection dead.
  await db.terminateBackends()
  await db.terminateBackends()
  const r = await running
  const kept = (await alice.callTool('basket_get', { basket })).structuredContent as { items: string[] }
  if (r instanceof McpError) {
    t.match(r, { status: 503, code: -32000, message: /unavailable/ })
    t.same(kept, { items: ['before'] }, 'nothing of the refused call')
  } else {
    t.same(kept, { items: ['before', 'during'] }, 'told kept: kept (the save ran on a fresh connection)')
  }
  await until(async () => (await alice.callTool('basket_add', { basket, item: 'after' }).catch(() => null))?.structuredContent !== undefined,
    { timeout: 5000, what: 'the basket to take writes again' })
  t.match((await alice.callTool('basket_get', { basket })).structuredContent, { items: ['before'] }, 'works again')
})
