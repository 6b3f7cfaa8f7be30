/**
 * Handshake-era requests without `Mcp-Session-Id` (a client that never sends back the id
 * `initialize` gave it): served without a session. Lists and tools work, `ctx.session` is null, a
 * tool that needs a session answers `isError` saying to send the id back, subscriptions and
 * setLevel get a JSON-RPC error, a request to the client fails in the handler, state handles work;
 * `sessions.requireSessionId` keeps the strict 400; an unknown id is still 404.
 * (Across processes sharing Redis, under the lock: test/many/no-echo.test.ts.)
 */
import t from 'tap'
import { Type } from '@sinclair/typebox'
import type { McpDecorator } from '../../../lib/index.js'
import { build, call, initialize, post, request } from '../../helpers/handshake-app.js'

function tools (m: McpDecorator): void {
  m.tool({ name: 'who', description: 'Says whether there is a session' }, async (_a, ctx) => ctx.session === null ? 'no session' : 'session')
  m.tool({ name: 'counter', description: 'Needs a session', session: 'required' }, async () => 'ran')
  m.tool({ name: 'ask', description: 'Asks the client' }, async (_a, ctx) => {
    await ctx.elicit('name', { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
    return 'asked'
  })
  m.handleKind('bag', { ttl: 60_000 })
  m.tool({ name: 'bag_create', description: 'A bag' }, async (_a, ctx) => await ctx.handles.create('bag', { n: 0 }))
  m.tool({
    name: 'bag_add',
    description: 'Adds one',
    input: Type.Object({ bag: Type.String() }),
    handle: { argument: 'bag', kind: 'bag' }
  }, async (_a, ctx) => {
    const n = (ctx.handle?.get<number>('n') ?? 0) + 1
    // A wait between the read and the write: parallel calls interleave here unless the lock
    // serializes them (without it, they read the same n and lose updates).
    await new Promise(resolve => setTimeout(resolve, 10))
    ctx.handle?.set('n', n)
    return String(n)
  })
}

const text = (r: Record<string, any>): string => r.result?.content?.[0]?.text

t.test('a request without Mcp-Session-Id is served without a session', async t => {
  const app = await build(t, {}, tools)
  await initialize(app)
  const list = await request(app, null, 'tools/list', {}, { id: 1 })
  t.equal(list.statusCode, 200, 'tools/list → 200')
  t.equal(list.headers['mcp-session-id'], undefined, 'no session is made for it')
  t.ok(list.json().result.tools.length >= 5)

  t.equal(text(await call(app, null, 'tools/call', { name: 'who', arguments: {} })), 'no session', 'ctx.session is null')

  const needs = await call(app, null, 'tools/call', { name: 'counter', arguments: {} })
  t.equal(needs.result.isError, true, 'a session-only tool answers isError, not a 400')
  t.match(text(needs), /send back the Mcp-Session-Id header/)

  const asked = await call(app, null, 'tools/call', { name: 'ask', arguments: {} })
  t.equal(asked.result.isError, true, 'a request to the client fails in the handler')
  t.match(text(asked), /carries no Mcp-Session-Id \(the client must send back the one initialize returned\)/)

  for (const [method, params] of [['logging/setLevel', { level: 'info' }], ['resources/subscribe', { uri: 'x://y' }]] as const) {
    const r = await call(app, null, method, params)
    if (method === 'resources/subscribe' && r.error?.code === -32601) continue // no resources capability here
    t.equal(r.error?.code, -32600, `${method}: a JSON-RPC error`)
    t.match(r.error?.message, /needs a session; send back the Mcp-Session-Id/)
  }

  t.same(await call(app, null, 'ping', undefined, { id: 'p' }), { jsonrpc: '2.0', id: 'p', result: {} }, 'ping answers')
  t.equal((await post(app, { jsonrpc: '2.0', method: 'notifications/initialized' })).statusCode, 202, 'notifications are accepted')
  t.equal((await post(app, { jsonrpc: '2.0', id: 'x', result: {} })).statusCode, 202, 'a stray answer is accepted')
})

t.test('state handles work without a session', async t => {
  const app = await build(t, {}, tools)
  const bag = text(await call(app, null, 'tools/call', { name: 'bag_create', arguments: {} }))
  t.type(bag, 'string')
  const added = await Promise.all(Array.from({ length: 10 }, async () => await call(app, null, 'tools/call', { name: 'bag_add', arguments: { bag } })))
  t.same(added.map(text).sort((a, b) => Number(a) - Number(b)), Array.from({ length: 10 }, (_, i) => String(i + 1)), 'each call saw the one before it')
})

t.test('the same calls with lock: false interleave and lose updates (what the lock above prevents)', async t => {
  const app = await build(t, { sessions: { lock: false } }, tools)
  const bag = text(await call(app, null, 'tools/call', { name: 'bag_create', arguments: {} }))
  const added = await Promise.all(Array.from({ length: 10 }, async () => await call(app, null, 'tools/call', { name: 'bag_add', arguments: { bag } })))
  t.ok(new Set(added.map(text)).size < 10, `some calls read the same n (${added.map(text).join(',')})`)
})

t.test('an unknown or malformed id is still refused', async t => {
  const app = await build(t, {}, tools)
  const unknown = { sid: 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', version: '2025-11-25' }
  t.equal((await request(app, unknown, 'tools/list')).statusCode, 404)
  t.equal((await post(app, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { headers: { 'mcp-session-id': 'has space' } })).statusCode, 400)
})

t.test('sessions.requireSessionId keeps the strict 400', async t => {
  const app = await build(t, { sessions: { requireSessionId: true } }, tools)
  const r = await request(app, null, 'tools/list', {}, { id: 9 })
  t.equal(r.statusCode, 400)
  t.same(r.json(), { jsonrpc: '2.0', id: 9, error: { code: -32600, message: 'Bad Request: Mcp-Session-Id header is required' } })
  t.equal((await post(app, { jsonrpc: '2.0', method: 'notifications/initialized' })).statusCode, 400)
  const s = await initialize(app)
  t.equal((await request(app, s, 'tools/list')).statusCode, 200, 'a session is served as before')
})

t.test('sessions.requireSessionId must be a boolean', async t => {
  await t.rejects(build(t, { sessions: { requireSessionId: 'yes' as never } }, tools), { code: 'FST_ERR_MCP_INVALID_OPTION' })
})

t.test('a batch without a session follows the version header', async t => {
  const app = await build(t, {}, tools)
  const batch = [{ jsonrpc: '2.0', id: 1, method: 'ping' }, { jsonrpc: '2.0', id: 2, method: 'tools/list' }]
  const refused = await post(app, batch, { headers: { 'mcp-protocol-version': '2025-11-25' } })
  t.equal(refused.statusCode, 400, 'no batches on 2025-11-25')
  const served = await post(app, batch, { headers: { 'mcp-protocol-version': '2025-03-26' } })
  t.equal(served.statusCode, 200)
  t.same(served.json().map((r: { id: number }) => r.id), [1, 2])
})

t.test('an absurd MCP-Protocol-Version without a session: 400, its value cut in the answer', async t => {
  const app = await build(t, {}, tools)
  const r = await post(app, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { headers: { 'mcp-protocol-version': 'x'.repeat(100_000) } })
  t.equal(r.statusCode, 400)
  t.ok(r.body.length < 1000, `the answer stays short (${r.body.length} characters)`)
})
