/**
 * Told = kept on the paths around a wait for the client and around a lost lease (issue 35, item 3):
 *
 * - a handler that catches the error of a wait (the lock could not be taken back after it; the
 *   save before it failed) and returns normally is answered with an error, never a success, and
 *   what it changed after the wait is not stored;
 * - Redis paused (SIGSTOP) past the lease TTL during a session call and during a state handle
 *   call, with handlers that ignore `ctx.signal` and one that follows it: what the client is told
 *   matches what the store holds (HGET, basket_get);
 * - a lost handle lease aborts the handler's `ctx.signal`, as a session's does.
 */
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { Type } from '@sinclair/typebox'
import {
  LOCK_CLIENT_OPTIONS, MemorySessionLock, MemorySessionStore, OutcomeUnknownError, RedisSessionLock, RedisSessionStore,
  type McpContext, type SaveResult, type SessionChanges, type SessionLock, type SessionStore
} from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { callTool, initialize, modernPost, post, readReply, type Reply } from '../helpers/http-client.js'
import { SseReader } from '../helpers/sse.js'
import { sleep, until } from '../helpers/time.js'
import { headers, newId } from '../helpers/wire.js'
import { startApp, type InProcess } from './fixtures/app.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
admin.on('error', () => {})
t.teardown(() => { admin.disconnect() })

const LOST = 'Session lock was lost; the changes of this request were not saved.'
const HANDLE_LOST = 'Handle lock was lost; the changes of this call were not saved.'
const ELICIT = { message: 'Name?', requestedSchema: { type: 'object' as const, properties: { name: { type: 'string' as const } } } }

/** Sets `key` in the session, or in the handle when the call has one. */
function mark (ctx: McpContext, key: string, value: unknown): void {
  const state = ctx.handle ?? ctx.session
  state?.set(key, value as any)
}

/**
 * The demo tools plus: `ask_catch` (sets `before`, elicits, catches the wait's error, sets `after`,
 * returns normally), `stubborn_add` (session counter + 1 after `ms`, ignoring its signal),
 * `stubborn_basket` (the same on a basket: adds `item` after `ms`), `get` (a session key).
 */
async function app (t: Test, store: SessionStore | undefined, lock: SessionLock | undefined, close?: () => Promise<void>): Promise<InProcess & { signals: AbortSignal[] }> {
  const s = await startApp(t, { store, lock, close })
  const signals: AbortSignal[] = []
  s.app.mcp.tool({ name: 'ask_catch', description: 'Elicits, catching the error.' }, async (_args, ctx) => {
    mark(ctx, 'before', 1)
    try {
      await ctx.elicit('name', ELICIT)
    } catch {
      mark(ctx, 'after', 'caught')
      return 'returned normally after the wait failed'
    }
    mark(ctx, 'after', 'answered')
    return 'answered'
  })
  const ms = Type.Object({ ms: Type.Integer() })
  s.app.mcp.tool({ name: 'stubborn_add', description: 'counter + 1 after ms, ignoring the signal.', input: ms }, async ({ ms }, ctx) => {
    signals.push(ctx.signal)
    const before = ctx.session?.get<number>('counter') ?? 0
    await sleep(ms)
    ctx.session?.set('counter', before + 1)
    return String(before + 1)
  })
  s.app.mcp.tool({
    name: 'stubborn_basket',
    description: 'Adds item after ms, ignoring the signal.',
    input: Type.Object({ basket: Type.String(), item: Type.String(), ms: Type.Integer() }),
    handle: { argument: 'basket', kind: 'basket' }
  }, async ({ item, ms }, ctx) => {
    signals.push(ctx.signal)
    const before = ctx.handle?.get<string[]>('items') ?? []
    await sleep(ms)
    ctx.handle?.set('items', [...before, item])
    return 'added'
  })
  s.app.mcp.tool({ name: 'get', description: 'A session key.', input: Type.Object({ key: Type.String() }) },
    async ({ key }, ctx) => JSON.stringify(ctx.session?.get(key) ?? null))
  return { ...s, signals }
}

async function get (url: string, session: Awaited<ReturnType<typeof initialize>>, key: string): Promise<unknown> {
  return JSON.parse((await callTool(url, session, 'get', { key })).last?.result?.content?.[0]?.text)
}

async function startAsk (t: Test, url: string, session: Awaited<ReturnType<typeof initialize>>): Promise<SseReader> {
  const res = await fetch(url, { method: 'POST', headers: headers(session), body: JSON.stringify({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'ask_catch', arguments: {} } }) })
  const reader = new SseReader(res)
  t.teardown(() => reader.cancel())
  return reader
}

t.test('the lock cannot be taken back after the wait, the handler catches and returns: an error that says the part before the question was kept, and nothing after the wait stored', async t => {
  const lock = new MemorySessionLock({ timeout: 300 })
  const s = await app(t, new MemorySessionStore(), lock)
  const session = await initialize(s.url, { capabilities: { elicitation: {} } })
  const reader = await startAsk(t, s.url, session)
  const ask = await reader.waitForMessage(m => m.method === 'elicitation/create', 5000)
  // Another request holds the session past the lock timeout while the client answers.
  const holder = callTool(s.url, session, 'counter_add', { delayMs: 1200 })
  await until(() => lock.size > 0, { timeout: 2000, what: 'the other request to hold the lock' })
  await post(s.url, { jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name: 'Zed' } } }, session)
  const final = await reader.waitForMessage(m => m.id === ask.id ? false : (m.result !== undefined || m.error !== undefined), 5000)
  t.equal(final.result, undefined, 'no result: never told it was done')
  t.equal(final.error?.message, `${LOST} The changes made before the request asked the client were saved; those made after were not.`,
    'the answer says the part before the question was kept')
  t.equal((final.error?.data as { keptBeforeQuestion?: boolean } | undefined)?.keptBeforeQuestion, true)
  await holder
  t.equal(await get(s.url, session, 'after'), null, 'nothing the handler did after the wait was stored')
  t.equal(await get(s.url, session, 'before'), 1, 'what it did before the wait was saved at the wait')
})

t.test('the save before the wait fails, the handler catches and returns: an error, and nothing stored', async t => {
  class FailingStore extends MemorySessionStore {
    failNext = false
    override async save (id: string, changes: SessionChanges): Promise<SaveResult> {
      if (this.failNext) { this.failNext = false; throw new Error('disk full') }
      return await super.save(id, changes)
    }
  }
  const store = new FailingStore()
  const s = await app(t, store, undefined)
  const session = await initialize(s.url, { capabilities: { elicitation: {} } })
  store.failNext = true
  const r = await callTool(s.url, session, 'ask_catch')
  t.equal(r.last?.result, undefined, 'no result: never told it was done')
  t.equal(r.last?.error?.message, 'Session store is unavailable.')
  t.equal(r.status, 503)
  t.equal(await get(s.url, session, 'before'), null, 'the failed save kept nothing')
  t.equal(await get(s.url, session, 'after'), null, 'nor anything after')
})

/** A Redis store and a Redis lock with a short lease, each on a fail-fast client of its own. */
async function redisBackends (t: Test): Promise<{ store: RedisSessionStore, lock: RedisSessionLock, close: () => Promise<void> }> {
  const client = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
  client.on('error', () => {})
  await new Promise(resolve => client.once('ready', resolve))
  const lock = new RedisSessionLock({ redis: server.url, timeout: 5000, ttl: 600 })
  await lock.ready()
  return { store: new RedisSessionStore({ redis: client }), lock, close: async () => { await lock.close(); client.disconnect() } }
}

/** Pauses redis-server for `ms` (past the 600 ms lease), once the lease `key` is held. */
async function pauseWhileHeld (t: Test, key: string, ms: number): Promise<void> {
  await until(async () => await admin.exists(key) === 1, { timeout: 3000, what: 'the lease to be taken' })
  server.pause()
  t.teardown(() => { server.resume() })
  await sleep(ms)
  server.resume()
}

function failedWith (t: Test, r: Reply, message: string): void {
  t.equal(r.last?.result, undefined, 'no result')
  t.equal(r.last?.error?.message, message, 'told it was not saved')
}

t.test('Redis paused past the lease during a session call whose handler ignores its signal: told not saved, and not stored', async t => {
  const { store, lock, close } = await redisBackends(t)
  const s = await app(t, store, lock, close)
  const session = await initialize(s.url)
  const running = callTool(s.url, session, 'stubborn_add', { ms: 2500 })
  await pauseWhileHeld(t, `mcp:{${session.sid}}:lock`, 1500)
  const r = await running
  failedWith(t, r, LOST)
  t.equal(await admin.hget(`mcp:{${session.sid}}`, 'counter'), null, 'HGET: the counter was never written')
  t.equal(s.signals[0]?.aborted, true, 'the lost lease aborted ctx.signal')
})

/** A 2026-07-28 tools/call. */
async function call (url: string, name: string, args: Record<string, unknown>): Promise<Reply> {
  return await readReply(await modernPost(url, 'tools/call', { name, arguments: args }))
}

for (const tool of ['stubborn_basket', 'basket_add'] as const) {
  t.test(`Redis paused past the lease during a handle call (${tool}): told not saved, and basket_get agrees`, async t => {
    const { store, lock, close } = await redisBackends(t)
    const s = await app(t, store, lock, close)
    const basket = (await call(s.url, 'basket_create', {})).last?.result?.structuredContent?.basket as string
    const args = tool === 'basket_add' ? { basket, item: 'paused', delayMs: 2500 } : { basket, item: 'paused', ms: 2500 }
    const running = call(s.url, tool, args)
    await pauseWhileHeld(t, `mcp:{~basket~${basket}}:lock`, 1500)
    const r = await running
    failedWith(t, r, HANDLE_LOST)
    await until(async () => await admin.exists(`mcp:{~basket~${basket}}:lock`) === 0, { timeout: 3000, what: 'the lease to go' })
    t.same((await call(s.url, 'basket_get', { basket })).last?.result?.structuredContent?.items, [], 'basket_get: the item was not stored')
    if (tool === 'stubborn_basket') t.equal(s.signals[0]?.aborted, true, 'the lost handle lease aborted ctx.signal')
  })
}

t.test('a save whose outcome is unknown (it timed out) is said to be unknown, never "not saved"', async t => {
  class TimingOutStore extends MemorySessionStore {
    timeOutNext = false
    override async save (id: string, changes: SessionChanges): Promise<SaveResult> {
      const result = await super.save(id, changes)
      if (this.timeOutNext) { this.timeOutNext = false; throw new OutcomeUnknownError('the store did not answer', { cause: new Error('Command timed out') }) }
      return result
    }
  }
  const store = new TimingOutStore()
  const s = await app(t, store, undefined)
  const session = await initialize(s.url)
  store.timeOutNext = true
  const r = await callTool(s.url, session, 'counter_add', { by: 1 })
  t.equal(r.last?.result, undefined, 'no result')
  t.match(r.last?.error?.message, /^Session store did not confirm the save; whether the changes of this request were saved is unknown\. A retry of a tool call with the same idempotency key says which/)
  t.equal((await callTool(s.url, session, 'counter_get', {})).last?.result?.structuredContent?.counter, 1, 'here it was written: "not saved" would have been false')
})
