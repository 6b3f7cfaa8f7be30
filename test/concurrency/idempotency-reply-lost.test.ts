/**
 * A save whose reply is lost, on a real Redis and a real PostgreSQL: a TCP proxy between the
 * plugin and the backend forwards the save of a keyed `basket_add` (the server commits it), then
 * swallows the answer and cuts the connection. The client is told the outcome is unknown — never
 * "not saved" —; a retry with the same key, once the plugin has reconnected, replays the recorded
 * result; the item is stored exactly once. Without a key the answer is unknown all the same (and
 * a retry would add the item again: the reason keys exist).
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import mcp, { injectClient, McpError, PgSessionLock, PgSessionStore, RedisSessionLock, RedisSessionStore, type InjectClient, type McpPluginOptions } from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { failFastRedis } from '../helpers/fail-fast-redis.js'
import { mcpErrorOf } from '../helpers/mcp-error.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'

t.setTimeout(120_000)
const REPLAY = 'fastify-mcp-http/idempotentReplay'

async function build (t: Test, sessions: McpPluginOptions['sessions']): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { requestState: { secret: 'reply-lost-secret-0123456789' }, sessions })
  registerDemoTools(app.mcp)
  await app.ready()
  return app
}

type Backend = (t: Test) => Promise<{ sessions: McpPluginOptions['sessions'], proxy: TcpProxy }>

const BACKENDS: Record<string, Backend> = {
  redis: async (t) => {
    const server = await startRedisServer(t)
    const proxy = await startTcpProxy(t, server.port)
    const url = `redis://127.0.0.1:${proxy.port}`
    const lock = new RedisSessionLock({ redis: url, timeout: 5000 })
    t.teardown(async () => { await lock.close() })
    await lock.ready()
    const store = new RedisSessionStore({ redis: await failFastRedis(t, url) })
    return { sessions: { store, lock }, proxy }
  },
  postgres: async (t) => {
    const db = await createTestDatabase(t)
    const target = new URL(db.url)
    const proxy = await startTcpProxy(t, Number(target.port === '' ? 5432 : target.port))
    target.port = String(proxy.port)
    target.hostname = '127.0.0.1'
    const pool = db.pool({ connectionString: target.href, max: 4 })
    // An idle connection the proxy cut is reported on the pool (an app listens, as pg asks).
    pool.on('error', () => {})
    return { sessions: { store: new PgSessionStore({ pool }), lock: new PgSessionLock({ pool, timeout: 5000 }) }, proxy }
  }
}

async function newBasket (c: InjectClient): Promise<string> {
  return (await c.callTool('basket_create')).structuredContent?.basket as string
}

/** A retry, as a client does it: again while the backend is still being reconnected to (503 "unavailable"). */
async function retried<T> (call: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await call()
    } catch (err) {
      if (!(err instanceof McpError) || err.status !== 503 || /unknown/.test(err.message) || i > 100) throw err
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  }
}

for (const [name, backend] of Object.entries(BACKENDS)) {
  t.test(`${name}: the save's reply lost → told unknown; the retry with the same key replays; stored once`, async t => {
    const { sessions, proxy } = await backend(t)
    const app = await build(t, sessions)
    const c = injectClient(app, { protocolVersion: '2026-07-28' })
    const basket = await newBasket(c)
    await c.callTool('basket_add', { basket, item: 'warm-up' })
    const cut = proxy.arm('lost-reply-item')
    const err = await mcpErrorOf(c.callTool('basket_add', { basket, item: 'lost-reply-item' }, { idempotencyKey: 'retry-me' }))
    await cut
    t.equal(err.status, 503)
    t.match(err.message, /whether the changes of this call were saved is unknown/, 'unknown, never "not saved"')
    t.match(err.message, /same idempotency key/, 'and it says how to find out')
    const replay = await retried(async () => await c.callTool('basket_add', { basket, item: 'lost-reply-item' }, { idempotencyKey: 'retry-me' }))
    t.equal((replay as Record<string, any>)._meta?.[REPLAY], true, 'the retry replays: the save was kept')
    t.same(replay.structuredContent, { count: 2 }, 'the recorded result')
    const items = (await retried(async () => await c.callTool('basket_get', { basket }))).structuredContent?.items
    t.same(items, ['warm-up', 'lost-reply-item'], 'stored exactly once')

    const again = proxy.arm('unkeyed-item')
    const unkeyed = await mcpErrorOf(retried(async () => await c.callTool('basket_add', { basket, item: 'unkeyed-item' })))
    await again
    t.match(unkeyed.message, /unknown/, 'without a key: unknown as well')
    const after = (await retried(async () => await c.callTool('basket_get', { basket }))).structuredContent?.items
    t.same(after, ['warm-up', 'lost-reply-item', 'unkeyed-item'], 'it was kept: "not saved" would have been false')
  })
}
