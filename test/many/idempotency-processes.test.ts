/**
 * Idempotency keys across processes (the demo, examples/server.ts), on one Redis and on one
 * PostgreSQL database:
 * - 100 copies of one keyed `basket_add`, sent at once and spread over 3 processes → exactly one
 *   item; 100 answers equal to the first result, 99 of them marked as replays;
 * - a process SIGKILLed after its save committed and before it answered (its Redis connection runs
 *   through a TCP proxy that holds the save's reply and kills the process instead) → the retry,
 *   landing on another process, replays; the item is stored once.
 */
import t, { type Test } from 'tap'
import { modernPost, readReply, type Reply } from '../helpers/http-client.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { DEMO_ENTRY, startServer, type ServerProcess } from '../helpers/processes.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { startTcpProxy } from '../helpers/tcp-proxy.js'

t.setTimeout(240_000)
const REPLAY = 'fastify-mcp-http/idempotentReplay'
const COPIES = 100

const redis = await startRedisServer(t)
const db = await createTestDatabase(t)
const common = { MCP_STATE_SECRET: 'idempotency-many-secret-0123456789', MCP_LOCK_TIMEOUT_MS: '30000', MCP_LOCK_TTL_MS: '2000' }
const BACKENDS: Record<string, Record<string, string>> = {
  redis: { ...common, MCP_STORE: 'redis', MCP_LOCK: 'redis', REDIS_URL: redis.url },
  postgres: { ...common, MCP_STORE: 'postgres', MCP_LOCK: 'postgres', DATABASE_URL: db.url }
}

async function call (url: string, name: string, args: Record<string, unknown>, idempotencyKey?: string): Promise<Reply> {
  return await readReply(await modernPost(url, 'tools/call', idempotencyKey === undefined ? { name, arguments: args } : { name, arguments: args, idempotencyKey }))
}

async function newBasket (url: string): Promise<string> {
  const basket = (await call(url, 'basket_create', {})).last?.result?.structuredContent?.basket
  if (typeof basket !== 'string') throw new Error('basket_create failed')
  return basket
}

const itemsOf = async (url: string, basket: string): Promise<string[]> => (await call(url, 'basket_get', { basket })).last?.result?.structuredContent?.items

async function three (t: Test, env: Record<string, string>): Promise<ServerProcess[]> {
  return await Promise.all(Array.from({ length: 3 }, async () => await startServer(t, DEMO_ENTRY, env)))
}

for (const [name, env] of Object.entries(BACKENDS)) {
  t.test(`${name}: ${COPIES} copies of one keyed basket_add over 3 processes → one item, ${COPIES - 1} replays`, async t => {
    const servers = await three(t, env)
    const basket = await newBasket(servers[0].url)
    const replies = await Promise.all(Array.from({ length: COPIES }, async (_, i) =>
      await call(servers[i % 3].url, 'basket_add', { basket, item: 'once', delayMs: 10 }, 'one-key')))
    t.same(replies.filter(r => r.status !== 200).map(r => r.last?.error), [], 'every copy answered 200')
    t.same(await itemsOf(servers[1].url, basket), ['once'], 'exactly one item')
    const results = replies.map(r => r.last?.result as Record<string, any>)
    t.equal(results.filter(r => r?._meta?.[REPLAY] === true).length, COPIES - 1, `${COPIES - 1} replays`)
    t.ok(results.every(r => r?.structuredContent?.count === 1), 'every answer is the first result')
  })
}

t.test('redis: a process SIGKILLed after its save committed, before it answered → the retry on another process replays', async t => {
  const proxy = await startTcpProxy(t, redis.port)
  const [victim, other] = await Promise.all([
    startServer(t, DEMO_ENTRY, { ...BACKENDS.redis, REDIS_URL: `redis://127.0.0.1:${proxy.port}` }),
    startServer(t, DEMO_ENTRY, BACKENDS.redis)
  ])
  const basket = await newBasket(other.url)
  const killed = proxy.arm('killed-after-save', async () => { await victim.kill() })
  const first = await call(victim.url, 'basket_add', { basket, item: 'killed-after-save' }, 'crash-key').then(() => 'answered', () => 'connection lost')
  await killed
  t.equal(first, 'connection lost', 'the client got no answer')
  const retry = await call(other.url, 'basket_add', { basket, item: 'killed-after-save' }, 'crash-key')
  t.equal(retry.status, 200)
  t.equal(retry.last?.result?._meta?.[REPLAY], true, 'the retry replays the committed call')
  t.same(await itemsOf(other.url, basket), ['killed-after-save'], 'stored once')
})
