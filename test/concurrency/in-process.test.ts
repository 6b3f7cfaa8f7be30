/**
 * The session lock seen from the wire, one process: a busy session answers 503 after the lock
 * timeout; handlers waiting for the client do not hold the lock; a client that aborts frees the
 * lease at once; DELETE takes the lock and nothing writes a deleted session back. Each scenario
 * runs with `MemorySessionLock` (memory store) and, where it matters, `RedisSessionLock` (Redis
 * store, the one-round-trip path) on a private redis-server; after each one the hub, the lock's
 * maps and the Redis lock keys are empty.
 */
import t from 'tap'
import { Redis } from 'ioredis'
import {
  MemorySessionLock, MemorySessionStore, RedisSessionLock, RedisSessionStore,
  type SessionStore
} from '../../lib/index.js'
import { shownId } from '../../lib/util/shown-id.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { assertIdle, startApp, type InProcess, type Teardown } from './fixtures/app.js'
import { callTool, counterOf, deleteSession, initialize, post, type Reply } from '../helpers/http-client.js'
import { SseReader } from '../helpers/sse.js'
import { sleep, until } from '../helpers/time.js'
import { headers, newId } from '../helpers/wire.js'

const redisServer = await startRedisServer(t)
const redis = new Redis(redisServer.url)
t.teardown(async () => { await redis.quit().catch(() => redis.disconnect()) })

const BUSY = 'Another request of this session is still being processed.'

interface Setup extends InProcess {
  kind: 'memory' | 'redis'
  lock: MemorySessionLock | RedisSessionLock
  store: SessionStore
  /** Whether the lock of `sid` is held right now (the lock's map, or the Redis key). */
  held (sid: string): Promise<boolean>
  /** Whether the session exists in the backend (`store.exists`, or Redis EXISTS). */
  exists (sid: string): Promise<boolean>
  idle (t: Parameters<typeof assertIdle>[0]): Promise<void>
}

async function memorySetup (t: Teardown, timeout: number, _ttl?: number): Promise<Setup> {
  const lock = new MemorySessionLock({ timeout })
  const store = new MemorySessionStore()
  const app = await startApp(t, { store, lock, close: async () => { await lock.close(); await store.close?.() } })
  return {
    ...app,
    kind: 'memory',
    lock,
    store,
    held: async () => lock.size > 0,
    exists: async (sid) => await store.exists(sid),
    idle: async (t) => { await assertIdle(t, { app: app.app, lock }) }
  }
}

async function redisSetup (t: Teardown, timeout: number, ttl = 10_000): Promise<Setup> {
  const client = new Redis(redisServer.url)
  const lock = new RedisSessionLock({ redis: redisServer.url, timeout, ttl })
  await lock.ready()
  const store = new RedisSessionStore({ redis: client })
  const app = await startApp(t, {
    store,
    lock,
    close: async () => { await lock.close(); await client.quit().catch(() => client.disconnect()) }
  })
  return {
    ...app,
    kind: 'redis',
    lock,
    store,
    held: async (sid) => await redis.exists(`mcp:{${sid}}:lock`) === 1,
    exists: async (sid) => await redis.exists(`mcp:{${sid}}:s`) === 1,
    idle: async (t) => { await assertIdle(t, { app: app.app, lock, redis }) }
  }
}

const setups = [
  ['MemorySessionLock', memorySetup],
  ['RedisSessionLock', redisSetup]
] as const

// ─── busy: 503 after the lock timeout ────────────────────────────────────────────────────────

for (const [name, setup] of setups) {
  t.test(`${name}: a second request of a busy session gets 503 after the lock timeout`, async t => {
    const s = await setup(t, 200)
    const session = await initialize(s.url)
    const first = callTool(s.url, session, 'counter_add', { delayMs: 1000 })
    await until(async () => await s.held(session.sid), { timeout: 30_000, what: 'the first request to hold the lock' })

    // The second one through app.inject, the first over the socket: both paths see one lock.
    const id = newId()
    const started = performance.now()
    const second = await s.app.inject({
      method: 'POST',
      url: '/mcp',
      headers: headers(session),
      payload: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'counter_add', arguments: { by: 5 } } })
    })
    const waited = performance.now() - started
    t.equal(second.statusCode, 503, 'HTTP 503')
    t.same(second.json(), { jsonrpc: '2.0', id, error: { code: -32000, message: BUSY } }, 'JSON-RPC -32000 under the request\'s id')
    t.ok(waited >= 180 && waited < 900, `refused after the 200 ms timeout, before the first finished (${Math.round(waited)} ms)`)

    const r = await first
    t.equal(r.status, 200, 'the first request still gets its 200')
    t.equal(r.last?.result?.structuredContent?.counter, 1, 'and its result')
    t.equal(await counterOf(s.url, session), 1, 'the session is intact: the refused request changed nothing')
    t.ok(s.logs.find(l => l.level === 40 && l.msg === 'session busy: lock wait timed out' && l.sessionId === shownId(session.sid)), 'logged as a warning')
    await s.idle(t)
  })
}

// ─── waiting for the client does not hold the lock ───────────────────────────────────────────

for (const [name, setup] of setups) {
  t.test(`${name}: two tool calls waiting for the client (elicitation) both proceed`, async t => {
    // A 1 s lock timeout: if the first call kept the lock while it waits, the second would get 503.
    const s = await setup(t, 1000)
    const session = await initialize(s.url, { capabilities: { elicitation: {} } })
    const open = async (id: number): Promise<SseReader> => {
      const res = await fetch(s.url, {
        method: 'POST',
        headers: headers(session),
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'ask_name', arguments: {} } })
      })
      t.equal(res.status, 200, `call ${id}: 200`)
      t.match(res.headers.get('content-type'), /^text\/event-stream/, `call ${id}: a stream`)
      const reader = new SseReader(res)
      t.teardown(() => reader.cancel())
      return reader
    }
    const idA = newId()
    const idB = newId()
    const [a, b] = await Promise.all([open(idA), open(idB)])
    const isElicit = (m: Record<string, any>): boolean => m.method === 'elicitation/create'
    const [askA, askB] = await Promise.all([a.waitForMessage(isElicit, 5000), b.waitForMessage(isElicit, 5000)])
    t.not(askA.id, askB.id, 'each call asks the client with its own request id')
    t.equal(askA.params.message, 'What is your name?')
    t.notOk(await s.held(session.sid), 'nobody holds the lock while both wait for the client')

    // Answer the second first.
    const answer = async (id: unknown, name: string): Promise<Reply> =>
      await post(s.url, { jsonrpc: '2.0', id, result: { action: 'accept', content: { name } } }, session)
    t.equal((await answer(askB.id, 'Bob')).status, 202, 'answer to B: 202')
    t.equal((await answer(askA.id, 'Ada')).status, 202, 'answer to A: 202')
    const [doneA, doneB] = await Promise.all([a.waitForMessage(m => m.id === idA, 5000), b.waitForMessage(m => m.id === idB, 5000)])
    t.same(doneA.result?.content, [{ type: 'text', text: 'Hello, Ada!' }], 'A completes with its own name')
    t.same(doneB.result?.content, [{ type: 'text', text: 'Hello, Bob!' }], 'B completes with its own name')
    await s.idle(t)
  })
}

// ─── a client that aborts frees the lease at once ────────────────────────────────────────────

for (const [name, setup] of setups) {
  t.test(`${name}: a client that aborts mid-request frees the lease at once`, async t => {
    // Timeout 5 s and (Redis) a 10 s lease: only the abort can explain a fast second request.
    const s = await setup(t, 5000, 10_000)
    const session = await initialize(s.url)
    const controller = new AbortController()
    const aborted = callTool(s.url, session, 'counter_add', { delayMs: 5000 }, { signal: controller.signal })
      .then(() => 'answered', (err: Error) => err.name)
    await until(async () => await s.held(session.sid), { timeout: 30_000, what: 'the request to hold the lock' })
    await sleep(100)
    controller.abort()
    const abortedAt = performance.now()
    t.equal(await aborted, 'AbortError', 'the client gave up')

    const r = await callTool(s.url, session, 'counter_add', {})
    const took = performance.now() - abortedAt
    t.equal(r.status, 200, 'the next request of the session succeeds')
    t.equal(r.last?.result?.structuredContent?.counter, 1, 'the aborted handler wrote nothing')
    // Against the aborted handler's own length in the same run, not a figure a busy machine can miss.
    t.ok(took < 5000 / 2, `${Math.round(took)} ms after the abort: not after the 5 s handler or the lease TTL`)
    await s.idle(t)
  })
}

// ─── a lease passed on inside the process ────────────────────────────────────────────────────

t.test('RedisSessionLock: requests that change nothing pass the lease on to the next one queued here, without Redis', async t => {
  const s = await redisSetup(t, 5000)
  const session = await initialize(s.url)
  // Every command any client sent (a round trip each), not only the scripts: a path that added a
  // plain GET or PEXPIRE would cost a round trip too.
  const count = async <T>(fn: () => Promise<T>): Promise<{ value: T, commands: number, names: string[] }> => {
    const { value, commands } = await commandsSent(redis, fn)
    return { value, commands: commands.length, names: commands }
  }
  // One at a time: nobody waits, so each request takes and releases the lease (2 scripts).
  const serial = await count(async () => { for (let i = 0; i < 5; i++) t.equal(await counterOf(s.url, session), 0) })
  t.equal(serial.commands, 10, `alone: 2 commands per request (${serial.commands} for 5: ${serial.names.join(' ')})`)
  t.ok(serial.names.every(c => c === 'eval' || c === 'evalsha'), 'each a script')

  // One request holds the lease (300 ms), 19 more queue behind it; each changes nothing
  // (slow_count), so the lease goes down the queue, back through Redis every MAX_PASS_ON passes.
  const n = 20
  const burst = await count(async () => {
    const first = callTool(s.url, session, 'slow_count', { steps: 1, intervalMs: 300 })
    // The lock's own count (a Redis EXISTS from here would be counted as a command).
    await until(() => (s.lock as RedisSessionLock).held > 0, { timeout: 30_000, what: 'the first request to hold the lock' })
    const rest = Array.from({ length: n - 1 }, async () => await callTool(s.url, session, 'slow_count', { steps: 1, intervalMs: 5 }))
    return await Promise.all([first, ...rest])
  })
  t.ok(burst.value.every(r => r.status === 200 && r.last?.result?.content?.[0]?.text === 'Counted to 1.'), 'every answer right')
  t.ok(burst.commands <= 6, `${burst.commands} commands for ${n} parallel requests (${2 * n} without passing the lease on): ${burst.names.join(' ')}`)

  // Writes among them are saved and released through Redis as before, and seen by what follows.
  const mixed = await Promise.all(Array.from({ length: 30 }, async (_, i) =>
    await callTool(s.url, session, i % 2 === 0 ? 'counter_add' : 'counter_get', i % 2 === 0 ? { by: 1 } : {})))
  t.ok(mixed.every(r => r.status === 200), 'all answered')
  const seen = mixed.map(r => r.last?.result?.structuredContent?.counter as number)
  t.same(seen.filter((_, i) => i % 2 === 0).sort((a, b) => a - b), Array.from({ length: 15 }, (_, i) => i + 1), 'each add saw every earlier add')
  t.ok(seen.every(v => v >= 0 && v <= 15))
  t.equal(await counterOf(s.url, session), 15, 'no lost update')

  // A DELETE queued among readers ends the session for the readers behind it.
  const readers = Array.from({ length: 10 }, async () => await callTool(s.url, session, 'counter_get'))
  const deleted = deleteSession(s.url, session)
  const later = Array.from({ length: 10 }, async () => await callTool(s.url, session, 'counter_get'))
  t.equal(await deleted, 200)
  const statuses = (await Promise.all([...readers, ...later])).map(r => r.status)
  t.ok(statuses.every(st => st === 200 || st === 404), `200 before the DELETE, 404 after (${statuses.join(',')})`)
  t.equal(await redis.exists(`mcp:{${session.sid}}:s`), 0, 'the session is gone')
  await s.idle(t)
})

// ─── DELETE takes the lock ───────────────────────────────────────────────────────────────────

for (const [name, setup] of setups) {
  t.test(`${name}: DELETE ends a busy session at once; the running request is told, and nothing writes the session back`, async t => {
    const s = await setup(t, 5000)
    const session = await initialize(s.url)
    const order: string[] = []
    const running = callTool(s.url, session, 'counter_add', { delayMs: 600 }).then(r => { order.push('counter_add'); return r })
    await until(async () => await s.held(session.sid), { timeout: 30_000, what: 'the request to hold the lock' })
    const started = performance.now()
    const status = await deleteSession(s.url, session)
    order.push('DELETE')
    const took = performance.now() - started
    t.equal(status, 200, 'DELETE ends the session')
    const r = await running
    t.same(order, ['DELETE', 'counter_add'], `DELETE answered first, without waiting for the lock the handler holds (${Math.round(took)} ms)`)
    t.equal(r.status, 404, 'the running request is not reported as done')
    t.equal(r.last?.error?.code, -32001, 'it is told the session is gone')
    t.equal(r.last?.result, undefined, 'no result')

    const after = await callTool(s.url, session, 'counter_get')
    t.equal(after.status, 404, 'the session stays ended (404)')
    t.notOk(await s.exists(session.sid), 'not in the store: the running request did not write it back')
    if (s.kind === 'redis') t.equal(await redis.exists(`mcp:{${session.sid}}:s`), 0, 'Redis EXISTS is 0')
    await s.idle(t)
  })

  t.test(`${name}: DELETE while a handler waits for the client; the handler cannot resurrect the session`, async t => {
    const s = await setup(t, 5000)
    const session = await initialize(s.url, { capabilities: { elicitation: {} } })
    // Give the session a counter first, so a write-back would be visible.
    t.equal((await callTool(s.url, session, 'counter_add', { by: 7 })).last?.result?.structuredContent?.counter, 7)
    const id = newId()
    const res = await fetch(s.url, {
      method: 'POST',
      headers: headers(session),
      body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'ask_name', arguments: {} } })
    })
    const reader = new SseReader(res)
    t.teardown(() => reader.cancel())
    const ask = await reader.waitForMessage(m => m.method === 'elicitation/create', 5000)
    // Answered before the client answers the handler's question (below): it did not wait for it.
    t.equal(await deleteSession(s.url, session), 200, 'DELETE goes through: the waiting handler holds no lock')
    // A late answer: the handler must not take the session back.
    const late = await post(s.url, { jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name: 'Zed' } } }, session)
    t.equal(late.status, 404, 'an answer to an ended session: 404')
    await until(() => reader.closed, { timeout: 3000, what: 'the POST stream to end' }).catch(() => {})
    t.ok(reader.closed, 'the waiting POST stream ended')
    t.notOk(reader.messages.some(m => m.id === id && m.result !== undefined), 'no success result for the ended session')
    // The stream ends after the handler's scope closed: anything it wrote back is in the store now.
    t.notOk(await s.exists(session.sid), 'the session was not written back')
    t.equal((await callTool(s.url, session, 'counter_get')).status, 404, 'still 404')
    await s.idle(t)
  })
}
