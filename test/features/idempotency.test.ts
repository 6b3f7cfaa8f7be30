/**
 * Idempotency keys on `tools/call` (docs/retries-and-idempotency.md), in one process on the
 * memory store and lock: a keyed call runs once and its copies get its recorded result, marked as
 * a replay — on a state handle (2026-07-28), on a handshake-era session, and on no state at all
 * (a record of its own: a copy in flight is refused with 409) —; the same key with other
 * arguments is refused and runs nothing; two principals' keys are independent; the key's three
 * carriers and their bounds; the records' bounds; `dedupe` (off by default); `idempotency: false`.
 * The store's faults (refused, unknown) are in `idempotency-faults.test.ts`; several processes on
 * Redis and PostgreSQL in `test/many/idempotency-processes.test.ts`.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { injectClient, type InjectClient, type McpPluginOptions } from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { tokensAuth } from '../../examples/server.js'
import { otel } from '../helpers/otel.js'
import { mcpErrorOf } from '../helpers/mcp-error.js'
import { sleep } from '../helpers/time.js'

const REPLAY = 'fastify-mcp-http/idempotentReplay'
type Answer = Record<string, any>

interface Built { app: FastifyInstance, runs: Map<string, number>, logs: string[] }

async function build (t: Test, opts: Partial<McpPluginOptions> = {}): Promise<Built> {
  const logs: string[] = []
  const app = Fastify({ logger: { level: 'debug', stream: { write: (line: string) => { logs.push(line) } } } })
  t.teardown(() => app.close())
  await app.register(mcp, { requestState: { secret: 'idempotency-test-secret' }, ...opts })
  registerDemoTools(app.mcp)
  const runs = new Map<string, number>()
  // A tool on no state: counts its runs (its effect is outside the plugin's state).
  app.mcp.tool({
    name: 'send_mail',
    description: 'Sends a mail (counted): an effect outside the plugin\'s state.',
    input: Type.Object({ to: Type.String(), delayMs: Type.Optional(Type.Integer()), fail: Type.Optional(Type.Boolean()), big: Type.Optional(Type.Integer()) })
  }, async ({ to, delayMs = 0, fail = false, big = 0 }, ctx) => {
    runs.set(to, (runs.get(to) ?? 0) + 1)
    if (delayMs > 0) await sleep(delayMs)
    if (fail) return { content: [{ type: 'text', text: `no mailbox ${to}` }], isError: true }
    return { content: [{ type: 'text', text: big > 0 ? 'x'.repeat(big) : `sent #${runs.get(to) ?? 0} to ${to}` }], structuredContent: { key: ctx.idempotencyKey ?? null } }
  })
  await app.ready()
  return { app, runs, logs }
}

const stripReplay = (r: Record<string, any>): Record<string, any> => {
  const { _meta: meta, ...rest } = r
  const m = { ...meta }
  delete m[REPLAY]
  return Object.keys(m).length === 0 ? rest : { ...rest, _meta: m }
}

async function newBasket (c: InjectClient): Promise<string> {
  return (await c.callTool('basket_create')).structuredContent?.basket as string
}

t.test('a keyed call on a state handle (2026-07-28) runs once; its copy replays the result, marked', async t => {
  const { app } = await build(t)
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const basket = await newBasket(c)
  const first = await c.callTool('basket_add', { basket, item: 'pear' }, { idempotencyKey: 'k-1' })
  t.same(first.structuredContent, { count: 1 })
  t.notOk((first as Answer)._meta?.[REPLAY], 'the first answer is not a replay')
  const again = await c.callTool('basket_add', { basket, item: 'pear' }, { idempotencyKey: 'k-1' })
  t.equal((again as Answer)._meta?.[REPLAY], true, 'the copy is marked as a replay')
  t.same(stripReplay(again), stripReplay(first), 'the copy gets the first result unchanged')
  t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['pear'] }, 'applied once')
  const other = await c.callTool('basket_add', { basket, item: 'pear' }, { idempotencyKey: 'k-2' })
  t.same(other.structuredContent, { count: 2 }, 'another key is another call')
  const unkeyed = await c.callTool('basket_add', { basket, item: 'pear' })
  t.same(unkeyed.structuredContent, { count: 3 }, 'a call without a key runs every time')
})

t.test('parallel copies of one keyed call on a handle: one runs, the others queue behind the lock and replay', async t => {
  const { app } = await build(t)
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const basket = await newBasket(c)
  const answers = await Promise.all(Array.from({ length: 20 }, async () => await c.callTool('basket_add', { basket, item: 'fig', delayMs: 5 }, { idempotencyKey: 'same' })))
  t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['fig'] }, 'one item')
  t.equal(answers.filter(a => (a as Answer)._meta?.[REPLAY] === true).length, 19, '19 replays')
  t.ok(answers.every(a => (a.structuredContent as { count: number }).count === 1), 'every answer is the first result')
})

t.test('a keyed call on a handshake-era session runs once (the record is in the session, saved with the counter)', async t => {
  const { app } = await build(t)
  const c = injectClient(app, { protocolVersion: '2025-11-25' })
  const a = await c.callTool('counter_add', { by: 5 }, { idempotencyKey: 'add-5' })
  const b = await c.callTool('counter_add', { by: 5 }, { idempotencyKey: 'add-5' })
  t.same(a.structuredContent, { counter: 5 })
  t.same(b.structuredContent, { counter: 5 })
  t.equal((b as Answer)._meta?.[REPLAY], true)
  t.same((await c.callTool('counter_get')).structuredContent, { counter: 5 }, 'applied once')
})

t.test('the same key with other arguments is refused (-32602) and runs nothing', async t => {
  const { app } = await build(t)
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const basket = await newBasket(c)
  await c.callTool('basket_add', { basket, item: 'pear' }, { idempotencyKey: 'k' })
  const err = await mcpErrorOf(c.callTool('basket_add', { basket, item: 'plum' }, { idempotencyKey: 'k' }))
  t.equal(err.code, -32602)
  t.match(err.data, { reason: 'idempotency_key_reused' })
  t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['pear'] }, 'nothing ran')
  // Arguments in another key order are the same arguments (a canonical hash).
  const same = await c.callTool('basket_add', { item: 'pear', basket }, { idempotencyKey: 'k' })
  t.equal((same as Answer)._meta?.[REPLAY], true, 'key order does not matter')
})

t.test('a keyed call on no state: a record of its own; a copy replays; a copy in flight gets 409 with Retry-After', async t => {
  const { app, runs } = await build(t)
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const first = await c.callTool('send_mail', { to: 'ann' }, { idempotencyKey: 'mail-1' })
  const copy = await c.callTool('send_mail', { to: 'ann' }, { idempotencyKey: 'mail-1' })
  t.equal(runs.get('ann'), 1, 'the handler ran once')
  t.same(stripReplay(copy), stripReplay(first))
  t.equal((copy as Answer)._meta?.[REPLAY], true)
  t.same(first.structuredContent, { key: 'mail-1' }, 'ctx.idempotencyKey is the key')

  const slow = c.callTool('send_mail', { to: 'bob', delayMs: 600 }, { idempotencyKey: 'mail-2' })
  await sleep(100)
  const refused = await mcpErrorOf(c.callTool('send_mail', { to: 'bob', delayMs: 600 }, { idempotencyKey: 'mail-2' }))
  t.equal(refused.status, 409, 'in flight: refused at once, not queued')
  t.match(refused.data, { reason: 'idempotency_key_in_flight' })
  const raw = await app.inject({
    method: 'POST',
    url: '/mcp',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'send_mail' },
    payload: { jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'send_mail', arguments: { to: 'bob', delayMs: 600 }, idempotencyKey: 'mail-2', _meta: metaOf() } }
  })
  t.equal(raw.statusCode, 409, raw.body)
  t.equal(raw.headers['retry-after'], '1', 'with Retry-After')
  await slow
  t.equal(runs.get('bob'), 1, 'the copy did not run')
  const later = await c.callTool('send_mail', { to: 'bob', delayMs: 600 }, { idempotencyKey: 'mail-2' })
  t.equal((later as Answer)._meta?.[REPLAY], true, 'once done, the copy replays')
})

t.test('a tool error (isError) is recorded and replayed like a success', async t => {
  const { app, runs } = await build(t)
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const a = await c.callTool('send_mail', { to: 'nobody', fail: true }, { idempotencyKey: 'e' })
  const b = await c.callTool('send_mail', { to: 'nobody', fail: true }, { idempotencyKey: 'e' })
  t.equal(a.isError, true)
  t.equal(b.isError, true)
  t.equal((b as Answer)._meta?.[REPLAY], true)
  t.equal(runs.get('nobody'), 1)
})

t.test('two principals with one key are independent', async t => {
  const { app, runs } = await build(t, { auth: tokensAuth('a:alice,b:bob') })
  const alice = injectClient(app, { protocolVersion: '2026-07-28', headers: { authorization: 'Bearer a' } })
  const bob = injectClient(app, { protocolVersion: '2026-07-28', headers: { authorization: 'Bearer b' } })
  await alice.callTool('send_mail', { to: 'x' }, { idempotencyKey: 'shared' })
  const b = await bob.callTool('send_mail', { to: 'x' }, { idempotencyKey: 'shared' })
  t.notOk((b as Answer)._meta?.[REPLAY], 'bob\'s call is his own')
  t.equal(runs.get('x'), 2)
})

t.test('the key travels in params, in _meta or in the Idempotency-Key header; bad keys are refused', async t => {
  const { app, runs } = await build(t)
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  await c.callTool('send_mail', { to: 'm' }, { headers: { 'idempotency-key': 'h-1' } })
  const viaMeta = await c.request('tools/call', { name: 'send_mail', arguments: { to: 'm' }, _meta: { 'fastify-mcp-http/idempotencyKey': 'h-1' } })
  t.equal((viaMeta as Answer)._meta?.[REPLAY], true, 'the header\'s key and the _meta key are one key')
  t.equal(runs.get('m'), 1)
  for (const bad of ['', 'x'.repeat(256), 'tab\there', 'é', 'x'.repeat(1024 * 1024)]) {
    const err = await mcpErrorOf(c.callTool('send_mail', { to: 'm' }, { idempotencyKey: bad }))
    t.equal(err.code, -32602, `refused: ${JSON.stringify(bad.slice(0, 12))} (${bad.length} characters)`)
    t.match(err.data, { reason: 'idempotency_key_invalid' })
  }
  const differ = await mcpErrorOf(c.callTool('send_mail', { to: 'm' }, { idempotencyKey: 'a', headers: { 'idempotency-key': 'b' } }))
  t.match(differ.data, { reason: 'idempotency_key_invalid' }, 'keys that differ are refused')
  t.equal(runs.get('m'), 1, 'nothing refused ran')
  t.equal(JSON.stringify(await c.callTool('send_mail', { to: 'm', big: 0 }, { idempotencyKey: 'k'.repeat(255) })).includes('sent'), true, 'a 255-character key is fine')
})

t.test('the Idempotency-Key header on a batch is refused (400): one key names one call', async t => {
  const { app } = await build(t)
  const c = injectClient(app, { protocolVersion: '2025-03-26' })
  await c.initialize()
  const res = await app.inject({
    method: 'POST',
    url: '/mcp',
    headers: {
      'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': c.sessionId as string, 'idempotency-key': 'batch', 'mcp-protocol-version': '2025-03-26'
    },
    payload: [
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'counter_add', arguments: { by: 1 } } },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'counter_add', arguments: { by: 2 } } }
    ]
  })
  const body = JSON.parse(res.body) as Array<{ error?: { code: number, data?: { reason: string } } }>
  t.ok(body.every(r => r.error?.data?.reason === 'idempotency_key_invalid'), 'each call of the batch is refused')
  t.same((await c.callTool('counter_get')).structuredContent, { counter: 0 }, 'nothing ran')
})

t.test('the capability is advertised; idempotency: false ignores keys', async t => {
  const on = await build(t)
  const c = injectClient(on.app, { protocolVersion: '2025-11-25' })
  const init = await c.initialize()
  t.match(init.capabilities.experimental, { 'fastify-mcp-http/idempotency': { param: 'idempotencyKey', meta: 'fastify-mcp-http/idempotencyKey', header: 'Idempotency-Key', maxKeyLength: 255 } })
  const off = await build(t, { idempotency: false })
  const d = injectClient(off.app, { protocolVersion: '2025-11-25' })
  t.notOk((await d.initialize()).capabilities.experimental, 'not advertised when off')
  await d.callTool('send_mail', { to: 'z' }, { idempotencyKey: 'k' })
  await d.callTool('send_mail', { to: 'z' }, { idempotencyKey: 'k' })
  t.equal(off.runs.get('z'), 2, 'keys ignored')
})

t.test('bounds: a result over maxResultBytes is recorded as applied without it; a state keeps maxPerState records', async t => {
  const { app, runs } = await build(t, { idempotency: { maxResultBytes: 1000, maxPerState: 3 } })
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  await c.callTool('send_mail', { to: 'big', big: 5000 }, { idempotencyKey: 'big' })
  const replay = await c.callTool('send_mail', { to: 'big', big: 5000 }, { idempotencyKey: 'big' })
  t.equal(runs.get('big'), 1, 'not run again')
  t.equal((replay as Answer)._meta?.[REPLAY], true)
  t.equal((replay as Answer)._meta?.['fastify-mcp-http/resultNotKept'], true, 'the replay says the result was not kept')
  t.match(JSON.stringify(replay.content), /applied before/)

  const s = injectClient(app, { protocolVersion: '2025-11-25' })
  for (let i = 0; i < 4; i++) await s.callTool('counter_add', { by: 1 }, { idempotencyKey: `n${i}` })
  t.same((await s.callTool('counter_add', { by: 1 }, { idempotencyKey: 'n3' })).structuredContent, { counter: 4 }, 'a recent key replays')
  t.same((await s.callTool('counter_add', { by: 1 }, { idempotencyKey: 'n0' })).structuredContent, { counter: 5 }, 'the oldest record went: its key runs again')
})

t.test('dedupe is off by default; on, it absorbs an identical call within the window', async t => {
  const off = await build(t)
  const c = injectClient(off.app, { protocolVersion: '2026-07-28' })
  await Promise.all([c.callTool('send_mail', { to: 'd' }), sleep(3).then(async () => await c.callTool('send_mail', { to: 'd' }))])
  t.equal(off.runs.get('d'), 2, 'off: both ran')

  const on = await build(t, { idempotency: { dedupe: { windowMs: 60_000 } } })
  const d = injectClient(on.app, { protocolVersion: '2026-07-28' })
  const [a, b] = await Promise.all([d.callTool('send_mail', { to: 'd', delayMs: 20 }), sleep(3).then(async () => await d.callTool('send_mail', { to: 'd', delayMs: 20 }))])
  t.equal(on.runs.get('d'), 1, 'on: the copy 3 ms later was absorbed')
  t.equal([a, b].filter(r => (r as Answer)._meta?.[REPLAY] === true).length, 1, 'the copy waited for the first and got its result')
  t.same(stripReplay(a), stripReplay(b))
  await d.callTool('send_mail', { to: 'e' })
  await d.callTool('send_mail', { to: 'f' })
  t.equal(on.runs.get('e'), 1)
  t.equal(on.runs.get('f'), 1, 'other arguments are another call')
})

t.test('keys are secrets: no key in the log', async t => {
  const { app, logs } = await build(t)
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const key = 'secret-key-0123456789abcdef'
  await c.callTool('send_mail', { to: 'q' }, { idempotencyKey: key })
  await c.callTool('send_mail', { to: 'q' }, { idempotencyKey: key })
  await mcpErrorOf(c.callTool('send_mail', { to: 'other' }, { idempotencyKey: key }))
  t.ok(logs.length > 0, 'the app logged')
  t.notOk(logs.some(l => l.includes(key)), 'the key appears in no log line')
})

t.test('a 1 MiB argument is hashed, not stored: the record stays small', async t => {
  const { app, runs } = await build(t)
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const to = 'y'.repeat(1024 * 1024)
  await c.callTool('send_mail', { to }, { idempotencyKey: 'huge' })
  const again = await c.callTool('send_mail', { to }, { idempotencyKey: 'huge' })
  t.equal((again as Answer)._meta?.[REPLAY], true)
  t.equal(runs.get(to), 1)
})

/** The `_meta` envelope of a raw 2026-07-28 request. */
function metaOf (): Record<string, unknown> {
  return {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': {},
    'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' }
  }
}

t.test('a keyed call that starts a task: the retry with the key gets the same task, never a second', async t => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { requestState: { secret: 'idempotency-test-secret' } })
  let started = 0
  app.mcp.tool({ name: 'report', description: 'a long report (a task)', taskSupport: 'required' }, async () => { started++; await sleep(50); return 'the report' })
  await app.ready()
  const c = injectClient(app, { protocolVersion: '2026-07-28', capabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} } } })
  const first = await c.request('tools/call', { name: 'report', arguments: {}, idempotencyKey: 'report-1' })
  const retry = await c.request('tools/call', { name: 'report', arguments: {}, idempotencyKey: 'report-1' })
  t.equal(first.resultType, 'task')
  t.equal(retry.taskId, first.taskId, 'the same task')
  t.equal(retry._meta?.[REPLAY], true, 'answered as a replay')
  await sleep(200)
  t.equal(started, 1, 'one task ran')
  const other = await c.request('tools/call', { name: 'report', arguments: {}, idempotencyKey: 'report-2' })
  t.not(other.taskId, first.taskId, 'another key: another task')
})

t.test('seen from outside: fastify_mcp.idempotency.calls by outcome, and the outcome on the request\'s span', async t => {
  const o = otel(t)
  const { app } = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } })
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  await c.callTool('send_mail', { to: 'o' }, { idempotencyKey: 'seen' })
  await c.callTool('send_mail', { to: 'o' }, { idempotencyKey: 'seen' })
  await mcpErrorOf(c.callTool('send_mail', { to: 'p' }, { idempotencyKey: 'seen' }))
  const points = await o.points('fastify_mcp.idempotency.calls')
  const by = Object.fromEntries(points.map(p => [String(p.attributes['fastify_mcp.idempotency.outcome']), p.value]))
  t.same(by, { recorded: 1, replay: 1, conflict: 1 })
  const outcomes = o.spans().map(s => s.attributes['fastify_mcp.idempotency.outcome']).filter(v => v !== undefined)
  t.same(outcomes.sort(), ['conflict', 'recorded', 'replay'], 'each call\'s span says what became of it')
})

t.test('a keyed call that asks the client: the key spans the rounds; the round that completes is recorded, a copy replays without asking', async t => {
  for (const era of ['2026-07-28', '2025-11-25'] as const) {
    const app = Fastify({ logger: false })
    t.teardown(() => app.close())
    await app.register(mcp, { requestState: { secret: 'idempotency-test-secret' } })
    registerDemoTools(app.mcp)
    app.mcp.tool({
      name: 'basket_add_asked',
      description: 'Asks which item, then adds it to the basket.',
      input: Type.Object({ basket: Type.String() }),
      handle: { argument: 'basket', kind: 'basket' }
    }, async (_args, ctx) => {
      const answer = await ctx.elicit('item', { message: 'Which item?', requestedSchema: { type: 'object', properties: { item: { type: 'string' } }, required: ['item'] } })
      const item = String(answer.content?.item)
      ctx.handle?.set('items', [...(ctx.handle.get<string[]>('items') ?? []), item])
      return `added ${item}`
    })
    await app.ready()
    let asked = 0
    const c = injectClient(app, { protocolVersion: era, elicit: () => { asked++; return { action: 'accept', content: { item: `answer-${asked}` } } } })
    const basket = await newBasket(c)
    const first = await c.callTool('basket_add_asked', { basket }, { idempotencyKey: 'asked' })
    const copy = await c.callTool('basket_add_asked', { basket }, { idempotencyKey: 'asked' })
    t.equal(asked, 1, `${era}: asked once`)
    t.same(stripReplay(copy), stripReplay(first), `${era}: the copy gets the first result`)
    t.equal((copy as Answer)._meta?.[REPLAY], true)
    t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['answer-1'] }, `${era}: applied once`)
  }
})
