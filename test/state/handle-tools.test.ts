/**
 * Tools on state handles, in one process, on both wires (injectClient): the same tool for a 2025
 * client (inside its session) and a 2026-07-28 client; one text for a handle that is unknown,
 * expired, ended, someone else's or garbage, and nothing created for it; the lifetime in the
 * description; definitions refused; the answers when the lock is busy or the store fails a save;
 * the lease released around a wait for the client (both eras); a handle ended during a call; the
 * out-of-band API; a flood of handles bounded by the store.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, {
  FileSessionLock, FileSessionStore, injectClient, McpError, MemorySessionLock, MemorySessionStore,
  type InjectClient, type InjectClientOptions, type AuthenticateOptions, type McpPluginOptions, type SaveResult
} from '../../lib/index.js'
import { registerBasketTools } from '../../examples/demo-tools.js'
import { tokensAuth } from '../../examples/server.js'
import { serve } from '../helpers/http-client.js'
import { sleep, until } from '../helpers/time.js'
import { modernHeaders, rpc } from '../helpers/wire.js'

const ERAS = ['2025-11-25', '2026-07-28'] as const
const UNKNOWN = 'Unknown or expired basket handle.'
const AUTH = tokensAuth('alice-token:alice,bob-token:bob') as AuthenticateOptions

/** A memory store whose saves fail while `failing` is set (the backend failing mid-save). */
class FlakyStore extends MemorySessionStore {
  failing = false
  override async save (...args: Parameters<MemorySessionStore['save']>): Promise<SaveResult> {
    if (this.failing) throw new Error('disk on fire')
    return await super.save(...args)
  }
}

async function build (t: Test, opts: McpPluginOptions = {}, more?: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { requestState: { secret: 'handle-tools-secret' }, auth: AUTH, ...opts })
  registerBasketTools(app.mcp)
  app.mcp.tool({
    name: 'basket_note',
    description: 'Marks the basket, asks for a note, adds it.',
    input: Type.Object({ basket: Type.String() }),
    handle: { argument: 'basket', kind: 'basket' }
  }, async (_args, ctx) => {
    ctx.handle?.set('marked', true)
    const answer = await ctx.elicit('note', { message: 'Note?', requestedSchema: { type: 'object', properties: { note: { type: 'string' } } } })
    const items = ctx.handle?.get<string[]>('items') ?? []
    ctx.handle?.set('items', [...items, String(answer.content?.note)])
    return `${items.length + 1} items`
  })
  app.mcp.tool({
    name: 'basket_where',
    description: 'Says what the call sees.',
    input: Type.Object({ basket: Type.String() }),
    handle: { argument: 'basket', kind: 'basket' }
  }, async (_args, ctx) => ({ content: [], structuredContent: { session: ctx.session !== null, handle: ctx.handle?.has('items') ?? false } }))
  more?.(app)
  return app
}

function client (app: FastifyInstance, era: string, who = 'alice', options: InjectClientOptions = {}): InjectClient {
  return injectClient(app, { protocolVersion: era, headers: { authorization: `Bearer ${who}-token` }, ...options })
}

async function newBasket (c: InjectClient): Promise<string> {
  return (await c.callTool('basket_create')).structuredContent?.basket as string
}

for (const era of ERAS) {
  t.test(`${era}: the same tools work; the handler sees a handle, and a session only on the handshake era`, async t => {
    const app = await build(t)
    const c = client(app, era)
    const basket = await newBasket(c)
    t.match(basket, /^[A-Za-z0-9_-]{32}$/)
    t.same((await c.callTool('basket_add', { basket, item: 'pear' })).structuredContent, { count: 1 })
    t.same((await c.callTool('basket_add', { basket, item: 'fig' })).structuredContent, { count: 2 })
    t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['pear', 'fig'] })
    t.same((await c.callTool('basket_where', { basket })).structuredContent, { session: era !== '2026-07-28', handle: true })
    const other = client(app, era === '2026-07-28' ? '2025-11-25' : '2026-07-28')
    t.same((await other.callTool('basket_get', { basket })).structuredContent, { items: ['pear', 'fig'] }, 'the other era, same principal: same basket')
  })

  t.test(`${era}: unknown, expired, ended, someone else's and garbage handles get one isError text; nothing is created`, async t => {
    const dir = await mkdtemp(join(tmpdir(), 'mcp-handle-tools-'))
    t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
    const lock = new FileSessionLock({ dir })
    const app = await build(t, { sessions: { store: new FileSessionStore({ dir }), lock } }, (app) => {
      app.mcp.handleKind('brief', { ttl: 1000 })
      app.mcp.tool({ name: 'brief_create', description: 'A brief handle.' }, async (_a, ctx) => await ctx.handles.create('brief'))
      app.mcp.tool({ name: 'brief_use', description: 'Uses one.', input: Type.Object({ brief: Type.String() }), handle: { argument: 'brief', kind: 'brief' } },
        async () => 'used')
    })
    t.teardown(() => lock.close())
    const alice = client(app, era)
    const bob = client(app, era, 'bob')
    const basket = await newBasket(alice)
    const ended = await newBasket(alice)
    t.equal((await alice.callTool('basket_end', { basket: ended })).content[0].text, 'Basket thrown away.')
    const brief = (await alice.callTool('brief_create')).content[0].text as string
    t.equal((await alice.callTool('brief_use', { brief })).content[0].text, 'used', 'the brief handle works while fresh')
    // Sessions (the handshake era's clients) have files of their own: only handle files count.
    const files = async (): Promise<string[]> => (await readdir(dir)).filter(f => f.startsWith('~')).sort()
    const before = await files()
    t.equal(before.length, 3, 'the basket\'s data file, the brief handle\'s data and lock files (the ended basket left none)')

    const refused = async (c: InjectClient, basket: string, what: string): Promise<void> => {
      const r = await c.callTool('basket_add', { basket, item: 'x' })
      t.same([r.content, r.isError], [[{ type: 'text', text: UNKNOWN }], true], what)
    }
    await refused(bob, basket, 'someone else\'s')
    await refused(alice, ended, 'ended')
    await refused(alice, 'A'.repeat(32), 'unknown')
    for (const garbage of ['../../etc/passwd', '*', '?', '{x}', '{', 'mcp:{x}:lock', '~basket~x', 'a'.repeat(4096), '', ' ', 'é'.repeat(32)]) {
      await refused(alice, garbage, `garbage ${JSON.stringify(garbage.slice(0, 20))}`)
    }
    await sleep(1100)
    const expired = await alice.callTool('brief_use', { brief })
    t.same([expired.content, expired.isError], [[{ type: 'text', text: 'Unknown or expired brief handle.' }], true], 'expired: the same text')
    t.same(await files(), before, 'no data, lock or temp file created for any of them')
    t.same((await alice.callTool('basket_get', { basket })).structuredContent, { items: [] }, 'the basket itself is untouched')
  })

  t.test(`${era}: a busy handle answers 503 after the lock timeout; a failed save answers 503 and keeps nothing`, async t => {
    const store = new FlakyStore()
    const app = await build(t, { sessions: { store, lock: new MemorySessionLock({ timeout: 100 }) } })
    const c = client(app, era)
    const basket = await newBasket(c)
    const slow = c.callTool('basket_add', { basket, item: 'slow', delayMs: 400 })
    await sleep(50)
    const busy = await c.callTool('basket_add', { basket, item: 'busy' }).catch((err: unknown) => err)
    t.ok(busy instanceof McpError)
    t.match(busy, { status: 503, code: -32000, message: era === '2026-07-28' ? 'Another call on this handle is still being processed.' : /still being processed/ })
    t.same((await slow).structuredContent, { count: 1 })

    store.failing = true
    const failed = await c.callTool('basket_add', { basket, item: 'lost' }).catch((err: unknown) => err)
    store.failing = false
    t.match(failed, { status: 503, code: -32000, message: /store is unavailable/ }, 'not told the item was added')
    t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['slow'] }, 'and it was not')
  })

  t.test(`${era}: a handle ended during a call: the call is told so, and the handle is not re-created`, async t => {
    const app = await build(t)
    const c = client(app, era)
    const basket = await newBasket(c)
    const running = c.callTool('basket_add', { basket, item: 'late', delayMs: 200 })
    await sleep(50)
    t.equal(await app.mcp.handles.end('basket', basket), true, 'ended out of band')
    const r = await running
    t.same([r.content, r.isError], [[{ type: 'text', text: UNKNOWN }], true])
    t.equal(await app.mcp.handles.read('basket', basket), null, 'still gone')
  })
}

t.test('2026-07-28: an input_required round does not hold the lease, and keeps nothing of the round', async t => {
  const app = await build(t, { sessions: { lock: new MemorySessionLock({ timeout: 100 }) } })
  const between: unknown[] = []
  let basket = ''
  const helper = client(app, '2026-07-28')
  const c = client(app, '2026-07-28', 'alice', {
    elicit: async () => {
      // Between the rounds: another call on the handle gets it at once, and sees no mark.
      between.push((await helper.callTool('basket_add', { basket, item: 'between' })).structuredContent)
      between.push(await app.mcp.handles.read('basket', basket))
      return { action: 'accept', content: { note: 'note' } }
    }
  })
  basket = await newBasket(c)
  t.equal((await c.callTool('basket_note', { basket })).content[0].text, '2 items')
  t.same(between, [{ count: 1 }, { items: ['between'] }], 'the lease was free between the rounds; the first round wrote nothing')
  t.same(await app.mcp.handles.read('basket', basket), { items: ['between', 'note'], marked: true }, 'the completed round saved')
})

t.test('2026-07-28: a round that asked for input keeps nothing, even when the handler swallowed the signal', async t => {
  const app = await build(t, {}, (app) => {
    app.mcp.tool({ name: 'basket_swallow', description: 'd', input: Type.Object({ basket: Type.String() }), handle: { argument: 'basket', kind: 'basket' } },
      async (_a, ctx) => {
        const answer = await ctx.elicit('note', { message: 'Note?', requestedSchema: { type: 'object', properties: {} } }).catch(() => null)
        ctx.handle?.set('items', [answer === null ? 'asked' : 'answered'])
        return 'done'
      })
  })
  const seen: unknown[] = []
  let basket = ''
  const c = client(app, '2026-07-28', 'alice', {
    elicit: async () => { seen.push(await app.mcp.handles.read('basket', basket)); return { action: 'accept', content: {} } }
  })
  basket = await newBasket(c)
  t.equal((await c.callTool('basket_swallow', { basket })).content[0].text, 'done')
  t.same(seen, [{ items: [] }], 'the round that asked wrote nothing')
  t.same(await app.mcp.handles.read('basket', basket), { items: ['answered'] })
})

t.test('2025-11-25: waiting for the client releases the session and the handle; both are taken back', async t => {
  const app = await build(t, { sessions: { lock: new MemorySessionLock({ timeout: 100 }) } })
  let basket = ''
  const seen: unknown[] = []
  const helper = client(app, '2025-11-25')
  const c = client(app, '2025-11-25', 'alice', {
    elicit: async () => {
      seen.push(await app.mcp.handles.read('basket', basket))
      seen.push((await helper.callTool('basket_add', { basket, item: 'between' })).structuredContent)
      return { action: 'accept', content: { note: 'note' } }
    }
  })
  basket = await newBasket(c)
  t.equal((await c.callTool('basket_note', { basket })).content[0].text, '2 items', 'the handler re-read the basket after the wait')
  t.same(seen, [{ items: [], marked: true }, { count: 1 }], 'saved before the wait, free during it')
  t.same(await app.mcp.handles.read('basket', basket), { items: ['between', 'note'], marked: true })
})

t.test('descriptions carry the lifetime; bad declarations are refused at definition', async t => {
  const app = await build(t)
  const { tools } = await client(app, '2026-07-28').listTools()
  t.equal(tools.find(x => x.name === 'basket_add')?.description,
    'Adds an item to a basket (after waiting `delayMs`) and returns how many items it holds. The basket handle expires after 1 hour without use.')
  t.equal(tools.find(x => x.name === 'basket_create')?.description?.includes('expires'), false, 'a tool that only mints says nothing')
  app.mcp.tool({ name: 'says_so', description: 'Its lifetime is a day.', input: Type.Object({ basket: Type.String() }), handle: { argument: 'basket', kind: 'basket' } }, async () => '')
  t.equal(app.mcp.tools.get('says_so')?.descriptor.description, 'Its lifetime is a day.', 'a description that states a lifetime is kept')

  const bad = (def: Record<string, unknown>, why: RegExp): void => {
    t.throws(() => app.mcp.tool({ name: 'bad', description: 'd', ...def } as never, async () => ''), { code: 'FST_ERR_MCP_INVALID_DEFINITION', message: why })
  }
  bad({ input: Type.Object({ b: Type.String() }), handle: { argument: 'b', kind: 'nope' } }, /not registered/)
  bad({ input: Type.Object({ b: Type.Integer() }), handle: { argument: 'b', kind: 'basket' } }, /string property/)
  bad({ input: Type.Object({ c: Type.String() }), handle: { argument: 'b', kind: 'basket' } }, /string property/)
  bad({ input: Type.Object({ b: Type.Optional(Type.String()) }), handle: { argument: 'b', kind: 'basket' } }, /required/)
  bad({ handle: 'basket' }, /handle must be/)
  bad({ session: 'optional' }, /session must be "required"/)
  t.throws(() => app.mcp.handleKind('basket', { ttl: 60_000 }), { message: /already registered/ })
  t.throws(() => app.mcp.handleKind('Basket', { ttl: 60_000 }), { code: 'FST_ERR_MCP_INVALID_DEFINITION' })
  // docs/state-handles.md: 1–32 characters of [a-z0-9_], starting with a letter.
  for (const name of ['1bag', '_bag', 'a'.repeat(33), '', 'bag-x']) {
    t.throws(() => app.mcp.handleKind(name, { ttl: 60_000 }), { code: 'FST_ERR_MCP_INVALID_DEFINITION' }, JSON.stringify(name.slice(0, 40)))
  }
  app.mcp.handleKind('b', { ttl: 60_000 })
  app.mcp.handleKind(`z${'9_'.repeat(15)}a`, { ttl: 60_000 })
  t.throws(() => app.mcp.handleKind('short', { ttl: 999 }), { message: /at least 1000/ })
})

t.test('minting: never anonymous when authentication is configured; anonymous handles without it', async t => {
  const app = await build(t, { auth: { ...AUTH, required: false } })
  const anonymous = injectClient(app, { protocolVersion: '2026-07-28' })
  const r = await anonymous.callTool('basket_create')
  t.equal(r.isError, true, 'an anonymous caller of an authenticated server cannot mint')

  const open = await build(t, { auth: undefined })
  const a = injectClient(open, { protocolVersion: '2026-07-28' })
  const basket = await newBasket(a)
  t.same((await injectClient(open, { protocolVersion: '2025-11-25' }).callTool('basket_add', { basket, item: 'x' })).structuredContent, { count: 1 },
    'without authentication, any caller holding the id uses it')
})

t.test('app.mcp.handles: create for a principal, read and end out of band', async t => {
  const app = await build(t)
  const basket = await app.mcp.handles.create('basket', { principal: { id: 'alice' }, data: { items: ['seed'] } })
  t.same((await client(app, '2026-07-28').callTool('basket_get', { basket })).structuredContent, { items: ['seed'] })
  t.equal((await client(app, '2026-07-28', 'bob').callTool('basket_get', { basket })).isError, true)
  t.same(await app.mcp.handles.read('basket', basket, { id: 'alice' }), { items: ['seed'] })
  t.equal(await app.mcp.handles.read('basket', basket, { id: 'bob' }), null)
  t.equal(await app.mcp.handles.end('basket', basket, { id: 'bob' }), false)
  t.equal(await app.mcp.handles.end('basket', basket), true)
  await t.rejects(app.mcp.handles.create('nope'), TypeError)
})

t.test('a tool that needs a session answers so on the stateless wire, and runs on the handshake era', async t => {
  const app = await build(t, {}, (app) => {
    app.mcp.tool({ name: 'needs', description: 'd', session: 'required' }, async (_a, ctx) => `session ${String(ctx.session !== null)}`)
  })
  const r = await client(app, '2026-07-28').callTool('needs')
  t.equal(r.isError, true)
  t.match(r.content[0].text, /needs a session/)
  t.equal((await client(app, '2025-11-25').callTool('needs')).content[0].text, 'session true')
})

t.test('a flood of new handles is bounded by the store; a basket in use survives it', async t => {
  const store = new MemorySessionStore({ max: 20 })
  const app = await build(t, { sessions: { store } })
  const c = client(app, '2026-07-28')
  const kept = await newBasket(c)
  await c.callTool('basket_add', { basket: kept, item: 'keep me' })
  for (let i = 0; i < 100; i++) await newBasket(c)
  t.ok(store.size <= 20, `the store holds at most its max (${store.size})`)
  t.same((await c.callTool('basket_get', { basket: kept })).structuredContent, { items: ['keep me'] }, 'the used basket was not evicted')
})

t.test('2026-07-28: minting runs the store\'s GC policy, which collects expired handles', async t => {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-handle-gc-'))
  t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
  const app = await build(t, { sessions: { store: new FileSessionStore({ dir }), gcProbability: 1, gcDivisor: 1 } }, (app) => {
    app.mcp.handleKind('brief', { ttl: 1000 })
    app.mcp.tool({ name: 'brief_create', description: 'A brief handle.' }, async (_a, ctx) => await ctx.handles.create('brief'))
  })
  const c = client(app, '2026-07-28')
  const brief = (await c.callTool('brief_create')).content[0].text as string
  t.ok((await readdir(dir)).includes(`~brief~${brief}.json`))
  await sleep(1100)
  await newBasket(c)
  await until(async () => !(await readdir(dir)).includes(`~brief~${brief}.json`), { timeout: 30_000, what: 'gc to collect the expired handle' })
  t.pass('the expired handle\'s file was collected')
})

t.test('2026-07-28: a call whose client went away keeps nothing, even when its handler ignored the signal', async t => {
  let started = false
  let finished = false
  const app = await build(t, {}, (app) => {
    app.mcp.tool({ name: 'basket_stubborn', description: 'd', input: Type.Object({ basket: Type.String() }), handle: { argument: 'basket', kind: 'basket' } },
      async (_a, ctx) => {
        started = true
        ctx.handle?.set('items', ['stubborn'])
        await sleep(300) // not ctx.signal: it runs to the end
        finished = true
        return 'done'
      })
  })
  const { url } = await serve(t, app)
  const basket = await app.mcp.handles.create('basket', { principal: { id: 'alice' }, data: { items: [] } })
  const gone = new AbortController()
  const body = rpc('tools/call', { name: 'basket_stubborn', arguments: { basket } })
  const call = fetch(url, { method: 'POST', headers: { ...modernHeaders(body), authorization: 'Bearer alice-token' }, body: JSON.stringify(body), signal: gone.signal })
    .then(async (res) => await res.text()).catch(() => 'aborted')
  // Gone while the handler runs (a fixed 100 ms was sometimes before it started, on a loaded machine).
  await until(() => started, { what: 'the handler to start' })
  gone.abort()
  t.equal(await call, 'aborted')
  await until(() => finished, { what: 'the handler to finish' })
  await sleep(50)
  t.same(await app.mcp.handles.read('basket', basket), { items: [] }, 'nobody was told it was added, and it was not')
})
