/**
 * Read-only tools under attack and faults (a lock configured explicitly): a batch that mixes
 * read-only and writing calls takes the lock, one of read-only calls only does not wait; a
 * read-only member of a locked batch still cannot write; a tool replaced by a writing one while
 * its POST runs on a snapshot cannot write; a store failing under a snapshot read, or Redis
 * stopped, answers 503; read-only calls stay bounded per session (429).
 */
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { injectClient, McpError, MemorySessionLock, MemorySessionStore, type McpPluginOptions, type SessionLock, type SessionRecord } from '../../lib/index.js'
import { callTool, initialize, post, serve } from '../helpers/http-client.js'
import { until } from '../helpers/time.js'
import { newId, type Session } from '../helpers/wire.js'
import { LOCK_TIMEOUT, ReadGate, backend, build, held, newBasket, redis } from './fixtures/read-only-app.js'

// ─── Attacks and faults ──────────────────────────────────────────────────────────────────────

/** A session on protocol 2025-03-26 (batches), over real HTTP. */
async function batchSession (t: Test, opts: McpPluginOptions = {}, gate?: ReadGate): Promise<{ url: string, session: Session, app: FastifyInstance, lock: SessionLock }> {
  const sessions = await backend(t, 'memory')
  const app = await build(t, { sessions, ...opts }, gate)
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
  await until(() => held(lock) > 0, { timeout: 30_000, what: 'the writer to hold the lock' })
  const batch = [call('counter_peek'), call('counter_add', { by: 1 })]
  const reply = await post(url, batch, session)
  const [peek, add] = results(reply.messages, batch)
  t.equal((await slow).last?.result?.structuredContent?.counter, 1)
  t.same(peek?.structuredContent, { counter: 1 }, 'the read-only member ran under the lock, after the slow write')
  t.same([add?.isError, add?.structuredContent], [undefined, { counter: 2 }], 'the writing member wrote')
  t.equal((await callTool(url, session, 'counter_get')).last?.result?.structuredContent?.counter, 2)
})

t.test('a batch of read-only calls only reads a snapshot: it does not wait for a writer', async t => {
  // The writer holds the lock until the test opens its gate: the batch answering before that shows
  // it did not wait for the lock (an ordering, not a time window).
  const gate = new ReadGate()
  const { url, session, lock } = await batchSession(t, {}, gate)
  const slow = callTool(url, session, 'counter_add_wait')
  await until(() => held(lock) > 0 && gate.waiting === 1, { timeout: 30_000, what: 'the writer to hold the lock' })
  const batch = [call('counter_peek'), call('counter_peek')]
  const reply = await post(url, batch, session)
  t.equal(gate.waiting, 1, 'answered while the writer still held the lock')
  t.same(results(reply.messages, batch).map(r => r?.structuredContent), [{ counter: 0 }, { counter: 0 }])
  gate.open()
  t.equal((await slow).last?.result?.structuredContent?.counter, 1)
})

t.test('in a batch that took the lock, a read-only member still cannot write, and the next member can', async t => {
  const { url, session } = await batchSession(t)
  const batch = [call('sneak', { how: 'set' }), call('counter_add', { by: 3 })]
  const [sneak, add] = results((await post(url, batch, session)).messages, batch)
  t.match([sneak?.isError, sneak?.content?.[0]?.text], [true, /^Cannot set "counter": tool "sneak" is read-only/])
  t.same(add?.structuredContent, { counter: 3 })
  t.equal((await callTool(url, session, 'counter_get')).last?.result?.structuredContent?.counter, 3)
})

t.test('a handle opened as a snapshot refuses writes outside the handler\'s run too (writes a read-only handler left behind)', async t => {
  // The handler's own seal (readOnlyRun) lasts while it runs; the snapshot's seal (handle-calls.ts
  // sealSnapshot) covers the handle until it is closed. Writes from promises the handler left
  // behind land at every depth of the microtask queue, around the end of its run and the close.
  const app = await build(t, { sessions: await backend(t, 'memory') })
  const attempts: string[] = []
  app.mcp.tool({
    name: 'basket_leave',
    description: 'Reads its basket, and leaves writes behind.',
    input: { type: 'object', properties: { basket: { type: 'string' } }, required: ['basket'] },
    handle: { argument: 'basket', kind: 'basket' },
    annotations: { readOnlyHint: true }
  }, async (_a, ctx) => {
    const handle = ctx.handle
    for (let depth = 1; depth <= 40; depth++) {
      void (async () => {
        for (let i = 0; i < depth; i++) await null
        try { handle?.set('items', [`stolen at ${depth}`]); attempts.push('written') } catch { attempts.push('refused') }
      })()
    }
    return 'read'
  })
  for (const era of ['2025-11-25', '2026-07-28']) {
    const c = injectClient(app, { protocolVersion: era })
    const basket = await newBasket(c)
    await c.callTool('basket_add', { basket, item: 'pear' })
    attempts.length = 0
    t.equal((await c.callTool('basket_leave', { basket })).content?.[0]?.text, 'read', `${era}: the call answers`)
    await new Promise(resolve => setImmediate(resolve))
    t.equal(attempts.length, 40, `${era}: every write was tried`)
    t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['pear'] }, `${era}: nothing stored`)
  }
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
  const server = await redis()
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
