/**
 * The lock is on by default (issue 35, item 1): without a `sessions.lock` option the plugin locks
 * with the lock matching its store, so parallel read-modify-writes on one state handle keep every
 * change; `lock: false` (the demo's MCP_LOCK=none) turns it off, and the same run loses items.
 *
 * - in process: the demo with the memory store, default lock vs `lock: false`; a store of the app's
 *   own without a lock: the in-process lock, and a start-up warning that it is per process;
 * - 2 demo processes on one redis-server behind a round-robin proxy: the Redis store with the
 *   default lock (the Redis lock on the store's client) vs MCP_LOCK=none.
 */
import t from 'tap'
import Fastify from 'fastify'
import { Writable } from 'node:stream'
import mcp, { MemorySessionStore, type SessionStore } from '../../lib/index.js'
import { buildDemo, registerDemoTools } from '../../examples/server.js'
import { modernPost, readReply, serve, type Reply } from '../helpers/http-client.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { startProxy } from '../many/fixtures/proxy.js'
import { startCluster } from './fixtures/cluster.js'

t.setTimeout(120_000)

const N = 30
const all = Array.from({ length: N }, (_, i) => `item-${i}`).sort()

async function call (url: string, name: string, args: Record<string, unknown>): Promise<Reply> {
  return await readReply(await modernPost(url, 'tools/call', { name, arguments: args }))
}

/** N parallel `basket_add {delayMs: 20}` on one new basket; what each call said, and the basket after. */
async function hammer (url: string): Promise<{ items: string[], counts: unknown[] }> {
  const basket = (await call(url, 'basket_create', {})).last?.result?.structuredContent?.basket
  if (typeof basket !== 'string') throw new Error('basket_create failed')
  const replies = await Promise.all(all.map(async item => await call(url, 'basket_add', { basket, item, delayMs: 20 })))
  const items = (await call(url, 'basket_get', { basket })).last?.result?.structuredContent?.items
  return { items, counts: replies.map(r => r.last?.result?.structuredContent?.count) }
}

t.test('memory store, no lock option: 30 parallel basket_add keep 30 items', async t => {
  const app = await buildDemo({ logger: false, env: {} })
  t.teardown(async () => { await app.close() })
  const { url } = await serve(t, app)
  const run = await hammer(url)
  t.same([...run.items].sort(), all, 'every item is in the basket, once')
  t.same([...run.counts].sort((a, b) => Number(a) - Number(b)), all.map((_, i) => i + 1), 'each call saw the ones before it')
})

t.test('memory store, lock: false (MCP_LOCK=none): the same run loses items', async t => {
  const app = await buildDemo({ logger: false, env: { MCP_LOCK: 'none' } })
  t.teardown(async () => { await app.close() })
  const { url } = await serve(t, app)
  const run = await hammer(url)
  t.ok(run.items.length < N, `items were lost: ${run.items.length} < ${N}`)
})

/** A store of the app's own: every call goes to a memory store it wraps. */
function customStore (): SessionStore {
  const inner = new MemorySessionStore()
  return {
    ttl: inner.ttl,
    create: async (id, data, o) => { await inner.create(id, data, o) },
    load: async (id) => await inner.load(id),
    save: async (id, changes) => await inner.save(id, changes),
    destroy: async (id) => await inner.destroy(id),
    exists: async (id) => await inner.exists(id),
    gc: async () => await inner.gc(),
    close: async () => { await inner.close() }
  }
}

t.test('a custom store without a lock: the in-process lock, and a warning that it is per process', async t => {
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, done) { lines.push(JSON.parse(String(chunk))); done() } })
  const app = Fastify({ logger: { level: 'warn', stream } })
  t.teardown(async () => { await app.close() })
  await app.register(mcp, { sessions: { store: customStore() } })
  registerDemoTools(app.mcp)
  await app.ready()
  t.ok(lines.some(l => l.level === 40 && /this process only/.test(l.msg)), 'warned at start-up')
  const { url } = await serve(t, app)
  const run = await hammer(url)
  t.same([...run.items].sort(), all, 'every item is in the basket, once')
})

t.test('the bundled stores get no warning', async t => {
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, done) { lines.push(JSON.parse(String(chunk))); done() } })
  const app = Fastify({ logger: { level: 'warn', stream } })
  t.teardown(async () => { await app.close() })
  await app.register(mcp, {})
  await app.ready()
  t.same(lines.filter(l => /this process only/.test(l.msg)), [])
})

t.test('Redis store over 2 processes', async t => {
  const redisServer = await startRedisServer(t)
  const base = { MCP_STORE: 'redis', REDIS_URL: redisServer.url }
  const [locked, unlocked] = await Promise.all([
    startCluster(t, 2, base),
    startCluster(t, 2, { ...base, MCP_LOCK: 'none' })
  ])

  t.test('no MCP_LOCK (the default lock): 30 parallel basket_add keep 30 items', async t => {
    const proxy = await startProxy(t, locked.map(p => p.url))
    const run = await hammer(proxy.url)
    t.same([...run.items].sort(), all, 'every item is in the basket, once')
  })

  t.test('MCP_LOCK=none (lock: false): the same run loses items', async t => {
    const proxy = await startProxy(t, unlocked.map(p => p.url))
    const run = await hammer(proxy.url)
    t.ok(run.items.length < N, `items were lost: ${run.items.length} < ${N}`)
  })
})
