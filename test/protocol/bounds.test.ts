/**
 * No anonymous client can exhaust the server with what it sends: ids and progress tokens (echoed
 * in every response / notification, kept while a request runs and in the event log) are bounded,
 * a body nests at most MAX_DEPTH levels (deeper values overflowed the stack of JSON.stringify and
 * the schema validator: a 503 or a -32603 with an error log), and `initialize` stores only the
 * capabilities and client info the server reads, within a bound. Both eras; every refusal is a 400
 * with a JSON-RPC error and no error-level log line. Below the wire: bounds-units.test.ts.
 */
import t, { type Test } from 'tap'
import { Writable } from 'node:stream'
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { MemorySessionStore } from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { sseMessages } from '../helpers/sse.js'

const ACCEPT = 'application/json, text/event-stream'
const LEGACY = '2025-11-25'
const MODERN = '2026-07-28'
const META_VERSION = 'io.modelcontextprotocol/protocolVersion'
const META_CAPS = 'io.modelcontextprotocol/clientCapabilities'

/** `depth` nested arrays, as text. */
const nested = (depth: number, inner = ''): string => '['.repeat(depth) + inner + ']'.repeat(depth)

// The documented bounds (docs/errors-and-bounds.md, "Bounds"), as a client sees them: the unit tests check that the
// constants in lib/ have these values.
const MAX_DEPTH = 64
const MAX_ID_LENGTH = 256
const MAX_PROGRESS_TOKEN_LENGTH = 256
const MAX_HANDSHAKE_PARAMS = 65_536
const MAX_CLIENT_INFO_FIELD = 256

/** A Fastify app with the plugin, its log lines collected. */
async function build (t: Test, store = new MemorySessionStore({ sweepInterval: 0 })): Promise<{ app: FastifyInstance, logs: Array<Record<string, any>>, store: MemorySessionStore }> {
  const logs: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, cb) { logs.push(JSON.parse(String(chunk))); cb() } })
  const app = Fastify({ logger: { level: 'info', stream } })
  t.teardown(async () => { await app.close(); await store.close() })
  await app.register(mcp, { sessions: { store, gcProbability: 0 }, requestState: { secret: 'bounds-test-secret-0123456789' }, keepAliveIntervalMs: 0 })
  registerDemoTools(app.mcp)
  app.mcp.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ v: Type.Unknown() }) }, async ({ v }) => JSON.stringify(v).slice(0, 20))
  await app.ready()
  return { app, logs, store }
}

const errorLines = (logs: Array<Record<string, any>>): unknown[] => logs.filter(l => l.level >= 50).map(l => [l.msg, l.err?.message])

async function postRaw (app: FastifyInstance, payload: string, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return await app.inject({ method: 'POST', url: '/mcp', headers: { accept: ACCEPT, 'content-type': 'application/json', ...headers }, payload })
}

const initBody = (id: unknown, params: Record<string, unknown>): string =>
  JSON.stringify({ jsonrpc: '2.0', id, method: 'initialize', params: { protocolVersion: LEGACY, capabilities: {}, clientInfo: { name: 'b', version: '1' }, ...params } })

async function session (app: FastifyInstance, caps: Record<string, unknown> = {}): Promise<Record<string, string>> {
  const res = await postRaw(app, initBody(0, { capabilities: caps }))
  if (res.statusCode !== 200) throw new Error(`initialize: ${res.statusCode} ${res.body}`)
  const h = { 'mcp-session-id': String(res.headers['mcp-session-id']), 'mcp-protocol-version': LEGACY }
  await postRaw(app, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), h)
  return h
}

function modernHeaders (method: string, name?: string): Record<string, string> {
  const h: Record<string, string> = { 'mcp-protocol-version': MODERN, 'mcp-method': method }
  if (name !== undefined) h['mcp-name'] = name
  return h
}
const modernMeta = (caps: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Record<string, unknown> =>
  ({ [META_VERSION]: MODERN, [META_CAPS]: caps, ...extra })

function refusal (t: Test, res: LightMyRequestResponse, code: number, id: unknown, message: RegExp, what: string): void {
  t.equal(res.statusCode, 400, `${what}: 400 (${res.body.slice(0, 200)})`)
  const body = res.json()
  t.equal(body.error?.code, code, `${what}: ${code}`)
  t.equal(body.id, id, `${what}: id`)
  t.match(body.error?.message, message, what)
  t.ok(res.body.length < 1024, `${what}: a short answer`)
}

t.test('deep nesting: 400 -32600 id null on both eras, no error log (was 503 + RangeError, -32603 + RangeError)', async (t) => {
  const { app, logs, store } = await build(t)
  const tooDeep = new RegExp(`nests deeper than ${MAX_DEPTH} levels`)
  const init = await postRaw(app, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"${LEGACY}","capabilities":{"x":${nested(100_000)}}}}`)
  refusal(t, init, -32600, null, tooDeep, 'legacy initialize, capabilities 100,000 deep')
  t.equal(store.size, 0, 'no session created')
  const h = await session(app, { elicitation: {} })
  const legacyCall = await postRaw(app, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"v":${nested(10_000)}}}}`, h)
  refusal(t, legacyCall, -32600, null, tooDeep, 'legacy tools/call, arguments 10,000 deep')
  const m = JSON.stringify(modernMeta({ elicitation: {} }))
  for (const tool of ['echo', 'ask_name']) {
    const res = await postRaw(app, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"${tool}","arguments":{"v":${nested(100_000)}},"_meta":${m}}}`, modernHeaders('tools/call', tool))
    refusal(t, res, -32600, null, tooDeep, `2026-07-28 tools/call ${tool}, arguments 100,000 deep`)
  }
  // A legitimately nested argument still goes through.
  const fine = await postRaw(app, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"v":${nested(MAX_DEPTH - 3)}},"_meta":${m}}}`,
    modernHeaders('tools/call', 'echo'))
  t.equal(fine.statusCode, 200, fine.body.slice(0, 200))
  t.same(errorLines(logs), [], 'no error-level log line')
})

t.test('progressToken over the bound: 400 -32602 with the id on both eras, nothing run or kept', async (t) => {
  const { app, logs } = await build(t)
  const h = await session(app)
  const huge = 'p'.repeat(1024 * 1024)
  const slow = { name: 'slow_count', arguments: { steps: 3, intervalMs: 0 } }
  const tooLong = /progressToken must be at most 256 characters/
  for (const token of [huge, 'p'.repeat(MAX_PROGRESS_TOKEN_LENGTH + 1)]) {
    const legacy = await postRaw(app, JSON.stringify({ jsonrpc: '2.0', id: 'L', method: 'tools/call', params: { ...slow, _meta: { progressToken: token } } }), h)
    refusal(t, legacy, -32602, 'L', tooLong, `legacy, ${token.length}-char token`)
    const modern = await postRaw(app, JSON.stringify({
      jsonrpc: '2.0',
      id: 'M',
      method: 'tools/call',
      params: { ...slow, _meta: modernMeta({}, { progressToken: token }) }
    }), modernHeaders('tools/call', 'slow_count'))
    refusal(t, modern, -32602, 'M', tooLong, `2026-07-28, ${token.length}-char token`)
  }
  // At the bound, the token is echoed in each notification, as before.
  const token = 'p'.repeat(MAX_PROGRESS_TOKEN_LENGTH)
  const ok = await postRaw(app, JSON.stringify({ jsonrpc: '2.0', id: 'ok', method: 'tools/call', params: { ...slow, _meta: { progressToken: token } } }), h)
  t.equal(ok.statusCode, 200)
  t.same(sseMessages(ok.body).filter(m => m.method === 'notifications/progress').map(m => m.params.progressToken), [token, token, token])
  const okModern = await postRaw(app, JSON.stringify({
    jsonrpc: '2.0',
    id: 'ok',
    method: 'tools/call',
    params: { ...slow, _meta: modernMeta({}, { progressToken: token }) }
  }), modernHeaders('tools/call', 'slow_count'))
  t.equal(okModern.statusCode, 200)
  t.equal(sseMessages(okModern.body).filter(m => m.method === 'notifications/progress').length, 3)
  t.same(errorLines(logs), [])
})

t.test('a string id over the bound: 400 -32600 with id null on both eras; at the bound it is echoed', async (t) => {
  const { app, logs, store } = await build(t)
  const long = 'i'.repeat(MAX_ID_LENGTH + 1)
  const tooLong = /id must be at most 256 characters/
  refusal(t, await postRaw(app, initBody(long, {})), -32600, null, tooLong, 'legacy initialize')
  t.equal(store.size, 0, 'no session created')
  const h = await session(app)
  refusal(t, await postRaw(app, JSON.stringify({ jsonrpc: '2.0', id: 'x'.repeat(1024 * 1024), method: 'tools/list' }), h), -32600, null, tooLong, 'legacy tools/list, 1 MiB id')
  refusal(t, await postRaw(app, JSON.stringify({ jsonrpc: '2.0', id: long, result: {} }), h), -32600, null, tooLong, 'legacy client response')
  refusal(t, await postRaw(app, JSON.stringify({
    jsonrpc: '2.0',
    id: long,
    method: 'tools/list',
    params: { _meta: modernMeta() }
  }), modernHeaders('tools/list')), -32600, null, tooLong, '2026-07-28 tools/list')
  // In a (2025-03-26) batch, the long id is answered with null and the rest runs.
  const init = await postRaw(app, initBody(0, { protocolVersion: '2025-03-26' }))
  const old = { 'mcp-session-id': String(init.headers['mcp-session-id']), 'mcp-protocol-version': '2025-03-26' }
  const batch = await postRaw(app, JSON.stringify([{ jsonrpc: '2.0', id: long, method: 'ping' }, { jsonrpc: '2.0', id: 'b', method: 'ping' }]), old)
  t.equal(batch.statusCode, 200)
  const answers = String(batch.headers['content-type']).startsWith('text/event-stream') ? sseMessages(batch.body).flat() : batch.json()
  t.same(answers.map((a: any) => JSON.stringify([a.id, a.error?.code ?? 'ok'])).sort(), ['["b","ok"]', '[null,-32600]'])
  const id = 'i'.repeat(MAX_ID_LENGTH)
  const legacyOk = await postRaw(app, JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' }), h)
  t.equal(legacyOk.json().id, id)
  const modernOk = await postRaw(app, JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/list', params: { _meta: modernMeta() } }), modernHeaders('tools/list'))
  t.equal(modernOk.json().id, id)
  t.same(errorLines(logs), [])
})

t.test('initialize stores the normalized capabilities and a short clientInfo; declared capabilities still decide', async (t) => {
  const { app, store } = await build(t)
  const junk = { experimental: { blob: 'x'.repeat(60_000) }, elicitation: { form: { extra: 'y'.repeat(1000) } }, sampling: { tools: {} }, roots: { listChanged: true } }
  const res = await postRaw(app, initBody(1, { capabilities: junk, clientInfo: { name: 'n'.repeat(2000), version: '1.2.3', title: 'T', icons: [{ src: 'z'.repeat(500) }], extra: 1 } }))
  t.equal(res.statusCode, 200, res.body.slice(0, 200))
  const sid = String(res.headers['mcp-session-id'])
  const rec = await store.load(sid)
  const data = rec?.data ?? {}
  const caps = Object.entries(data).find(([k]) => k.endsWith('capabilities'))?.[1]
  const info = Object.entries(data).find(([k]) => k.endsWith('clientInfo'))?.[1] as Record<string, string>
  t.same(caps, { elicitation: { form: {} }, sampling: { tools: {} }, roots: { listChanged: true } })
  t.same(info, { name: 'n'.repeat(MAX_CLIENT_INFO_FIELD), version: '1.2.3', title: 'T' })
  t.ok(JSON.stringify(data).length < 1024, `the stored session is small (${JSON.stringify(data).length} chars)`)
  // The declared capabilities are honoured: elicitation (form) is asked, URL mode is refused.
  app.mcp.tool({ name: 'url_ask', description: 'URL mode' }, async (_a, ctx) => {
    try { await ctx.elicit('u', { mode: 'url', message: 'go', url: 'https://example.com' }); return 'asked' } catch (err) { return (err as Error).message }
  })
  const h = { 'mcp-session-id': sid, 'mcp-protocol-version': LEGACY }
  const refused = await postRaw(app, JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'url_ask' } }), h)
  t.match(refused.body, /elicitation\.url/, 'URL mode was not declared')
})

t.test('initialize over MAX_HANDSHAKE_PARAMS: 400 -32602, no session', async (t) => {
  const { app, store, logs } = await build(t)
  const big = 'x'.repeat(MAX_HANDSHAKE_PARAMS)
  const tooBig = /capabilities and clientInfo must take at most 65536 characters/
  refusal(t, await postRaw(app, initBody(1, { capabilities: { experimental: { big } } })), -32602, 1, tooBig, 'capabilities')
  refusal(t, await postRaw(app, initBody(2, { clientInfo: { name: big } })), -32602, 2, tooBig, 'clientInfo')
  refusal(t, await postRaw(app, initBody(3, {
    capabilities: { a: 'x'.repeat(MAX_HANDSHAKE_PARAMS / 2) },
    clientInfo: { name: 'y'.repeat(MAX_HANDSHAKE_PARAMS / 2) }
  })), -32602, 3, tooBig, 'both together')
  t.equal(store.size, 0)
  t.same(errorLines(logs), [])
})

t.test('100 anonymous initialize calls with 60 KiB of capabilities keep under 100 KiB in the store', async (t) => {
  const { app, store } = await build(t)
  const caps = { experimental: { blob: 'x'.repeat(60 * 1024) }, elicitation: {}, roots: {} }
  const payload = initBody(1, { capabilities: caps })
  const ids: string[] = []
  for (let i = 0; i < 100; i++) {
    const res = await postRaw(app, payload)
    t.equal(res.statusCode, 200)
    ids.push(String(res.headers['mcp-session-id']))
  }
  t.equal(store.size, 100)
  let total = 0
  let largest = 0
  for (const id of ids) {
    const n = JSON.stringify((await store.load(id))?.data).length
    total += n
    largest = Math.max(largest, n)
  }
  t.ok(largest < 1024, `largest stored session ${largest} chars`)
  t.ok(total < 100 * 1024, `all 100 sessions: ${total} chars`)
})
