/**
 * State handles across spawned demo processes that share one private redis-server, behind a
 * round-robin proxy (a load balancer without sticky sessions):
 *
 * - lost updates: 50 parallel `basket_add {delayMs: 20}` on ONE basket, from the official v2
 *   client pinned to 2026-07-28 and from the official v1 client on the 2025 wire. With the Redis
 *   lock the basket ends with all 50 items; with no lock the same run loses items;
 * - a holder SIGKILLed mid-`basket_add` leaves its lease behind, which expires after the TTL: the
 *   basket then works through another process, without the killed call's item;
 * - a holder SIGSTOPped past its TTL cannot overwrite the newer basket when it wakes: its save is
 *   fenced and it answers 503.
 */
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Client as ModernClient, StreamableHTTPClientTransport as ModernTransport } from '@modelcontextprotocol/client'
import { startRedisServer } from '../helpers/redis-server.js'
import { modernPost, readReply, type Reply } from '../helpers/http-client.js'
import { sleep, until } from '../helpers/time.js'
import { startProxy } from '../many/fixtures/proxy.js'
import { startCluster, type DemoProcess } from './fixtures/cluster.js'

t.setTimeout(120_000)

const redisServer = await startRedisServer(t)
const redis = new Redis(redisServer.url)
t.teardown(async () => { await redis.quit().catch(() => redis.disconnect()) })

const base = { MCP_STORE: 'redis', MCP_LOCK: 'redis', REDIS_URL: redisServer.url, MCP_STATE_SECRET: 'handles-processes-secret' }
const startedAt = performance.now()
// - patient: lease TTL 600 ms, lock timeout 20 s (lost updates; the SIGSTOP test);
// - fast: lease TTL 1 s, lock timeout 200 ms (the SIGKILL test: busy handles are refused fast);
// - unlocked: Redis store, MCP_LOCK=none.
const [patient, fast, unlocked] = await Promise.all([
  startCluster(t, 2, { ...base, MCP_LOCK_TTL_MS: '600', MCP_LOCK_TIMEOUT_MS: '20000' }),
  startCluster(t, 2, { ...base, MCP_LOCK_TTL_MS: '1000', MCP_LOCK_TIMEOUT_MS: '200' }),
  startCluster(t, 2, { ...base, MCP_LOCK: 'none' })
])
t.comment(`6 demo processes started in ${Math.round(performance.now() - startedAt)} ms`)

const BUSY = 'Another call on this handle is still being processed.'
const N = 50
const lockKey = (basket: string): string => `mcp:{~basket~${basket}}:lock`

async function balanced (t: Test, cluster: DemoProcess[]): Promise<string> {
  return (await startProxy(t, cluster.map(p => p.url))).url
}

/** A 2026-07-28 `tools/call` on one process; its reply. */
async function call (url: string, name: string, args: Record<string, unknown>): Promise<Reply> {
  return await readReply(await modernPost(url, 'tools/call', { name, arguments: args }))
}

async function newBasket (url: string): Promise<string> {
  const r = await call(url, 'basket_create', {})
  const basket = r.last?.result?.structuredContent?.basket
  if (typeof basket !== 'string') throw new Error(`basket_create failed: ${r.text}`)
  return basket
}

async function itemsOf (url: string, basket: string): Promise<string[]> {
  return (await call(url, 'basket_get', { basket })).last?.result?.structuredContent?.items
}

interface Run { items: string[], failures: string[], ms: number }

type CallTool = (args: Record<string, unknown>) => Promise<{ isError?: boolean, structuredContent?: Record<string, unknown>, content?: unknown }>

/** N parallel `basket_add` on one basket through `callTool`; the basket afterwards. */
async function hammer (url: string, callTool: CallTool): Promise<Run> {
  const basket = await newBasket(url)
  const started = performance.now()
  const results = await Promise.all(Array.from({ length: N }, async (_, i) =>
    await callTool({ basket, item: `item-${i}`, delayMs: 20 }).catch((err: Error) => ({ isError: true, content: err.message, structuredContent: undefined }))))
  const ms = Math.round(performance.now() - started)
  const failures = results.filter(r => r.isError === true || typeof r.structuredContent?.count !== 'number').map(r => JSON.stringify(r.content))
  return { items: await itemsOf(url, basket), failures, ms }
}

async function v2Client (t: Test, url: string): Promise<CallTool> {
  const client = new ModernClient({ name: 'handles-v2', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } })
  await client.connect(new ModernTransport(new URL(url)))
  t.teardown(async () => { await client.close() })
  t.equal(client.getProtocolEra(), 'modern', 'the v2 client speaks 2026-07-28')
  return async (args) => await client.callTool({ name: 'basket_add', arguments: args }) as Awaited<ReturnType<CallTool>>
}

async function v1Client (t: Test, url: string): Promise<CallTool> {
  const client = new Client({ name: 'handles-v1', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(url)))
  t.teardown(async () => { await client.close() })
  t.match(client.getServerVersion(), { name: 'fastify-mcp-http-demo' }, 'the v1 client has a session')
  return async (args) => await client.callTool({ name: 'basket_add', arguments: args }) as Awaited<ReturnType<CallTool>>
}

const all = Array.from({ length: N }, (_, i) => `item-${i}`).sort()

for (const [era, connect] of [['v2 client, 2026-07-28', v2Client], ['v1 client, 2025 wire', v1Client]] as const) {
  t.test(`lost updates (${era}): with the Redis lock, 50 parallel basket_add through two processes keep 50 items`, async t => {
    const url = await balanced(t, patient)
    const run = await hammer(url, await connect(t, url))
    t.comment(`${N} basket_add through ${patient.length} processes in ${run.ms} ms`)
    t.same(run.failures, [], 'every call succeeded')
    t.same([...run.items].sort(), all, 'every item is in the basket, once')
    t.same(await redis.keys('mcp:*:lock'), [], 'no lock key left')
  })

  t.test(`lost updates (${era}): without a lock the same run loses items`, async t => {
    const url = await balanced(t, unlocked)
    const run = await hammer(url, await connect(t, url))
    t.comment(`${N} basket_add without a lock: ${run.items.length} items kept`)
    t.same(run.failures, [], 'every call "succeeded" (last writer wins, silently)')
    t.ok(run.items.length < N, `items were lost: ${run.items.length} < ${N}`)
  })
}

/** Resolves once the handle's lease exists and was renewed: its holder is inside its handler. */
async function leaseRenewed (basket: string): Promise<void> {
  await until(async () => await redis.exists(lockKey(basket)) === 1, { timeout: 3000, what: 'the lease to be taken' })
  let last = await redis.pttl(lockKey(basket))
  await until(async () => {
    const now = await redis.pttl(lockKey(basket))
    const renewed = now > last + 50
    last = now
    return renewed
  }, { timeout: 3000, what: 'the lease to be renewed' })
}

t.test('a holder SIGKILLed mid-basket_add: the handle is usable through another process after the lease TTL', async t => {
  const [p1, p2] = fast as [DemoProcess, DemoProcess]
  const basket = await newBasket(p2.url)
  t.equal((await call(p2.url, 'basket_add', { basket, item: 'first' })).last?.result?.structuredContent?.count, 1)

  const doomed = call(p1.url, 'basket_add', { basket, item: 'killed', delayMs: 10_000 }).then(() => 'answered', () => 'connection lost')
  await leaseRenewed(basket)
  await p1.kill()
  const killedAt = performance.now()
  t.equal(await doomed, 'connection lost')

  const statuses: number[] = []
  let done: Reply | undefined
  while (performance.now() - killedAt < 5000) {
    const r = await call(p2.url, 'basket_add', { basket, item: 'after' })
    statuses.push(r.status)
    if (r.status === 200) { done = r; break }
    t.same(r.last?.error, { code: -32000, message: BUSY }, 'busy while the dead holder\'s lease lasts')
  }
  const recovered = performance.now() - killedAt
  t.comment(`statuses ${statuses.join(',')}; recovered ${Math.round(recovered)} ms after the kill`)
  t.equal(statuses[0], 503, 'right after the kill the handle was still locked')
  t.ok(done !== undefined && recovered < 2000, `usable again within about the TTL (${Math.round(recovered)} ms)`)
  t.same(await itemsOf(p2.url, basket), ['first', 'after'], 'the killed call wrote nothing')
})

t.test('a holder SIGSTOPped past its TTL: its save is fenced, it answers 503, the newer basket stands', async t => {
  const [p3, p4] = patient as [DemoProcess, DemoProcess]
  const basket = await newBasket(p4.url)
  let continued = false
  t.teardown(() => { if (!continued) p3.signal('SIGCONT') })

  const stale = call(p3.url, 'basket_add', { basket, item: 'stale', delayMs: 500 })
  await leaseRenewed(basket)
  p3.signal('SIGSTOP')
  const stoppedAt = performance.now()
  const fresh = await call(p4.url, 'basket_add', { basket, item: 'fresh' })
  t.equal(fresh.status, 200, 'the other process gets the handle once the frozen lease expired')
  await sleep(Math.max(0, 1500 - (performance.now() - stoppedAt)))
  p3.signal('SIGCONT')
  continued = true
  const r = await stale
  t.equal(r.status, 503, 'the frozen holder is not told its item was added')
  t.same(r.last?.error, { code: -32000, message: 'Handle lock was lost; the changes of this call were not saved.' })
  t.same(await itemsOf(p3.url, basket), ['fresh'], 'the stale save was fenced')
  // Its lease ran out by the clock: the save is not even tried ('lost'); had it been, the fence would refuse it ('fenced').
  t.ok(p3.logs.find(l => l.level === 40 && (l.result === 'lost' || l.result === 'fenced')), 'the woken process logged the dropped save')
})
