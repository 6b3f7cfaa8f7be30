/**
 * An ended session leaves nothing behind (issue 17, item 3): after DELETE, after expiry, after
 * `gc()`, no key of the session is left in Redis (every key is scanned and matched against the
 * session id, which all of its keys carry in their hash tag), and no in-process entry is left on
 * any instance (`app.mcp.status()`, the memory bus and event log). Streams still writing when the
 * session ends create nothing again. Two plugin instances share a private redis-server, so the
 * answer to an elicitation, the resumed stream and the DELETE land on another instance than the
 * work they end.
 */
import Fastify, { type FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { registerDemoTools } from '../../examples/demo-tools.js'
import mcp, {
  LOCK_CLIENT_OPTIONS, MemoryBus, MemoryEventLog, MemorySessionLock, MemorySessionStore, RedisSessionLock, RedisSessionStore,
  type SessionStore
} from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { failFastRedis } from '../helpers/fail-fast-redis.js'
import { callTool, counterOf, deleteSession, initialize, openGet, post, send } from '../helpers/http-client.js'
import { SseReader } from '../helpers/sse.js'
import { until } from '../helpers/time.js'
import { newId, type Session } from '../helpers/wire.js'

t.setTimeout(120_000)
const server = await startRedisServer(t)
const admin = await failFastRedis(t, server.url, LOCK_CLIENT_OPTIONS)

interface Instance { app: FastifyInstance, url: string }

/**
 * The demo tools with a Redis store and lock, and the Redis bus and event log (`redis`): what one
 * of several instances runs. `ttl`: the sessions' idle ttl.
 */
async function redisInstance (t: Test, o: { ttl?: number } = {}): Promise<Instance> {
  const client = await failFastRedis(t, server.url, LOCK_CLIENT_OPTIONS)
  const lock = new RedisSessionLock({ redis: server.url, timeout: 5000 })
  await lock.ready()
  const app = Fastify({ logger: false, forceCloseConnections: true })
  t.teardown(async () => { await app.close(); await lock.close() })
  await app.register(mcp, {
    path: '/mcp',
    serverInfo: { name: 'ended-sessions', version: '1.0.0' },
    sessions: { store: new RedisSessionStore({ redis: client, ttl: o.ttl }), lock, gcProbability: 0 },
    redis: client,
    requestState: { secret: 'ended-sessions-secret-0123456789abcdef' }
  })
  registerDemoTools(app.mcp)
  return { app, url: `${await app.listen({ port: 0, host: '127.0.0.1' })}/mcp` }
}

/** Every key in Redis that belongs to the session (its id is in the hash tag of each). */
async function keysOf (sid: string): Promise<string[]> {
  const found: string[] = []
  let cursor = '0'
  do {
    const [next, keys] = await admin.scan(cursor, 'COUNT', 1000)
    cursor = next
    for (const k of keys) if (k.includes(sid)) found.push(k)
  } while (cursor !== '0')
  return found.sort()
}

/** The instances hold nothing of any session: no topic, GET stream or waiting handler. */
async function assertNothingHeld (t: Test, apps: FastifyInstance[]): Promise<void> {
  const idle = (): boolean => apps.every(a => a.mcp.status().sessionsHeld === 0 && a.mcp.status().getStreams === 0 && a.mcp.status().pendingClientRequests === 0)
  await until(idle, { timeout: 5000, what: 'the instances to let go of the session' }).catch(() => {})
  for (const [i, a] of apps.entries()) t.same(a.mcp.status(), { ...a.mcp.status(), sessionsHeld: 0, getStreams: 0, pendingClientRequests: 0 }, `instance ${i + 1} holds nothing`)
}

/**
 * A session's life on two instances: calls on both, an elicitation asked on `a` and answered on
 * `b`, a response stream dropped on `a` and resumed (GET + Last-Event-ID) on `b`, and a GET
 * stream on `b` that is still open. Returns the open GET stream.
 */
async function live (t: Test, a: Instance, b: Instance, logged: (sid: string) => Promise<boolean> = loggedInRedis): Promise<{ session: Session, get: SseReader }> {
  const session = await initialize(a.url, { capabilities: { elicitation: {} } })
  t.equal((await callTool(b.url, session, 'counter_add', { by: 2 })).status, 200, 'a call on b')
  t.equal(await counterOf(a.url, session), 2, 'seen on a')

  const askId = newId()
  const asking = new SseReader(await send(a.url, { jsonrpc: '2.0', id: askId, method: 'tools/call', params: { name: 'ask_name', arguments: {} } }, session))
  const ask = await asking.waitForMessage(m => m.method === 'elicitation/create')
  t.equal((await post(b.url, { jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name: 'Ada' } } }, session)).status, 202, 'the answer lands on b')
  t.same((await asking.waitForMessage(m => m.id === askId)).result?.content, [{ type: 'text', text: 'Hello, Ada!' }], 'the elicitation completes on a')

  const countId = newId()
  const ac = new AbortController()
  const counting = new SseReader(await send(a.url, {
    jsonrpc: '2.0', id: countId, method: 'tools/call', params: { name: 'slow_count', arguments: { steps: 4, intervalMs: 50 }, _meta: { progressToken: 'p' } }
  }, session, { signal: ac.signal }))
  const seen = await counting.waitFor(e => e.json?.method === 'notifications/progress')
  ac.abort()
  await counting.cancel()
  const resumed = await openGet(b.url, session, seen.id)
  t.match((await resumed.waitForMessage(m => m.id === countId)).result?.content, [{ text: 'Counted to 4.' }], 'the dropped stream is resumed on b')
  await resumed.waitClosed()

  const get = await openGet(b.url, session)
  await get.waitFor(e => e.id !== undefined)
  t.ok(await logged(session.sid), 'the streams were logged')
  return { session, get }
}

const loggedInRedis = async (sid: string): Promise<boolean> => (await keysOf(sid)).some(k => k.includes(':ev:'))

t.test('Redis, two instances: a full lifecycle then DELETE leaves no key of the session and nothing held', async t => {
  const [a, b] = [await redisInstance(t), await redisInstance(t)]
  const { session, get } = await live(t, a, b)
  t.equal(await deleteSession(a.url, session), 200, 'DELETE on a')
  await get.waitClosed()
  t.pass('the GET stream on b ended')
  t.same(await keysOf(session.sid), [], 'no key of the session is left')
  await assertNothingHeld(t, [a.app, b.app])
})

t.test('Redis: streams still writing after DELETE, and a handler waiting for an answer, create nothing again', async t => {
  const [a, b] = [await redisInstance(t), await redisInstance(t)]
  const { session, get } = await live(t, a, b)
  // A handler on b waits for an answer that never comes (it lets go of the session lock while it
  // waits); a call on b keeps writing progress.
  const askId = newId()
  const asking = new SseReader(await send(b.url, { jsonrpc: '2.0', id: askId, method: 'tools/call', params: { name: 'ask_name', arguments: {} } }, session))
  await asking.waitForMessage(m => m.method === 'elicitation/create')
  t.ok((await keysOf(session.sid)).some(k => k.includes(':exp:')), 'the expected answer is registered in Redis')
  const countId = newId()
  const counting = new SseReader(await send(b.url, {
    jsonrpc: '2.0', id: countId, method: 'tools/call', params: { name: 'slow_count', arguments: { steps: 100, intervalMs: 30 }, _meta: { progressToken: 'q' } }
  }, session), { timeout: 10_000 })
  await counting.waitFor(e => e.json?.method === 'notifications/progress')
  t.equal(await deleteSession(a.url, session), 200, 'DELETE on a')
  // Positive signals: every writer of the session is done.
  await Promise.all([get.waitClosed(), counting.waitClosed(10_000), asking.waitClosed()])
  t.pass('the GET stream, the running call and the waiting handler on b all ended')
  const last = counting.messages.at(-1)
  t.ok(last?.id === countId && last?.error !== undefined, 'the running call ended with an error, not a result')
  t.equal(counting.events.filter(e => e.json !== undefined).at(-1)?.id, undefined, 'that answer came without an event id: the log refused it')
  t.same(await keysOf(session.sid), [], 'no key of the session was created again')
  await assertNothingHeld(t, [a.app, b.app])
})

t.test('Redis: a session that expires leaves no key behind (its streams never outlive it)', async t => {
  const [a, b] = [await redisInstance(t, { ttl: 3000 }), await redisInstance(t, { ttl: 3000 })]
  const { session, get } = await live(t, a, b)
  await get.cancel()
  await until(async () => await admin.exists(`mcp:{${session.sid}}:s`) === 0, { timeout: 10_000, what: 'the session to expire' })
  t.same(await keysOf(session.sid), [], 'when the session hash is gone, nothing else of it is left')
  t.equal((await callTool(a.url, session, 'counter_get')).status, 404, 'and the session is gone')
  await assertNothingHeld(t, [a.app, b.app])
})

t.test('Redis: a flood of initialize + GET + DELETE leaves the key count flat', async t => {
  const [a, b] = [await redisInstance(t), await redisInstance(t)]
  const before = await admin.dbsize()
  const N = 40
  for (let i = 0; i < N; i++) {
    const session = await initialize(i % 2 === 0 ? a.url : b.url)
    const get = await openGet(i % 2 === 0 ? b.url : a.url, session)
    await get.waitFor(e => e.id !== undefined)
    t.equal(await deleteSession(i % 2 === 0 ? a.url : b.url, session), 200)
    await get.waitClosed()
  }
  t.equal(await admin.dbsize(), before, `${N} lifecycles: no key more than before`)
  await assertNothingHeld(t, [a.app, b.app])
})

/** The demo tools on memory backends the test can look into. */
async function memoryInstance (t: Test, store: SessionStore, o: { gcProbability?: number } = {}): Promise<Instance & { bus: MemoryBus, log: MemoryEventLog, lock: MemorySessionLock }> {
  const bus = new MemoryBus()
  const log = new MemoryEventLog()
  const lock = new MemorySessionLock()
  const app = Fastify({ logger: false, forceCloseConnections: true })
  t.teardown(async () => { await app.close(); await bus.close() })
  await app.register(mcp, {
    path: '/mcp',
    serverInfo: { name: 'ended-sessions', version: '1.0.0' },
    sessions: { store, lock, gcProbability: o.gcProbability ?? 0, gcDivisor: 1 },
    bus,
    eventLog: { store: log },
    requestState: { secret: 'ended-sessions-secret-0123456789abcdef' }
  })
  registerDemoTools(app.mcp)
  return { app, bus, log, lock, url: `${await app.listen({ port: 0, host: '127.0.0.1' })}/mcp` }
}

/** One instance's life of a session on memory backends; the open GET stream. */
async function liveInMemory (t: Test, m: Instance & { log: MemoryEventLog }): Promise<{ session: Session, get: SseReader }> {
  return await live(t, m, m, async () => m.log.size > 0)
}

/** Nothing of any session is held in the instance, its bus, event log or lock. */
async function assertMemoryEmpty (t: Test, m: Instance & { bus: MemoryBus, log: MemoryEventLog, lock: MemorySessionLock }): Promise<void> {
  await assertNothingHeld(t, [m.app])
  t.equal(m.log.size, 0, 'the event log keeps no stream')
  t.equal(m.bus.expected, 0, 'the bus expects no answer')
  t.equal(m.bus.channels, 1, 'the bus has no session channel (only the broadcast channel)')
  t.equal(m.lock.size, 0, 'the lock holds no session')
}

t.test('memory backends: DELETE leaves no in-process entry', async t => {
  const m = await memoryInstance(t, new MemorySessionStore())
  const { session, get } = await liveInMemory(t, m)
  t.equal(await deleteSession(m.url, session), 200)
  await get.waitClosed()
  await assertMemoryEmpty(t, m)
})

t.test('memory backends: a session removed by gc() is cleaned like a DELETEd one', async t => {
  const store = new MemorySessionStore({ ttl: 1500, sweepInterval: 0 })
  const m = await memoryInstance(t, store)
  const { session, get } = await liveInMemory(t, m)
  await until(async () => (await store.gc()).includes(session.sid), { timeout: 10_000, every: 100, what: 'gc() to remove the session' })
  await get.waitClosed()
  t.pass('its GET stream ended')
  await assertMemoryEmpty(t, m)
})

t.test('a store that does not report expiry: what the plugin\'s own gc runs remove is cleaned', async t => {
  const inner = new MemorySessionStore({ ttl: 1500, sweepInterval: 0 })
  // The same store without onExpired: only gc()'s return value tells what went.
  const store: SessionStore = {
    ttl: inner.ttl,
    create: async (...a) => { await inner.create(...a) },
    load: async (id) => await inner.load(id),
    save: async (id, changes) => await inner.save(id, changes),
    destroy: async (id) => await inner.destroy(id),
    exists: async (id) => await inner.exists(id),
    gc: async () => await inner.gc()
  }
  const m = await memoryInstance(t, store, { gcProbability: 1 })
  const { session, get } = await liveInMemory(t, m)
  // Every request runs gc (1/1); a stateless request from another client triggers it. The store is
  // not asked meanwhile: its exists() drops an expired session on the way, unreported, and the
  // next gc run would then have nothing to tell (the wait timed out when the session expired
  // between a run and the check).
  await until(async () => { await initialize(m.url); return get.closed }, { timeout: 10_000, every: 200, what: 'a gc run to remove the session' })
  t.pass('its GET stream ended')
  t.equal(await inner.exists(session.sid), false, 'the store no longer has it')
  t.equal(m.log.size, 0, 'its streams are gone')
})
