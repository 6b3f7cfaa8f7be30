import t from 'tap'
import { IDEMPOTENCY_CAPABILITY } from '../../../lib/features/capabilities.js'
import { build, call, initialize, post, request } from '../../helpers/handshake-app.js'
import { ACCEPT } from '../../helpers/wire.js'

const initMsg = (version: unknown, id: string | number = 1): Record<string, unknown> => ({
  jsonrpc: '2.0', id, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'c', version: '1' } }
})

t.test('initialize negotiates the version', async (t) => {
  const app = await build(t)
  for (const v of ['2025-11-25', '2025-06-18', '2025-03-26']) {
    const res = await post(app, initMsg(v, `init-${v}`))
    t.equal(res.statusCode, 200)
    t.match(res.headers['content-type'], /^application\/json/)
    const body = res.json()
    t.equal(body.id, `init-${v}`)
    t.equal(body.result.protocolVersion, v, `${v} is echoed`)
    t.same(body.result.serverInfo, { name: 'fastify-mcp-http', version: '0.1.0' })
    t.ok(body.result.capabilities.tools, 'tools capability declared')
    t.notOk(body.result.capabilities.prompts, 'no prompts registered → no prompts capability')
  }
  for (const v of ['2024-11-05', '1999-01-01', '2026-07-28']) {
    const body = (await post(app, initMsg(v))).json()
    t.equal(body.result.protocolVersion, '2025-11-25', `${v} → latest legacy`)
  }
})

t.test('initialize result carries instructions and serverInfo from the options', async (t) => {
  const app = await build(t, { serverInfo: { name: 'srv', version: '9.9.9' }, instructions: 'Be nice' })
  const { result } = await initialize(app)
  t.same(result.serverInfo, { name: 'srv', version: '9.9.9' })
  t.equal(result.instructions, 'Be nice')
  t.same(result.capabilities, { logging: {}, completions: {}, tools: { listChanged: true }, experimental: { 'fastify-mcp-http/idempotency': IDEMPOTENCY_CAPABILITY } })
})

t.test('initialize with bad params → -32602', async (t) => {
  const app = await build(t)
  const res = await post(app, { jsonrpc: '2.0', id: 'x', method: 'initialize', params: { capabilities: {} } })
  t.equal(res.statusCode, 400)
  t.same(res.json(), { jsonrpc: '2.0', id: 'x', error: { code: -32602, message: 'Invalid params: protocolVersion must be a string' } })
})

t.test('session ids: visible ASCII, 192 random bits (as the docs say), distinct', async (t) => {
  const app = await build(t)
  const ids = new Set<string>()
  for (let i = 0; i < 20; i++) {
    const res = await post(app, initMsg('2025-11-25'))
    const sid = res.headers['mcp-session-id'] as string
    t.match(sid, /^[\x21-\x7E]+$/)
    // base64url: 6 bits per character
    t.ok(/^[A-Za-z0-9_-]+$/.test(sid) && sid.length * 6 >= 192, `${sid} carries ≥ 192 bits`)
    ids.add(sid)
  }
  t.equal(ids.size, 20, 'all distinct')
})

t.test('requests without, or with unknown, session ids', async (t) => {
  const app = await build(t)
  // Served without a session (test/protocol/handshake/sessionless.test.ts); the strict option keeps the 400.
  const noSid = await post(app, { jsonrpc: '2.0', id: 5, method: 'tools/list' })
  t.equal(noSid.statusCode, 200)
  t.equal(noSid.json().id, 5)

  const unknown = { sid: 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', version: '2025-11-25' }
  const p = await request(app, unknown, 'tools/list', {}, { id: 6 })
  t.equal(p.statusCode, 404, 'POST with an unknown session → 404')
  t.equal(p.json().id, 6)
  const g = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': unknown.sid } })
  t.equal(g.statusCode, 404, 'GET with an unknown session → 404')
  const d = await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': unknown.sid } })
  t.equal(d.statusCode, 404, 'DELETE with an unknown session → 404')

  // Dual-era server: GET and DELETE without a session are not legacy traffic → 405 (2026-07-28 rule).
  const gNo = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream' } })
  t.equal(gNo.statusCode, 405, 'GET without a session → 405')
  t.equal(gNo.headers.allow, 'POST')
  const dNo = await app.inject({ method: 'DELETE', url: '/mcp' })
  t.equal(dNo.statusCode, 405, 'DELETE without a session → 405')

  const bad = await post(app, { jsonrpc: '2.0', id: 7, method: 'tools/list' }, { headers: { 'mcp-session-id': 'has space' } })
  t.equal(bad.statusCode, 400, 'a malformed session id → 400')
})

t.test('DELETE ends the session', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  t.equal((await request(app, s, 'ping')).statusCode, 200)
  const d = await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid, 'mcp-protocol-version': s.version } })
  t.equal(d.statusCode, 200)
  t.equal((await request(app, s, 'ping')).statusCode, 404, 'POST after DELETE → 404')
  const g = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': s.sid } })
  t.equal(g.statusCode, 404, 'GET after DELETE → 404')
  const d2 = await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid } })
  t.equal(d2.statusCode, 404, 'DELETE after DELETE → 404')
})

t.test('MCP-Protocol-Version header', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  for (const v of ['2024-11-05', 'nope']) {
    const bad = await request(app, s, 'ping', undefined, { id: 9, headers: { 'mcp-protocol-version': v } })
    t.equal(bad.statusCode, 400, `MCP-Protocol-Version ${JSON.stringify(v)} → 400`)
    t.equal(bad.json().error.code, -32600)
    t.equal(bad.json().id, 9)
  }
  const badGet = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': s.sid, 'mcp-protocol-version': 'nope' } })
  t.equal(badGet.statusCode, 400, 'GET with an unsupported version → 400')
  // Absent: the negotiated version is used.
  const absent = await post(app, { jsonrpc: '2.0', id: 10, method: 'ping' }, { headers: { 'mcp-session-id': s.sid } })
  t.equal(absent.statusCode, 200)
  t.same(absent.json(), { jsonrpc: '2.0', id: 10, result: {} })
  // Another supported version is accepted.
  const other = await request(app, s, 'ping', undefined, { headers: { 'mcp-protocol-version': '2025-06-18' } })
  t.equal(other.statusCode, 200)
})

t.test('a second initialize on a session → -32600', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  const res = await post(app, initMsg('2025-11-25', 'again'), { session: s })
  t.equal(res.statusCode, 400)
  t.equal(res.json().error.code, -32600)
  t.equal(res.json().id, 'again')
  // The session is still usable.
  t.equal((await request(app, s, 'ping')).statusCode, 200)
})

t.test('notifications and client responses → 202 with an empty body', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  const n = await post(app, { jsonrpc: '2.0', method: 'notifications/roots/list_changed' }, { session: s })
  t.equal(n.statusCode, 202)
  t.equal(n.body, '')
  const r = await post(app, { jsonrpc: '2.0', id: 'srv-unknown-1', result: {} }, { session: s })
  t.equal(r.statusCode, 202)
  t.equal(r.body, '')
  const e = await post(app, { jsonrpc: '2.0', id: 'srv-unknown-2', error: { code: -1, message: 'no' } }, { session: s })
  t.equal(e.statusCode, 202)
  t.equal(e.body, '')
  // A notification without a session is accepted (a client that never echoes the id sends it so).
  t.equal((await post(app, { jsonrpc: '2.0', method: 'notifications/initialized' })).statusCode, 202)
})

t.test('ping → {}', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  t.same(await call(app, s, 'ping', undefined, { id: 'p' }), { jsonrpc: '2.0', id: 'p', result: {} })
})

t.test('JSON-RPC batches', async (t) => {
  const app = await build(t)
  const s0618 = await initialize(app, { version: '2025-06-18' })
  const batch = [{ jsonrpc: '2.0', id: 1, method: 'ping' }, { jsonrpc: '2.0', id: 2, method: 'tools/list' }]
  const refused = await post(app, batch, { session: s0618 })
  t.equal(refused.statusCode, 400, 'batch on a 2025-06-18 session → 400')
  t.equal(refused.json().error.code, -32600)
  t.equal(refused.json().id, null)

  const s0326 = await initialize(app, { version: '2025-03-26' })
  const ok = await post(app, [...batch, { jsonrpc: '2.0', method: 'notifications/initialized' }, { jsonrpc: '2.0', id: 3, method: 'nope' }], { session: s0326 })
  t.equal(ok.statusCode, 200, 'batch on a 2025-03-26 session is accepted')
  const arr = ok.json() as Array<Record<string, any>>
  t.ok(Array.isArray(arr), 'answered with an array')
  t.equal(arr.length, 3, 'one response per request, none for the notification')
  const byId = new Map(arr.map(r => [r.id, r]))
  t.same(byId.get(1)?.result, {})
  t.equal(byId.get(2)?.result.tools.length, 2)
  t.equal(byId.get(3)?.error.code, -32601)

  const onlyNotes = await post(app, [{ jsonrpc: '2.0', method: 'notifications/initialized' }], { session: s0326 })
  t.equal(onlyNotes.statusCode, 202, 'a batch of notifications → 202')
  t.equal(onlyNotes.body, '')

  const withInit = await post(app, [initMsg('2025-03-26')], { session: s0326 })
  t.equal(withInit.statusCode, 400, 'initialize inside a batch → 400')
  t.equal(withInit.json().error.code, -32600)

  const empty = await post(app, [], { session: s0326 })
  t.equal(empty.statusCode, 400)
  t.equal(empty.json().error.code, -32600)
})

t.test('request id null → -32600', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  const res = await post(app, { jsonrpc: '2.0', id: null, method: 'ping' }, { session: s })
  t.equal(res.statusCode, 400)
  t.same(res.json(), { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid Request: id must not be null' } })
})

t.test('Accept: text/event-stream only → responses come as SSE', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  const res = await post(app, { jsonrpc: '2.0', id: 'sse', method: 'ping' }, { session: s, headers: { accept: 'text/event-stream' } })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/event-stream/)
  t.equal(res.headers['x-accel-buffering'], 'no')
  t.match(res.body, /data: {"jsonrpc":"2.0","id":"sse","result":{}}/)
  t.not(ACCEPT, '')
})

t.test('concurrent requests of one session all succeed', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  const results = await Promise.all([1, 2, 3].map(id => request(app, s, 'tools/list', {}, { id })))
  t.same(results.map(r => r.statusCode), [200, 200, 200])
  t.same(results.map(r => r.json().id), [1, 2, 3])
  t.ok(results.every(r => r.json().result.tools.length === 2))
})
