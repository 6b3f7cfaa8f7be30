/**
 * Read-only tools (`annotations.readOnlyHint: true`) read a snapshot of their session or handle
 * without the lock, with a lock configured explicitly (memory, and Redis on a private
 * redis-server): parallel read-only calls on one handle (both eras) or one session overlap while
 * writers on it are still serialized and lose nothing; a write from a read-only tool throws a
 * clear error and stores nothing; a snapshot read during writes sees each write whole or not at
 * all (memory, file, Redis stores; a store that saves key by key shows the probe would see a
 * half); a batch that mixes read-only and writing calls takes the lock; a tool replaced by a
 * writing one under a snapshot cannot write; a store failing under a snapshot read, or Redis
 * stopped, answers 503; read-only calls stay bounded per session.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import { Type } from '@sinclair/typebox'
import mcp, {
  FileSessionLock, FileSessionStore, injectClient, McpError, MemorySessionLock, MemorySessionStore, RedisSessionLock, RedisSessionStore,
  type InjectClient, type McpPluginOptions, type SaveResult, type SessionChanges, type SessionLock, type SessionRecord, type SessionStore
} from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { callTool, initialize, post, serve } from '../helpers/http-client.js'
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js'
import { sleep, until } from '../helpers/time.js'
import { newId, type Session } from '../helpers/wire.js'

const ERAS = ['2025-11-25', '2026-07-28'] as const
/** How long each read-only call takes, and how many run at once. */
const READ_MS = 300
const READERS = 20
const WRITERS = 10
/** Serialized, the readers alone take READERS × READ_MS: side by side, well under half of it. */
const OVERLAPPED = 10 * READ_MS
/** Long enough that a serialized run would be slow rather than refused (lock timeout). */
const LOCK_TIMEOUT = 30_000

let redisServer: RedisServer | undefined
async function redisUrl (): Promise<string> {
  redisServer ??= await startRedisServer(t)
  return redisServer.url
}

type BackendKind = 'memory' | 'redis' | 'file'

/** A store and the lock that goes with it, closed at teardown. */
async function backend (t: Test, kind: BackendKind): Promise<{ store: SessionStore, lock: SessionLock }> {
  if (kind === 'memory') return { store: new MemorySessionStore(), lock: new MemorySessionLock({ timeout: LOCK_TIMEOUT }) }
  if (kind === 'file') {
    const dir = await mkdtemp(join(tmpdir(), 'mcp-read-only-'))
    const lock = new FileSessionLock({ dir, timeout: LOCK_TIMEOUT })
    t.teardown(async () => { await lock.close(); await rm(dir, { recursive: true, force: true }) })
    return { store: new FileSessionStore({ dir }), lock }
  }
  const url = await redisUrl()
  // Fail fast while Redis is down: a 503 at once rather than commands queued until it is back.
  const client = new Redis(url, { maxRetriesPerRequest: 0, enableOfflineQueue: false })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  const lock = new RedisSessionLock({ redis: url, timeout: LOCK_TIMEOUT })
  t.teardown(() => lock.close())
  return { store: new RedisSessionStore({ redis: client }), lock }
}

/** Keys the bundled lock holds right now. */
const held = (lock: SessionLock): number => lock instanceof MemorySessionLock ? lock.size : (lock as RedisSessionLock).held

const delay = Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000, default: 0 }))
const basketArg = Type.String()

/** The demo's tools, and the read-only (and writing) probes of these tests. */
async function build (t: Test, opts: McpPluginOptions): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { requestStateSecret: 'read-only-tools-secret', ...opts })
  registerDemoTools(app.mcp)
  const readOnly = { readOnlyHint: true }
  app.mcp.tool({
    name: 'counter_peek',
    description: 'Reads this session\'s counter, then waits `delayMs`.',
    session: 'required',
    input: Type.Object({ delayMs: delay }),
    annotations: readOnly
  }, async ({ delayMs = 0 }, ctx) => {
    const counter = ctx.session?.get<number>('counter') ?? 0
    if (delayMs > 0) await sleep(delayMs)
    return { content: [{ type: 'text', text: String(counter) }], structuredContent: { counter } }
  })
  app.mcp.tool({
    name: 'sneak',
    description: 'A read-only tool that tries to change its session.',
    session: 'required',
    input: Type.Object({ how: Type.String() }),
    annotations: readOnly
  }, async ({ how }, ctx) => {
    const session = ctx.session
    if (session === null) return 'no session'
    if (how === 'set') session.set('counter', 999)
    if (how === 'delete') session.delete('counter')
    if (how === 'huge') session.set('k'.repeat(1 << 20), 1)
    if (how === 'caught') {
      try { session.set('counter', 999) } catch (err) { return `caught ${(err as Error).name}` }
    }
    return 'wrote'
  })
  app.mcp.tool({
    name: 'basket_sneak',
    description: 'A read-only tool that tries to change its basket.',
    input: Type.Object({ basket: basketArg, caught: Type.Optional(Type.Boolean()) }),
    handle: { argument: 'basket', kind: 'basket' },
    annotations: readOnly
  }, async ({ caught = false }, ctx) => {
    try {
      ctx.handle?.set('items', ['stolen'])
    } catch (err) {
      if (caught) return `caught ${(err as Error).name}`
      throw err
    }
    return 'wrote'
  })
  app.mcp.tool({
    name: 'pair_set',
    description: 'Sets `a`, waits `delayMs`, sets `b`: one write of two keys.',
    input: Type.Object({ basket: basketArg, n: Type.Integer(), delayMs: delay }),
    handle: { argument: 'basket', kind: 'basket' }
  }, async ({ n, delayMs = 0 }, ctx) => {
    ctx.handle?.set('a', n)
    if (delayMs > 0) await sleep(delayMs)
    ctx.handle?.set('b', n)
    return String(n)
  })
  app.mcp.tool({
    name: 'pair_get',
    description: 'Reads `a` and `b`.',
    input: Type.Object({ basket: basketArg }),
    handle: { argument: 'basket', kind: 'basket' },
    annotations: readOnly
  }, async (_args, ctx) => ({ content: [], structuredContent: { a: ctx.handle?.get('a') ?? null, b: ctx.handle?.get('b') ?? null } }))
  return app
}

async function newBasket (c: InjectClient): Promise<string> {
  return (await c.callTool('basket_create')).structuredContent?.basket as string
}

const text = (r: { content: Array<Record<string, unknown>> }): string => String(r.content[0]?.text)

// ─── Side by side ────────────────────────────────────────────────────────────────────────────

for (const kind of ['memory', 'redis'] as const) {
  for (const era of ERAS) {
    t.test(`${kind} lock, ${era}: ${READERS} read-only calls of ${READ_MS} ms on one handle overlap; ${WRITERS} writes on it all land`, async t => {
      const app = await build(t, { sessions: await backend(t, kind) })
      const c = injectClient(app, { protocolVersion: era })
      const basket = await newBasket(c)
      const started = performance.now()
      const reads = Array.from({ length: READERS }, async () => {
        const r = await c.callTool('basket_get', { basket, delayMs: READ_MS })
        return { r, at: performance.now() - started }
      })
      const writes = Array.from({ length: WRITERS }, async (_, i) => await c.callTool('basket_add', { basket, item: `w${i}`, delayMs: 20 }))
      const [read, written] = await Promise.all([Promise.all(reads), Promise.all(writes)])
      const took = Math.max(...read.map(x => x.at))
      t.ok(took < OVERLAPPED, `the reads overlap: ${Math.round(took)} ms (one after another: ≥ ${READERS * READ_MS} ms)`)
      t.same(written.map(r => r.structuredContent?.count).sort((a, b) => (a as number) - (b as number)),
        Array.from({ length: WRITERS }, (_, i) => i + 1), 'each write saw every earlier one')
      const final = (await c.callTool('basket_get', { basket })).structuredContent?.items as string[]
      t.same([...final].sort(), Array.from({ length: WRITERS }, (_, i) => `w${i}`).sort(), 'no write lost')
      const prefixes = read.map(({ r }) => r.isError !== true && (r.structuredContent?.items as string[] | undefined)?.every((x, i) => final[i] === x))
      t.ok(prefixes.every(ok => ok === true), 'every read answered a saved state (a prefix of the final items)')
    })
  }

  t.test(`${kind} lock, handshake era: ${READERS} read-only calls of ${READ_MS} ms on one session overlap; ${WRITERS} writes on it all land`, async t => {
    const app = await build(t, { sessions: await backend(t, kind) })
    const c = injectClient(app, { protocolVersion: '2025-11-25' })
    t.same((await c.callTool('counter_peek')).structuredContent, { counter: 0 })
    const started = performance.now()
    const reads = Array.from({ length: READERS }, async () => {
      const r = await c.callTool('counter_peek', { delayMs: READ_MS })
      return { r, at: performance.now() - started }
    })
    const writes = Array.from({ length: WRITERS }, async () => await c.callTool('counter_add', { by: 1, delayMs: 20 }))
    const [read, written] = await Promise.all([Promise.all(reads), Promise.all(writes)])
    const took = Math.max(...read.map(x => x.at))
    t.ok(took < OVERLAPPED, `the reads overlap: ${Math.round(took)} ms (one after another: ≥ ${READERS * READ_MS} ms)`)
    t.same(written.map(r => r.structuredContent?.counter).sort((a, b) => (a as number) - (b as number)),
      Array.from({ length: WRITERS }, (_, i) => i + 1), 'each write saw every earlier one')
    t.same((await c.callTool('counter_get')).structuredContent, { counter: WRITERS }, 'no write lost')
    t.ok(read.every(({ r }) => r.isError !== true && (r.structuredContent?.counter as number) <= WRITERS), 'every read answered a saved value')
  })

  t.test(`${kind} lock: a read-only call does not wait for a writer holding the lock; it sees the state before that write`, async t => {
    const sessions = await backend(t, kind)
    const app = await build(t, { sessions })
    const c = injectClient(app, { protocolVersion: '2026-07-28' })
    const basket = await newBasket(c)
    await c.callTool('basket_add', { basket, item: 'first' })
    const order: string[] = []
    const writer = c.callTool('basket_add', { basket, item: 'slow', delayMs: 800 }).then(r => { order.push('write'); return r })
    await until(() => held(sessions.lock) > 0, { timeout: 2000, what: 'the writer to hold the lock' })
    const read = await c.callTool('basket_get', { basket })
    order.push('read')
    t.same(read.structuredContent, { items: ['first'] }, 'the saved state, not the write in progress')
    t.same((await writer).structuredContent, { count: 2 })
    t.same(order, ['read', 'write'], 'answered while the writer held the lock')
  })
}

// ─── Writes refused ──────────────────────────────────────────────────────────────────────────

t.test('handshake era: a read-only tool\'s write to its session throws a clear error and stores nothing', async t => {
  const app = await build(t, { sessions: await backend(t, 'memory') })
  const c = injectClient(app, { protocolVersion: '2025-11-25' })
  t.same((await c.callTool('counter_add', { by: 5 })).structuredContent, { counter: 5 })
  const set = await c.callTool('sneak', { how: 'set' })
  t.equal(set.isError, true)
  t.equal(text(set), 'Cannot set "counter": tool "sneak" is read-only (annotations.readOnlyHint: true); it reads a snapshot and cannot change state')
  const del = await c.callTool('sneak', { how: 'delete' })
  t.match(text(del), /^Cannot delete "counter": tool "sneak" is read-only/)
  const caught = await c.callTool('sneak', { how: 'caught' })
  t.same([caught.isError, text(caught)], [undefined, 'caught ReadOnlyStateError'], 'a handler that catches it answers, having changed nothing')
  const huge = await c.callTool('sneak', { how: 'huge' })
  t.ok(huge.isError === true && text(huge).length < 300, `a 1 MiB key is cut in the message (${text(huge).length} characters)`)
  t.same((await c.callTool('counter_get')).structuredContent, { counter: 5 }, 'nothing stored')
  t.same((await c.callTool('counter_add', { by: 1 })).structuredContent, { counter: 6 }, 'a writing tool still writes')
})

for (const era of ERAS) {
  t.test(`${era}: a read-only tool's write to its handle throws a clear error and stores nothing`, async t => {
    const app = await build(t, { sessions: await backend(t, 'memory') })
    const c = injectClient(app, { protocolVersion: era })
    const basket = await newBasket(c)
    await c.callTool('basket_add', { basket, item: 'pear' })
    const r = await c.callTool('basket_sneak', { basket })
    t.equal(r.isError, true)
    t.equal(text(r), 'Cannot set "items": tool "basket_sneak" is read-only (annotations.readOnlyHint: true); it reads a snapshot and cannot change state')
    const caught = await c.callTool('basket_sneak', { basket, caught: true })
    t.equal(text(caught), 'caught ReadOnlyStateError')
    t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['pear'] }, 'nothing stored')
  })
}

// ─── Snapshots are whole ─────────────────────────────────────────────────────────────────────

/** A store that writes a save's keys one at a time (not a valid store for read-only tools). */
class KeyByKeyStore extends MemorySessionStore {
  override async save (id: string, changes: SessionChanges): Promise<SaveResult> {
    let result: SaveResult = 'ok'
    for (const key of Object.keys(changes.set)) {
      result = await super.save(id, { set: { [key]: changes.set[key] }, delete: [] })
      await sleep(5)
    }
    if (changes.delete.length > 0) result = await super.save(id, { set: {}, delete: changes.delete })
    return result
  }
}

/** Writes pairs one after another while readers poll them; resolves every pair read. */
async function pairsSeen (c: InjectClient, basket: string): Promise<Array<{ a: unknown, b: unknown }>> {
  let writing = true
  const writer = (async () => {
    for (let n = 1; n <= 15; n++) await c.callTool('pair_set', { basket, n, delayMs: 10 })
    writing = false
  })()
  const seen: Array<{ a: unknown, b: unknown }> = []
  const readers = Array.from({ length: 4 }, async () => {
    while (writing) {
      const r = await c.callTool('pair_get', { basket })
      seen.push(r.structuredContent as { a: unknown, b: unknown })
    }
  })
  await Promise.all([writer, ...readers])
  return seen
}

for (const kind of ['memory', 'file', 'redis'] as const) {
  t.test(`${kind} store: a snapshot read during writes sees each write whole or not at all`, async t => {
    const app = await build(t, { sessions: await backend(t, kind) })
    const c = injectClient(app, { protocolVersion: '2026-07-28' })
    const basket = await newBasket(c)
    const seen = await pairsSeen(c, basket)
    const halves = seen.filter(p => p.a !== p.b)
    t.same(halves, [], `no half write among ${seen.length} reads`)
    t.ok(new Set(seen.map(p => p.a)).size > 3, 'the reads ran while the writes did')
  })
}

t.test('the probe above sees halves when a store saves key by key (so its "no half" means something)', async t => {
  const app = await build(t, { sessions: { store: new KeyByKeyStore(), lock: new MemorySessionLock({ timeout: LOCK_TIMEOUT }) } })
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const basket = await newBasket(c)
  const seen = await pairsSeen(c, basket)
  t.ok(seen.some(p => p.a !== p.b), 'a half write was read')
})

// ─── Attacks and faults ──────────────────────────────────────────────────────────────────────

/** A session on protocol 2025-03-26 (batches), over real HTTP. */
async function batchSession (t: Test, opts: McpPluginOptions = {}): Promise<{ url: string, session: Session, app: FastifyInstance, lock: SessionLock }> {
  const sessions = await backend(t, 'memory')
  const app = await build(t, { sessions, ...opts })
  const { url } = await serve(t, app)
  return { url, session: await initialize(url, { version: '2025-03-26' }), app, lock: sessions.lock }
}

const call = (name: string, args: Record<string, unknown> = {}): Record<string, unknown> =>
  ({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name, arguments: args } })

/** The results of a batch's answers (a JSON array, or SSE messages), in the order of its requests. */
function results (messages: Array<Record<string, any>>, batch: Array<Record<string, unknown>>): Array<Record<string, any>> {
  const answers = messages.flat() as Array<Record<string, any>>
  return batch.map(m => answers.find(x => x.id === m.id)?.result)
}

t.test('a batch mixing a read-only and a writing call takes the lock: it waits, sees the earlier write, and its write lands', async t => {
  const { url, session, lock } = await batchSession(t)
  const slow = callTool(url, session, 'counter_add', { by: 1, delayMs: 500 })
  await until(() => held(lock) > 0, { timeout: 2000, what: 'the writer to hold the lock' })
  const batch = [call('counter_peek'), call('counter_add', { by: 1 })]
  const reply = await post(url, batch, session)
  const [peek, add] = results(reply.messages, batch)
  t.equal((await slow).last?.result?.structuredContent?.counter, 1)
  t.same(peek?.structuredContent, { counter: 1 }, 'the read-only member ran under the lock, after the slow write')
  t.same([add?.isError, add?.structuredContent], [undefined, { counter: 2 }], 'the writing member wrote')
  t.equal((await callTool(url, session, 'counter_get')).last?.result?.structuredContent?.counter, 2)
})

t.test('a batch of read-only calls only reads a snapshot: it does not wait for a writer', async t => {
  const { url, session, lock } = await batchSession(t)
  const order: string[] = []
  const slow = callTool(url, session, 'counter_add', { by: 1, delayMs: 800 }).then(r => { order.push('write'); return r })
  await until(() => held(lock) > 0, { timeout: 2000, what: 'the writer to hold the lock' })
  const batch = [call('counter_peek'), call('counter_peek')]
  const reply = await post(url, batch, session)
  order.push('batch')
  t.same(results(reply.messages, batch).map(r => r?.structuredContent), [{ counter: 0 }, { counter: 0 }])
  await slow
  t.same(order, ['batch', 'write'])
})

t.test('in a batch that took the lock, a read-only member still cannot write, and the next member can', async t => {
  const { url, session } = await batchSession(t)
  const batch = [call('sneak', { how: 'set' }), call('counter_add', { by: 3 })]
  const [sneak, add] = results((await post(url, batch, session)).messages, batch)
  t.match([sneak?.isError, sneak?.content?.[0]?.text], [true, /^Cannot set "counter": tool "sneak" is read-only/])
  t.same(add?.structuredContent, { counter: 3 })
  t.equal((await callTool(url, session, 'counter_get')).last?.result?.structuredContent?.counter, 3)
})

t.test('a read-only tool replaced by a writing one while its POST runs on a snapshot cannot write', async t => {
  const { url, session, app } = await batchSession(t)
  const flip = app.mcp.tool({ name: 'flip', description: 'Reads.', session: 'required', annotations: { readOnlyHint: true } }, async () => 'read')
  app.mcp.tool({ name: 'swap', description: 'Replaces flip by a writing tool.', annotations: { readOnlyHint: true } }, async () => {
    flip.remove()
    app.mcp.tool({ name: 'flip', description: 'Writes.', session: 'required' }, async (_a, ctx) => { ctx.session?.set('counter', 42); return 'wrote' })
    return 'swapped'
  })
  const batch = [call('swap'), call('flip')]
  const [swapped, flipped] = results((await post(url, batch, session)).messages, batch)
  t.equal(swapped?.content?.[0]?.text, 'swapped')
  t.equal(flipped?.isError, true)
  t.match(flipped?.content?.[0]?.text, /^Cannot set "counter": this call reads a snapshot of the session without its lock/)
  t.equal((await callTool(url, session, 'counter_get')).last?.result?.structuredContent?.counter, 0, 'nothing stored')
})

/** A memory store whose loads fail while `failing` is set. */
class FailingLoads extends MemorySessionStore {
  failing = false
  override async load (id: string): Promise<SessionRecord | null> {
    if (this.failing) throw new Error('disk on fire')
    return await super.load(id)
  }
}

t.test('a store failing under a snapshot read answers 503, for a session and for a handle', async t => {
  const store = new FailingLoads()
  const app = await build(t, { sessions: { store, lock: new MemorySessionLock({ timeout: LOCK_TIMEOUT }) } })
  const legacy = injectClient(app, { protocolVersion: '2025-11-25' })
  const modern = injectClient(app, { protocolVersion: '2026-07-28' })
  await legacy.callTool('counter_add', { by: 2 })
  const basket = await newBasket(modern)
  store.failing = true
  const onSession = await legacy.callTool('counter_peek').catch((err: unknown) => err)
  const onHandle = await modern.callTool('basket_get', { basket }).catch((err: unknown) => err)
  store.failing = false
  t.ok(onSession instanceof McpError && onHandle instanceof McpError)
  t.match(onSession, { status: 503, message: 'Session store is unavailable.' })
  t.match(onHandle, { status: 503, message: 'State store is unavailable.' })
  t.same((await legacy.callTool('counter_peek')).structuredContent, { counter: 2 }, 'served again once the store is back')
})

t.test('read-only calls on one session stay bounded by maxStreamsPerSession (429 past it)', async t => {
  const { url, session } = await batchSession(t, { maxStreamsPerSession: 4 })
  const replies = await Promise.all(Array.from({ length: 8 }, async () => await callTool(url, session, 'counter_peek', { delayMs: 300 })))
  const statuses = replies.map(r => r.status)
  t.equal(statuses.filter(s => s === 200).length, 4, `four run (${statuses.join(',')})`)
  t.equal(statuses.filter(s => s === 429).length, 4, 'the others are refused, not queued without bound')
})

t.test('Redis stopped: read-only calls answer 503 at once (session and handle), and are served again once it is back', async t => {
  const app = await build(t, { sessions: await backend(t, 'redis') })
  const legacy = injectClient(app, { protocolVersion: '2025-11-25' })
  const modern = injectClient(app, { protocolVersion: '2026-07-28' })
  t.same((await legacy.callTool('counter_peek')).structuredContent, { counter: 0 })
  const basket = await newBasket(modern)
  const server = redisServer as RedisServer
  await server.stop()
  try {
    const onSession = await legacy.callTool('counter_peek').catch((err: unknown) => err)
    const onHandle = await modern.callTool('basket_get', { basket }).catch((err: unknown) => err)
    t.match(onSession, { status: 503, message: 'Session store is unavailable.' })
    t.match(onHandle, { status: 503, message: 'State store is unavailable.' })
  } finally {
    await server.start()
  }
  // The private server keeps nothing across a restart: a new basket shows the path works again
  // (once the clients have reconnected).
  let again: string | undefined
  await until(async () => {
    again = (await modern.callTool('basket_create').catch(() => null))?.structuredContent?.basket as string | undefined
    return again !== undefined
  }, { timeout: 10_000, what: 'the store to serve again' })
  t.same((await modern.callTool('basket_get', { basket: again })).structuredContent, { items: [] })
})
