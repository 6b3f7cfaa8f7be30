/**
 * Tools on state handles with the Redis store and lock, in one process, against a private
 * redis-server: a call on a handle costs exactly 2 Redis round trips (take-lock+read, save+release);
 * the handle's keys carry their own hash tag; foreign, unknown and garbage handles leave no key
 * (garbage never reaches Redis); Redis stopped mid-way answers 503 and keeps nothing, and the
 * basket works again once Redis is back.
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import mcp, { injectClient, McpError, RedisSessionLock, RedisSessionStore, type InjectClient } from '../../lib/index.js'
import { registerBasketTools } from '../../examples/demo-tools.js'
import { tokensAuth } from '../../examples/server.js'
import { failFastRedis } from '../helpers/fail-fast-redis.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { until } from '../helpers/time.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url, { maxRetriesPerRequest: 1 })
t.teardown(() => { admin.disconnect() })

let lock: RedisSessionLock | undefined

async function build (): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  // Fail fast while Redis is down: a 503 at once rather than commands queued for minutes.
  const client = await failFastRedis(t, server.url)
  // A lock made from a URL owns its client: the app that made it closes it.
  const own = new RedisSessionLock({ redis: server.url, timeout: 500, ttl: 1000 })
  lock = own
  t.teardown(() => own.close())
  await own.ready()
  await app.register(mcp, {
    requestState: { secret: 'handle-redis-secret' },
    auth: tokensAuth('a:alice,b:bob'),
    sessions: { store: new RedisSessionStore({ redis: client }), lock: own }
  })
  registerBasketTools(app.mcp)
  await app.ready()
  return app
}

const app = await build()
const alice = injectClient(app, { protocolVersion: '2026-07-28', headers: { authorization: 'Bearer a' } })
const bob = injectClient(app, { protocolVersion: '2026-07-28', headers: { authorization: 'Bearer b' } })

async function newBasket (c: InjectClient): Promise<string> {
  return (await c.callTool('basket_create')).structuredContent?.basket as string
}

t.test('a call on a handle: exactly 2 Redis round trips; the handle has its own hash tag', async t => {
  const basket = await newBasket(alice)
  t.same(await admin.keys('*'), [`mcp:{~basket~${basket}}:s`], 'one hash, tagged with the handle')
  await alice.callTool('basket_add', { basket, item: 'warm-up' }) // scripts loaded
  const { value, commands } = await commandsSent(admin, async () => await alice.callTool('basket_add', { basket, item: 'pear' }))
  t.same(value.structuredContent, { count: 2 })
  t.same(commands, ['evalsha', 'evalsha'], 'take-lock+read, save+release')
  t.ok(await admin.pttl(`mcp:{~basket~${basket}}:s`) > 59 * 60_000, 'the idle TTL is the kind\'s (1 hour), refreshed by the call')
})

t.test('foreign, unknown and garbage handles: one text, no key; garbage never reaches Redis', async t => {
  const basket = await newBasket(alice)
  const before = (await admin.keys('*')).sort()
  const refused = async (c: InjectClient, id: string): Promise<string[]> => {
    const { value, commands } = await commandsSent(admin, async () => await c.callTool('basket_add', { basket: id, item: 'x' }))
    t.same([value.content, value.isError], [[{ type: 'text', text: 'Unknown or expired basket handle.' }], true], JSON.stringify(id.slice(0, 24)))
    return commands
  }
  t.ok((await refused(bob, basket)).length > 0, 'someone else\'s: looked up')
  t.ok((await refused(alice, 'Q'.repeat(32))).length > 0, 'unknown: looked up')
  for (const garbage of ['{x}', '*', '../x', 'a'.repeat(4096), '~basket~x', 'a b']) {
    t.same(await refused(alice, garbage), [], 'garbage: no command at all')
  }
  t.same((await admin.keys('*')).sort(), before, 'no key created or left behind (no lock key either)')
})

t.test('Redis refusing writes mid-call: the call answers 503 and keeps nothing; the basket works again', async t => {
  const basket = await newBasket(alice)
  await alice.callTool('basket_add', { basket, item: 'before' })
  const running = alice.callTool('basket_add', { basket, item: 'during', delayMs: 300 }).catch((err: unknown) => err)
  await until(async () => await admin.exists(`mcp:{~basket~${basket}}:lock`) === 1, { what: 'the lease to be taken' })
  // Out of memory with no eviction: Redis refuses every script that may write, the save among them.
  await admin.config('SET', 'maxmemory-policy', 'noeviction')
  await admin.config('SET', 'maxmemory', '1')
  t.teardown(async () => { await admin.config('SET', 'maxmemory', '0') })
  const r = await running
  await admin.config('SET', 'maxmemory', '0')
  t.ok(r instanceof McpError, 'an error, not a result')
  t.match(r, { status: 503, code: -32000, message: 'State store is unavailable.' })
  // The lease the failed save could not release expires after its TTL (1 s here).
  await until(async () => (await alice.callTool('basket_add', { basket, item: 'after' }).catch(() => null))?.structuredContent !== undefined,
    { timeout: 5000, what: 'the basket to take writes again' })
  t.same((await alice.callTool('basket_get', { basket })).structuredContent, { items: ['before', 'after'] }, 'nothing of the refused call')
})

t.test('Redis stopped: 503 at once (no crash, no hang); back up, handles work again', async t => {
  const basket = await newBasket(alice)
  await server.stop()
  const r = await alice.callTool('basket_add', { basket, item: 'during' }).catch((err: unknown) => err)
  t.match(r, { status: 503, code: -32000, message: /unavailable/ })
  const minted = await alice.callTool('basket_create').catch((err: unknown) => err)
  t.ok(minted instanceof McpError || (minted as { isError?: boolean }).isError === true, 'minting fails too, and says so')
  await server.start()
  // This server keeps nothing across a restart: the old basket is gone, a new one works.
  await until(async () => (await alice.callTool('basket_create').catch(() => null))?.structuredContent !== undefined,
    { timeout: 10_000, what: 'handles to be minted again' })
  // Minting goes through the store's client, a call on a handle through the lock's: two
  // connections that reconnect on their own schedules, up to a retry interval apart (often
  // 100 ms or more after a longer outage). Until the lock's is back too, a call answers "State
  // lock is unavailable", as it should.
  await (lock as RedisSessionLock).ready(10_000)
  const fresh = await newBasket(alice)
  t.same((await alice.callTool('basket_add', { basket: fresh, item: 'after' })).structuredContent, { count: 1 })
})
