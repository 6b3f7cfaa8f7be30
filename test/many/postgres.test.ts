/**
 * Demo processes (examples/server.ts with MCP_STORE=postgres, MCP_LOCK=postgres, DATABASE_URL)
 * on one PostgreSQL database, behind a round-robin proxy without sticky sessions:
 *
 * - 50 parallel counter_add on one session and 30 parallel basket_add on one state handle through
 *   3 processes keep every update; the same runs with MCP_LOCK=none lose some;
 * - an elicitation goes out on one instance and its answer lands on another;
 * - a holder SIGKILLed mid-call leaves its lease row behind, free again after the lease TTL.
 */
import t, { type Test } from 'tap'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { callTool, counterIn, counterOf, initialize, modernPost, readReply, type Reply } from '../helpers/http-client.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { DEMO_ENTRY, startServer, type ServerProcess } from '../helpers/processes.js'
import { until } from '../helpers/time.js'
import { startProxy, type Proxy } from './fixtures/proxy.js'

t.setTimeout(180_000)
const db = await createTestDatabase(t)
const base = {
  MCP_STORE: 'postgres',
  MCP_LOCK: 'postgres',
  DATABASE_URL: db.url,
  MCP_STATE_SECRET: 'many-postgres-secret-0123456789abcdef',
  MCP_LOCK_TTL_MS: '1000',
  MCP_LOCK_TIMEOUT_MS: '20000'
}
const started = performance.now()
const [locked, unlocked] = await Promise.all([
  Promise.all(Array.from({ length: 3 }, async () => await startServer(t, DEMO_ENTRY, base))),
  Promise.all(Array.from({ length: 3 }, async () => await startServer(t, DEMO_ENTRY, { ...base, MCP_LOCK: 'none' })))
])
t.comment(`6 demo processes on PostgreSQL started in ${Math.round(performance.now() - started)} ms`)

async function balanced (t: Test, servers: ServerProcess[]): Promise<Proxy> {
  return await startProxy(t, servers.map(s => s.url))
}

/** A 2026-07-28 `tools/call`; its reply. */
async function modernCall (url: string, name: string, args: Record<string, unknown>): Promise<Reply> {
  return await readReply(await modernPost(url, 'tools/call', { name, arguments: args }))
}

async function newBasket (url: string): Promise<string> {
  const basket = (await modernCall(url, 'basket_create', {})).last?.result?.structuredContent?.basket
  if (typeof basket !== 'string') throw new Error('basket_create failed')
  return basket
}

const itemsOf = async (url: string, basket: string): Promise<string[]> =>
  (await modernCall(url, 'basket_get', { basket })).last?.result?.structuredContent?.items

async function counterRun (url: string): Promise<{ counter: number, failed: number }> {
  const session = await initialize(url)
  const replies = await Promise.all(Array.from({ length: 50 }, async () => await callTool(url, session, 'counter_add', { delayMs: 20 })))
  return { counter: await counterOf(url, session), failed: replies.filter(r => r.status !== 200 || typeof counterIn(r) !== 'number').length }
}

async function basketRun (url: string): Promise<{ items: string[], failed: number }> {
  const basket = await newBasket(url)
  const replies = await Promise.all(Array.from({ length: 30 }, async (_, i) => await modernCall(url, 'basket_add', { basket, item: `item-${i}`, delayMs: 20 })))
  return { items: await itemsOf(url, basket), failed: replies.filter(r => r.status !== 200).length }
}

t.test('50 parallel counter_add on one session through 3 processes: all kept with the lock, some lost without', async t => {
  const withLock = await counterRun((await balanced(t, locked)).url)
  t.equal(withLock.failed, 0, 'every call succeeded')
  t.equal(withLock.counter, 50, 'the counter ends at 50')
  t.same((await db.admin.query('SELECT * FROM mcp_leases WHERE expires_at > clock_timestamp()')).rows, [], 'no live lease left')
  const without = await counterRun((await balanced(t, unlocked)).url)
  t.equal(without.failed, 0, 'every call "succeeded" (last writer wins, silently)')
  t.ok(without.counter < 50, `without the lock: ${without.counter} of 50`)
})

t.test('30 parallel basket_add on one handle through 3 processes: all kept with the lock, some lost without', async t => {
  const all = Array.from({ length: 30 }, (_, i) => `item-${i}`).sort()
  const withLock = await basketRun((await balanced(t, locked)).url)
  t.equal(withLock.failed, 0, 'every call succeeded')
  t.same([...withLock.items].sort(), all, 'every item, once')
  const without = await basketRun((await balanced(t, unlocked)).url)
  t.ok(without.items.length < 30, `without the lock: ${without.items.length} of 30 items`)
})

t.test('ask_name: the elicitation goes out on one instance, the answer lands on another, the call completes', async t => {
  const proxy = await balanced(t, locked)
  for (let round = 1; round <= 3; round++) {
    const client = new Client({ name: 'pg-many', version: '1.0.0' }, { capabilities: { elicitation: {} } })
    client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: `Ada ${round}` } }))
    const transport = new StreamableHTTPClientTransport(new URL(proxy.url))
    await client.connect(transport)
    const sid = transport.sessionId
    const result = await client.callTool({ name: 'ask_name', arguments: {} })
    t.same(result.content, [{ type: 'text', text: `Hello, Ada ${round}!` }], `round ${round}: the call completes with the name`)
    const call = proxy.log.findLast(e => e.sid === sid && e.rpc === 'tools/call')
    const answer = proxy.log.findLast(e => e.sid === sid && e.rpc === 'response')
    t.not(answer?.instance, call?.instance, `the answer landed on another instance (#${String(call?.instance)} → #${String(answer?.instance)})`)
    await client.close()
  }
})

t.test('a holder SIGKILLed mid-call: its lease row frees the handle after the lease TTL, and its call wrote nothing', async t => {
  const [victim, survivor] = locked as [ServerProcess, ServerProcess]
  const basket = await newBasket(survivor.url)
  t.equal((await modernCall(survivor.url, 'basket_add', { basket, item: 'first' })).status, 200)
  const doomed = modernCall(victim.url, 'basket_add', { basket, item: 'killed', delayMs: 10_000 }).then(() => 'answered', () => 'connection lost')
  await until(async () => (await db.admin.query('SELECT 1 FROM mcp_leases WHERE expires_at > clock_timestamp()')).rows.length === 1,
    { timeout: 5000, what: 'the lease row to be taken' })
  await victim.kill()
  const killedAt = performance.now()
  t.equal(await doomed, 'connection lost')
  const after = await modernCall(survivor.url, 'basket_add', { basket, item: 'after' })
  const waited = performance.now() - killedAt
  t.equal(after.status, 200, 'served once the dead holder\'s lease ran out')
  t.comment(`served ${Math.round(waited)} ms after the kill (lease TTL 1,000 ms, renewed every 333 ms)`)
  t.same(await itemsOf(survivor.url, basket), ['first', 'after'], 'the killed call wrote nothing')
})

t.test('a holder SIGSTOPped past its lease TTL: its save is fenced, it answers 503, the newer basket stands', async t => {
  const [, frozen, other] = locked as [ServerProcess, ServerProcess, ServerProcess]
  const basket = await newBasket(other.url)
  let continued = false
  t.teardown(() => { if (!continued) frozen.signal('SIGCONT') })
  const stale = modernCall(frozen.url, 'basket_add', { basket, item: 'stale', delayMs: 500 })
  await until(async () => (await db.admin.query('SELECT 1 FROM mcp_leases WHERE expires_at > clock_timestamp()')).rows.length === 1,
    { timeout: 5000, what: 'the lease row to be taken' })
  frozen.signal('SIGSTOP')
  const stoppedAt = performance.now()
  const fresh = await modernCall(other.url, 'basket_add', { basket, item: 'fresh' })
  t.equal(fresh.status, 200, 'the other process gets the handle once the frozen lease expired')
  await new Promise(resolve => setTimeout(resolve, Math.max(0, 1500 - (performance.now() - stoppedAt))))
  frozen.signal('SIGCONT')
  continued = true
  const r = await stale
  t.equal(r.status, 503, 'the frozen holder is not told its item was added')
  t.same(r.last?.error, { code: -32000, message: 'Handle lock was lost; the changes of this call were not saved.' })
  t.same(await itemsOf(other.url, basket), ['fresh'], 'the stale save was fenced')
})
