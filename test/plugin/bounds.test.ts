/**
 * No anonymous client can exhaust the server with what it sends: a body nests at most MAX_DEPTH
 * levels (deeper values overflowed the stack of JSON.stringify and of the recursive walks over
 * tool arguments: a 503 or a -32603 with an error log). Both eras; every refusal is a 400 with a
 * JSON-RPC error and no error-level log line. Below the wire: bounds-units.test.ts.
 */
import t, { type Test } from 'tap'
import { Writable } from 'node:stream'
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { MemorySessionStore } from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'

const ACCEPT = 'application/json, text/event-stream'
const LEGACY = '2025-11-25'
const MODERN = '2026-07-28'
const META_VERSION = 'io.modelcontextprotocol/protocolVersion'
const META_CAPS = 'io.modelcontextprotocol/clientCapabilities'

/** `depth` nested arrays, as text. */
const nested = (depth: number, inner = ''): string => '['.repeat(depth) + inner + ']'.repeat(depth)

// The documented bounds (README, "Bounds"), as a client sees them: the unit tests check that the
// constants in lib/ have these values.
const MAX_DEPTH = 64

/** A Fastify app with the plugin, its log lines collected. */
async function build (t: Test, store = new MemorySessionStore({ sweepInterval: 0 })): Promise<{ app: FastifyInstance, logs: Array<Record<string, any>>, store: MemorySessionStore }> {
  const logs: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, cb) { logs.push(JSON.parse(String(chunk))); cb() } })
  const app = Fastify({ logger: { level: 'info', stream } })
  t.teardown(async () => { await app.close(); await store.close() })
  await app.register(mcp, { sessions: { store, gcProbability: 0 }, requestStateSecret: 'bounds-test-secret-0123456789', keepAliveInterval: 0 })
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
  const fine = await postRaw(app, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"v":${nested(MAX_DEPTH - 3)}},"_meta":${m}}}`, modernHeaders('tools/call', 'echo'))
  t.equal(fine.statusCode, 200, fine.body.slice(0, 200))
  t.same(errorLines(logs), [], 'no error-level log line')
})
