/**
 * What the client is told is what was kept (in-process apps, a private redis-server for the
 * faults): a save that fails is never a success; a lost lease with a store that cannot fence
 * writes nothing; an undecodable session is a clear 503 that does not leak its lease; the members
 * of a batch see each other's changes; a request whose client left while it waited for the lock
 * never runs; a handler taking the lock back after the client answered goes first, and when it
 * cannot, its answer is logged and the session left as it was.
 */
import { EventEmitter, once } from 'node:events'
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { Type } from '@sinclair/typebox'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { shownId } from '../../lib/util/shown-id.js'
import mcp, {
  FileSessionLock, FileSessionStore, LOCK_CLIENT_OPTIONS, MemorySessionLock, MemorySessionStore, RedisSessionLock, RedisSessionStore,
  type McpPluginOptions, type SaveResult, type SessionChanges, type SessionLock, type SessionStore
} from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { assertIdle, startApp, type InProcess } from './fixtures/app.js'
import { callTool, counterOf, initialize, post } from '../helpers/http-client.js'
import { SseReader } from '../helpers/sse.js'
import { sleep, until } from '../helpers/time.js'
import { headers, newId, type Session } from '../helpers/wire.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
admin.on('error', () => {})
t.teardown(() => { admin.disconnect() })
const STORE_DOWN = 'Session store is unavailable.'
const LOCK_LOST = 'Session lock was lost; the changes of this request were not saved.'

/** Blocks the event loop, as a GC pause or a stalled process would: no timer can run. */
function freeze (ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

/**
 * The demo tools plus two that hold the session while doing nothing with `ctx.signal`;
 * `started` emits when `set_then_wait` runs.
 */
async function app (t: Test, store: SessionStore, lock: SessionLock | undefined, close?: () => Promise<void>): Promise<InProcess & { started: EventEmitter }> {
  const s = await startApp(t, { store, lock, close })
  const started = new EventEmitter()
  const wait = Type.Object({ ms: Type.Optional(Type.Integer()), freezeMs: Type.Optional(Type.Integer()) })
  s.app.mcp.tool({ name: 'set_then_wait', description: 'Sets x, then waits `ms` (or freezes the process for `freezeMs`).', input: wait },
    async ({ ms = 0, freezeMs }, ctx) => {
      started.emit('started')
      ctx.session?.set('x', (ctx.session.get<number>('x') ?? 0) + 1)
      if (freezeMs !== undefined) freeze(freezeMs)
      else await sleep(ms)
      return 'done'
    })
  s.app.mcp.tool({ name: 'read_then_wait', description: 'Reads the counter, then waits `ms`.', input: wait }, async ({ ms = 0 }, ctx) => {
    await sleep(ms)
    return String(ctx.session?.get<number>('counter') ?? 0)
  })
  s.app.mcp.tool({ name: 'read_x', description: 'Reads x.' }, async (_args, ctx) => String(ctx.session?.get<number>('x') ?? 0))
  return { ...s, started }
}

/** The demo tools on a memory store, with plugin options of the test's own. */
async function startCapped (t: Test, options: McpPluginOptions): Promise<{ url: string }> {
  const fastify = Fastify({ logger: false })
  t.teardown(async () => { await fastify.close() })
  await fastify.register(mcp, { ...options, requestState: { secret: 'told-kept-test-secret-0123456789' } })
  registerDemoTools(fastify.mcp)
  return { url: `${await fastify.listen({ port: 0, host: '127.0.0.1' })}/mcp` }
}

/** A Redis store and lock on the private server, each on a fail-fast client of its own. */
async function redisBackends (t: Test, lockOptions: { timeout?: number, ttl?: number } = {}): Promise<{ store: RedisSessionStore, lock: RedisSessionLock, close: () => Promise<void> }> {
  const client = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
  client.on('error', () => {})
  await new Promise(resolve => client.once('ready', resolve))
  const lock = new RedisSessionLock({ redis: server.url, timeout: lockOptions.timeout ?? 2000, ttl: lockOptions.ttl ?? 3000 })
  await lock.ready()
  return { store: new RedisSessionStore({ redis: client }), lock, close: async () => { await lock.close(); client.disconnect() } }
}

function refused (t: Test, r: { status: number, last?: Record<string, any> }, id: number, status: number, message: string): void {
  t.equal(r.status, status, `HTTP ${status}`)
  t.equal(r.last?.id, id, 'under the request\'s id')
  t.equal(r.last?.error?.code, status === 404 ? -32001 : -32000)
  t.equal(r.last?.error?.message, message)
  t.equal(r.last?.result, undefined, 'no result')
}

// ─── 1. a save that fails is never a success ──────────────────────────────────────────────────

t.test('Redis refuses writes mid-handler (maxmemory): 503, nothing kept, and the session works again', async t => {
  const { store, lock, close } = await redisBackends(t)
  const s = await app(t, store, lock, close)
  const session = await initialize(s.url)
  t.equal(await counterOf(s.url, session), 0)
  const running = callTool(s.url, session, 'counter_add', { by: 1, delayMs: 300 })
  await until(async () => await admin.exists(`mcp:{${session.sid}}:lock`) === 1, { timeout: 2000, what: 'the request to hold the lease' })
  await admin.config('SET', 'maxmemory', '1')
  let restored = false
  t.teardown(async () => { if (!restored) await admin.config('SET', 'maxmemory', '0') })
  const r = await running
  refused(t, r, r.id, 503, STORE_DOWN)
  const logged = s.logs.find(l => l.level === 50 && l.msg === 'session save failed' && l.sessionId === shownId(session.sid))
  t.ok(logged, 'logged as an error')
  t.match(logged?.err?.message, /OOM|maxmemory/, 'with the cause')
  await admin.config('SET', 'maxmemory', '0')
  restored = true
  t.equal(await counterOf(s.url, session), 0, 'the refused change was not kept')
  t.equal((await callTool(s.url, session, 'counter_add', { by: 2 })).last?.result?.structuredContent?.counter, 2, 'and the session works again, at once')
  await assertIdle(t, { app: s.app, lock, redis: admin })
})

t.test('Redis killed mid-handler: 503, never a success; a new session works once Redis is back', async t => {
  const { store, lock, close } = await redisBackends(t)
  const s = await app(t, store, lock, close)
  const session = await initialize(s.url)
  const running = callTool(s.url, session, 'counter_add', { by: 1, delayMs: 300 })
  await until(async () => await admin.exists(`mcp:{${session.sid}}:lock`) === 1, { timeout: 2000, what: 'the request to hold the lease' })
  await server.kill()
  let started = false
  t.teardown(async () => { if (!started) await server.start() })
  const r = await running
  refused(t, r, r.id, 503, STORE_DOWN)
  await server.start()
  started = true
  await until(async () => lock.client.status === 'ready' && admin.status === 'ready', { timeout: 5000, what: 'the clients to reconnect' })
  const fresh = await initialize(s.url)
  t.equal((await callTool(s.url, fresh, 'counter_add', { by: 3 })).last?.result?.structuredContent?.counter, 3)
})

t.test('the file store\'s directory breaks mid-handler: 503, nothing kept, then it works again', async t => {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-told-kept-'))
  t.teardown(async () => { await rm(dir, { recursive: true, force: true }); await rm(`${dir}.away`, { recursive: true, force: true }) })
  const store = new FileSessionStore({ dir })
  const lock = new FileSessionLock({ dir, timeout: 2000 })
  const s = await app(t, store, lock, async () => { await lock.close() })
  const session = await initialize(s.url)
  t.equal((await callTool(s.url, session, 'set_then_wait', {})).status, 200)
  const handlerRuns = once(s.started, 'started')
  const running = callTool(s.url, session, 'set_then_wait', { ms: 300 })
  await handlerRuns
  // Root ignores permissions: the fault is the directory going away under the store.
  await rename(dir, `${dir}.away`)
  await writeFile(dir, 'not a directory')
  const r = await running
  refused(t, r, r.id, 503, STORE_DOWN)
  await rm(dir)
  await rename(`${dir}.away`, dir)
  const x = await callTool(s.url, session, 'read_x')
  t.equal(x.last?.result?.content?.[0]?.text, '1', 'the refused change was not kept, and the session works again')
})

t.test('a store that fails its save: 503 with the request\'s id, and the next request succeeds', async t => {
  class FailingStore extends MemorySessionStore {
    failNext = false
    override async save (id: string, changes: SessionChanges): Promise<SaveResult> {
      if (this.failNext) { this.failNext = false; throw new Error('disk full') }
      return await super.save(id, changes)
    }
  }
  const store = new FailingStore()
  const s = await app(t, store, undefined)
  const session = await initialize(s.url)
  store.failNext = true
  const r = await callTool(s.url, session, 'counter_add', { by: 1 })
  refused(t, r, r.id, 503, STORE_DOWN)
  t.ok(s.logs.find(l => l.level === 50 && l.msg === 'session save failed' && l.err?.message === 'disk full'), 'logged with the cause')
  t.equal(await counterOf(s.url, session), 0)
  t.equal((await callTool(s.url, session, 'counter_add', { by: 1 })).last?.result?.structuredContent?.counter, 1)
})

// ─── 2. a lost lease with a store that cannot fence writes nothing ──────────────────────────────

t.test('memory store under the Redis lock: a lease lost mid-handler writes nothing, and the client is told so', async t => {
  const lock = new RedisSessionLock({ redis: server.url, timeout: 2000, ttl: 300 })
  await lock.ready()
  const s = await app(t, new MemorySessionStore(), lock, async () => { await lock.close() })
  const session = await initialize(s.url)
  const running = callTool(s.url, session, 'set_then_wait', { ms: 400 })
  await until(async () => await admin.exists(`mcp:{${session.sid}}:lock`) === 1, { timeout: 2000, what: 'the lease' })
  // Someone else's now: the renewal finds the token gone.
  await admin.set(`mcp:{${session.sid}}:lock`, 'another-holder', 'PX', 5000)
  const r = await running
  refused(t, r, r.id, 503, LOCK_LOST)
  await admin.del(`mcp:{${session.sid}}:lock`)
  const x = await callTool(s.url, session, 'read_x')
  t.equal(x.last?.result?.content?.[0]?.text, '0', 'x was not written')
})

t.test('memory store under the Redis lock: a process paused past the lease ttl writes nothing', async t => {
  const lock = new RedisSessionLock({ redis: server.url, timeout: 2000, ttl: 200 })
  await lock.ready()
  const s = await app(t, new MemorySessionStore(), lock, async () => { await lock.close() })
  const session = await initialize(s.url)
  // The handler returns right after the pause, before any timer could notice the lease ran out.
  const r = await callTool(s.url, session, 'set_then_wait', { freezeMs: 450 })
  refused(t, r, r.id, 503, LOCK_LOST)
  const x = await callTool(s.url, session, 'read_x')
  t.equal(x.last?.result?.content?.[0]?.text, '0', 'x was not written')
  await assertIdle(t, { app: s.app, lock, redis: admin })
})

// ─── 3. an undecodable session ────────────────────────────────────────────────────────────────

t.test('an undecodable Redis session: a clear 503 at once, no lease left behind; repaired, it works', async t => {
  const { store, lock, close } = await redisBackends(t, { timeout: 2000 })
  const s = await app(t, store, lock, close)
  const session = await initialize(s.url)
  t.equal((await callTool(s.url, session, 'counter_add', { by: 4 })).last?.result?.structuredContent?.counter, 4)
  await admin.hset(`mcp:{${session.sid}}:s`, 'counter', '{not json')
  for (let i = 0; i < 2; i++) {
    const started = performance.now()
    const r = await callTool(s.url, session, 'counter_get')
    refused(t, r, r.id, 503, 'Session data cannot be read.')
    t.ok(performance.now() - started < 1000, 'at once: the lease of the first refusal was released')
  }
  t.equal(await admin.exists(`mcp:{${session.sid}}:lock`), 0, 'no lease left behind')
  t.ok(s.logs.find(l => l.level === 50 && l.msg === 'session data cannot be read' && l.sessionId === shownId(session.sid)), 'logged as an error')
  await admin.hset(`mcp:{${session.sid}}:s`, 'counter', '5')
  t.equal(await counterOf(s.url, session), 5, 'repaired, the session works again')
  await assertIdle(t, { app: s.app, lock, redis: admin })
})

t.test('an undecodable session file: a clear 503, the lock released; repaired, it works', async t => {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-told-kept-'))
  t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
  const lock = new FileSessionLock({ dir, timeout: 2000 })
  const s = await app(t, new FileSessionStore({ dir }), lock, async () => { await lock.close() })
  const session = await initialize(s.url)
  await writeFile(join(dir, `${session.sid}.json`), '{"version": 1, "data": {"counter": ')
  const r = await callTool(s.url, session, 'counter_get')
  refused(t, r, r.id, 503, 'Session data cannot be read.')
  t.equal(lock.size, 0, 'the lock is free')
  await writeFile(join(dir, `${session.sid}.json`), JSON.stringify({ version: 1, data: { counter: 9 } }))
  t.equal(await counterOf(s.url, session), 9)
})

// ─── 4. batches under the lock ────────────────────────────────────────────────────────────────

t.test('a batch on a Redis-locked 2025-03-26 session: its members see each other\'s changes', async t => {
  const { store, lock, close } = await redisBackends(t)
  const s = await app(t, store, lock, close)
  const session = await initialize(s.url, { version: '2025-03-26' })
  const batch = [1, 2, 3].map(() => ({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'counter_add', arguments: { by: 1, delayMs: 100 } } }))
  const r = await post(s.url, batch, session)
  t.equal(r.status, 200)
  const answers = (JSON.parse(r.text) as Array<Record<string, any>>).map(m => m.result?.structuredContent?.counter)
  t.same(answers.sort(), [1, 2, 3], 'each member saw the one before it')
  t.equal(await counterOf(s.url, session), 3, 'no lost update')
  await assertIdle(t, { app: s.app, lock, redis: admin })
})

// A batch's members take the session lock like a single request: one sent while another request
// of the session runs waits for it, and so does a batch sent while another batch runs. Without
// the wait, each loads x before the other saved it, and one increment is lost.
for (const kind of ['memory', 'redis'] as const) {
  const backends = async (t: Test): Promise<{ store: SessionStore, lock: SessionLock, close?: () => Promise<void> }> =>
    kind === 'memory' ? { store: new MemorySessionStore(), lock: new MemorySessionLock() } : await redisBackends(t)
  const member = (ms: number): Record<string, unknown> => ({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'set_then_wait', arguments: { ms } } })

  t.test(`${kind} lock: a one-member batch sent while a request of its session runs waits for it: no lost increment`, async t => {
    const { store, lock, close } = await backends(t)
    const s = await app(t, store, lock, close)
    const session = await initialize(s.url, { version: '2025-03-26' })
    const started = once(s.started, 'started')
    const running = post(s.url, member(300), session)
    await started
    const batch = await post(s.url, [member(0)], session)
    t.equal(batch.status, 200)
    t.equal((await running).status, 200)
    t.equal((await callTool(s.url, session, 'read_x')).last?.result?.content?.[0]?.text, '2', 'both increments kept: the batch member waited for the lock')
  })

  t.test(`${kind} lock: two batches on one session: the second waits for the first: no lost increment`, async t => {
    const { store, lock, close } = await backends(t)
    const s = await app(t, store, lock, close)
    const session = await initialize(s.url, { version: '2025-03-26' })
    const started = once(s.started, 'started')
    const first = post(s.url, [member(300)], session)
    await started
    const second = await post(s.url, [member(0), member(0)], session)
    t.equal(second.status, 200)
    t.equal((await first).status, 200)
    t.equal((await callTool(s.url, session, 'read_x')).last?.result?.content?.[0]?.text, '3', 'all three increments kept')
  })
}

t.test('a batch counts each member against the caps, and a batch past maxBatchSize is refused', async t => {
  const capped = await startCapped(t, { maxStreamsPerSession: 2, maxBatchSize: 4 })
  const session = await initialize(capped.url, { version: '2025-03-26' })
  const call = (): Record<string, unknown> => ({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'counter_add', arguments: { by: 1 } } })
  const three = await post(capped.url, [call(), call(), call()], session)
  t.equal(three.status, 429, 'three requests in one batch count three against maxStreamsPerSession 2')
  const two = await post(capped.url, [call(), call()], session)
  t.equal(two.status, 200)
  const five = await post(capped.url, [call(), { jsonrpc: '2.0', method: 'notifications/initialized' }, call(), call(), call()], session)
  t.equal(five.status, 400, 'five messages past maxBatchSize 4')
  t.equal(five.last?.error?.code, -32600)
  t.equal(five.last?.id, null)
  t.equal(await counterOf(capped.url, session), 2, 'only the accepted batch ran')
})

// ─── 5. a client that leaves while its request waits for the lock ─────────────────────────────

for (const kind of ['memory', 'redis'] as const) {
  t.test(`${kind} lock: a request whose client left while queued leaves the queue at once and never runs`, async t => {
    const lock = kind === 'memory' ? new MemorySessionLock({ timeout: 5000 }) : new RedisSessionLock({ redis: server.url, timeout: 5000 })
    if (lock instanceof RedisSessionLock) await lock.ready()
    const s = await app(t, new MemorySessionStore(), lock, async () => { await lock.close?.() })
    const session = await initialize(s.url)
    const first = callTool(s.url, session, 'counter_add', { by: 1, delayMs: 600 })
    await until(() => lock.size > 0, { timeout: 2000, what: 'the first request to hold the lock' })
    const leaving = new AbortController()
    const second = callTool(s.url, session, 'counter_add', { by: 10 }, { signal: leaving.signal }).catch(() => null)
    await until(() => lock.pending === 1, { timeout: 2000, what: 'the second request to queue' })
    const left = performance.now()
    leaving.abort()
    await until(() => lock.pending === 0, { timeout: 2000, what: 'the second request to leave the queue' })
    t.ok(performance.now() - left < 300, 'at once, not when the first request ends')
    await second
    t.equal((await first).last?.result?.structuredContent?.counter, 1)
    t.equal(await counterOf(s.url, session), 1, 'the handler of the request that left never ran')
    await assertIdle(t, { app: s.app, lock, redis: kind === 'redis' ? admin : undefined })
  })
}

t.test('a release that fails is logged as a warning', async t => {
  const lock = new RedisSessionLock({ redis: server.url, timeout: 2000, ttl: 5000 })
  await lock.ready()
  const s = await app(t, new MemorySessionStore(), lock, async () => { await lock.close() })
  const session = await initialize(s.url)
  const reading = callTool(s.url, session, 'read_then_wait', { ms: 300 })
  await until(async () => await admin.exists(`mcp:{${session.sid}}:lock`) === 1, { timeout: 2000, what: 'the lease' })
  await server.stop()
  t.teardown(async () => { await server.start() })
  const r = await reading
  t.equal(r.status, 200, 'a request that changed nothing keeps its answer')
  await until(() => s.logs.find(l => l.level === 40 && l.msg === 'session lock release failed; it expires in the backend') !== undefined, { timeout: 2000, what: 'the warning' })
  t.pass('logged as a warning')
})

// ─── 6. taking the lock back after the client answered ────────────────────────────────────────

/** `ask_then_mark` elicits, then appends "A" to the session's `order`; `mark_c` appends "C". */
async function markingApp (t: Test, lock: MemorySessionLock): Promise<InProcess> {
  const s = await app(t, new MemorySessionStore(), lock)
  const mark = (ctx: { session: { get: <T>(k: string) => T | undefined, set: (k: string, v: unknown) => void } | null }, what: string): void => {
    ctx.session?.set('order', [...ctx.session.get<string[]>('order') ?? [], what])
  }
  s.app.mcp.tool({ name: 'ask_then_mark', description: 'Asks, then marks A.' }, async (_args, ctx) => {
    await ctx.elicit('name', { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
    mark(ctx, 'A')
    return 'A'
  })
  s.app.mcp.tool({ name: 'mark_c', description: 'Marks C.' }, async (_args, ctx) => { mark(ctx, 'C'); return 'C' })
  s.app.mcp.tool({ name: 'order', description: 'The marks.' }, async (_args, ctx) => JSON.stringify(ctx.session?.get('order') ?? []))
  return s
}

async function askA (t: Test, url: string, session: Session): Promise<{ reader: SseReader, ask: Record<string, any> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: headers(session),
    body: JSON.stringify({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'ask_then_mark', arguments: {} } })
  })
  const reader = new SseReader(res)
  t.teardown(() => reader.cancel())
  return { reader, ask: await reader.waitForMessage(m => m.method === 'elicitation/create', 5000) }
}

t.test('after the client answers, the handler takes the lock back before newer requests of the session', async t => {
  const lock = new MemorySessionLock({ timeout: 5000 })
  const s = await markingApp(t, lock)
  const session = await initialize(s.url, { capabilities: { elicitation: {} } })
  const { reader, ask } = await askA(t, s.url, session)
  const b = callTool(s.url, session, 'counter_add', { delayMs: 300 })
  await until(() => lock.size > 0, { timeout: 2000, what: 'B to hold the lock' })
  const c = callTool(s.url, session, 'mark_c')
  await until(() => lock.pending === 1, { timeout: 2000, what: 'C to queue behind B' })
  t.equal((await post(s.url, { jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name: 'Zed' } } }, session)).status, 202)
  await reader.waitForMessage(m => m.result !== undefined, 5000)
  await Promise.all([b, c])
  const order = await callTool(s.url, session, 'order')
  t.equal(order.last?.result?.content?.[0]?.text, JSON.stringify(['A', 'C']), 'A went before C, which queued earlier')
})

t.test('when the lock cannot be taken back: the documented error, the answer logged, the session untouched', async t => {
  const lock = new MemorySessionLock({ timeout: 300 })
  const s = await markingApp(t, lock)
  const session = await initialize(s.url, { capabilities: { elicitation: {} } })
  const { reader, ask } = await askA(t, s.url, session)
  const b = callTool(s.url, session, 'counter_add', { delayMs: 1200 })
  await until(() => lock.size > 0, { timeout: 2000, what: 'B to hold the lock' })
  await post(s.url, { jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name: 'Zed' } } }, session)
  const final = await reader.waitForMessage(m => m.result !== undefined || m.error !== undefined, 5000)
  // The handler got FST_ERR_MCP_SESSION_BUSY; the client is told what a lost lease means.
  t.equal(final.result, undefined, 'never a result')
  t.equal(final.error?.message, LOCK_LOST)
  const logged = s.logs.find(l => l.level === 40 && /could not take the session or handle back/.test(l.msg))
  t.ok(logged, 'logged as a warning')
  t.match(String(logged?.answer), /Zed/, 'with the client\'s answer in it')
  t.equal((await b).last?.result?.structuredContent?.counter, 1)
  const order = await callTool(s.url, session, 'order')
  t.equal(order.last?.result?.content?.[0]?.text, '[]', 'A marked nothing: the session is untouched')
})
