/**
 * The 2026-07-28 (modern, stateless) wire: routing and era, and the per-request validation of the
 * envelope (headers against `_meta`, versions, Mcp-Method/Mcp-Name/Mcp-Param-*).
 * Checklist: reference/mcp-spec.md §9 items 1–3 and 27–33. The rest of the wire:
 * results.test.ts, rounds.test.ts, notifications.test.ts (the fixture: fixtures/wire-app.ts).
 */
import t from 'tap'
import { build, call, post } from './fixtures/helper.js'
import { b64, headers, initializeBody, LEGACY, META_CAPS, META_VERSION, meta, MODERN, rpc } from '../../helpers/wire.js'
import { app, ELICIT, isError, type Runs } from './fixtures/wire-app.js'

// ─── routing and era (items 1–3) ────────────────────────────────────────────────────────────

t.test('GET and DELETE without a session → 405', async (t) => {
  const a = await app(t)
  for (const method of ['GET', 'DELETE'] as const) {
    for (const headers of [{}, { 'mcp-protocol-version': MODERN }]) {
      const res = await a.inject({ method, url: '/mcp', headers: { accept: 'text/event-stream', ...headers } })
      t.equal(res.statusCode, 405, `${method} ${JSON.stringify(headers)}`)
      t.equal(res.headers.allow, 'POST')
      t.equal(res.json().jsonrpc, '2.0')
      t.equal(res.headers['mcp-session-id'], undefined)
    }
  }
})

t.test('modern requests never mint or echo a session; Mcp-Session-Id and Last-Event-ID are ignored', async (t) => {
  const a = await app(t)
  // A real legacy session exists: a modern request that names it is still served statelessly.
  const init = await a.inject({
    method: 'POST',
    url: '/mcp',
    headers: headers(),
    payload: initializeBody({ id: 0 })
  })
  const sid = init.headers['mcp-session-id'] as string
  t.type(sid, 'string', 'legacy initialize opens a session')
  const extras: Array<Record<string, string>> = [{}, { 'mcp-session-id': 'not-a-session' }, { 'mcp-session-id': sid }, { 'last-event-id': 'whatever_12' }, {
    'mcp-session-id': sid,
    'last-event-id': `${sid}_1`
  }]
  for (const extra of extras) {
    for (const body of [rpc('server/discover'), rpc('tools/call', { name: 'echo', arguments: { text: 'x' } }), rpc('initialize')]) {
      const res = await post(a, body, { headers: extra })
      t.equal(res.headers['mcp-session-id'], undefined, `${body.method} ${JSON.stringify(extra)}: no session id`)
      t.not(res.statusCode, 400, `${body.method} ${JSON.stringify(extra)}: not refused for the session header (${res.body})`)
      if (body.method !== 'initialize') t.equal(res.statusCode, 200, `${body.method} ${JSON.stringify(extra)}: served`)
    }
  }
  const r = await post(a, rpc('tools/call', { name: 'echo', arguments: { text: 'x' } }), { headers: { 'mcp-session-id': 'nope', 'last-event-id': 'nope_3' } })
  t.equal(r.statusCode, 200)
  t.match(r.headers['content-type'], /^application\/json/)
  t.equal(r.json().result.content[0].text, 'x')
  // The legacy session was not touched.
  const ping = await a.inject({
    method: 'POST',
    url: '/mcp',
    headers: headers({ sid, version: LEGACY }),
    payload: { jsonrpc: '2.0', id: 'p', method: 'ping' }
  })
  t.same(ping.json(), { jsonrpc: '2.0', id: 'p', result: {} }, 'the legacy session still works')
})

// The Tasks extension serves tasks/get, update and cancel; tasks/result and tasks/list are gone.
t.test('removed and unknown methods sent the modern way → 404 + -32601 with the request id', async (t) => {
  const a = await app(t)
  const methods = ['initialize', 'ping', 'logging/setLevel', 'resources/subscribe', 'resources/unsubscribe', 'tasks/result', 'tasks/list', 'no/such/method', 'notifications/initialized']
  for (const method of methods) {
    const id = `id-${method}`
    const params = method === 'resources/subscribe' || method === 'resources/unsubscribe' ? { uri: 'test://static' } : method === 'logging/setLevel' ? { level: 'info' } : {}
    const res = await post(a, rpc(method, params, { id }))
    isError(t, res, 404, -32601, id, method)
    t.equal(res.headers['mcp-session-id'], undefined)
  }
  // Numeric ids are echoed as numbers.
  isError(t, await post(a, rpc('ping', {}, { id: 0 })), 404, -32601, 0)
  // A modern notification is accepted and ignored.
  const n = await post(a, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { _meta: meta(), requestId: 1 } })
  t.equal(n.statusCode, 202)
  t.equal(n.body, '')
  // Capabilities match the handlers: without prompts, prompts/list is unknown.
  const bare = await build(t, {}, (m) => { m.tool({ name: 'only', description: 'd' }, async () => 'x') })
  const disc = await call(bare, 'server/discover')
  t.equal(disc.result.capabilities.prompts, undefined)
  t.equal(disc.result.capabilities.resources, undefined)
  isError(t, await post(bare, rpc('prompts/list', {}, { id: 'pl' })), 404, -32601, 'pl')
  isError(t, await post(bare, rpc('resources/read', { uri: 'test://x' }, { id: 'rr' })), 404, -32601, 'rr')
})

t.test('notifications: 202 when their headers agree with the body; -32020 / -32022 without an id otherwise', async (t) => {
  const a = await app(t)
  const note = (m: Record<string, unknown> | undefined, method = 'notifications/cancelled'): Record<string, any> =>
    ({ jsonrpc: '2.0', method, params: m === undefined ? { requestId: 1 } : { _meta: m, requestId: 1 } })
  const accepted = async (res: { statusCode: number, body: string }, what: string): Promise<void> => {
    t.equal(res.statusCode, 202, `${what}: 202`)
    t.equal(res.body, '', `${what}: no body`)
  }
  // The standard headers are required on requests only: a notification without them is accepted.
  await accepted(await post(a, note(meta())), 'all headers')
  await accepted(await post(a, note(meta()), { omit: ['mcp-method'] }), 'no Mcp-Method')
  await accepted(await post(a, note(meta()), { omit: ['mcp-method', 'mcp-protocol-version'] }), 'no standard headers')
  await accepted(await post(a, note(undefined), { headers: { 'mcp-protocol-version': MODERN, 'mcp-method': 'notifications/cancelled' } }), 'header version, no _meta')
  await accepted(await post(a, note(meta()), { headers: { 'Mcp-Method': ' notifications/cancelled ' } }), 'header trimmed')

  const refused = (res: { statusCode: number, json: () => any }, code: number, what: string): Record<string, any> => {
    return isError(t, res, 400, code, null, what)
  }
  refused(await post(a, note(meta()), { headers: { 'mcp-method': 'notifications/progress' } }), -32020, 'Mcp-Method names another method')
  refused(await post(a, note(meta()), { headers: { 'mcp-method': 'Notifications/Cancelled' } }), -32020, 'Mcp-Method value case')
  refused(await post(a, note(meta()), { headers: { 'mcp-protocol-version': '2099-01-01' } }), -32020, 'MCP-Protocol-Version ≠ _meta')
  const body = refused(await post(a, note(meta({}, { [META_VERSION]: '2099-01-01' }))), -32022, 'unsupported version in _meta')
  t.same(body.error.data, { supported: [MODERN], requested: '2099-01-01' })
  const viaHeader = refused(await post(a, note(undefined), { headers: { 'mcp-protocol-version': '2099-01-01' } }), -32022, 'unsupported version in the header')
  t.equal(viaHeader.error.data.requested, '2099-01-01')
})

// ─── per-request validation (items 27–33) ───────────────────────────────────────────────────

t.test('_meta: missing, without protocolVersion or clientCapabilities → 400 -32602; clientInfo optional', async (t) => {
  const a = await app(t)
  const h = { 'mcp-protocol-version': MODERN }
  const cases: Array<[string, Record<string, unknown> | undefined]> = [
    ['no _meta', undefined],
    ['_meta not an object', 'x' as unknown as Record<string, unknown>],
    ['_meta an array', [] as unknown as Record<string, unknown>],
    ['no protocolVersion', { [META_CAPS]: {} }],
    ['protocolVersion not a string', { [META_VERSION]: 20260728, [META_CAPS]: {} }],
    ['no clientCapabilities', { [META_VERSION]: MODERN }],
    ['clientCapabilities not an object', { [META_VERSION]: MODERN, [META_CAPS]: 'all' }],
    ['clientCapabilities null', { [META_VERSION]: MODERN, [META_CAPS]: null }]
  ]
  for (const [what, m] of cases) {
    for (const method of ['server/discover', 'tools/list', 'tools/call']) {
      const params: Record<string, unknown> = method === 'tools/call' ? { name: 'echo', arguments: { text: 'x' } } : {}
      if (m !== undefined) params._meta = m
      const body = { jsonrpc: '2.0', id: `${what}`, method, params }
      isError(t, await post(a, body, { headers: h }), 400, -32602, what, `${method} ${what}`)
    }
  }
  // No params at all, with the modern header.
  isError(t, await post(a, { jsonrpc: '2.0', id: 'np', method: 'tools/list' }, { headers: h }), 400, -32602, 'np')
  // Without clientInfo: served.
  const noInfo = { jsonrpc: '2.0', id: 'ni', method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' }, _meta: { [META_VERSION]: MODERN, [META_CAPS]: {} } } }
  const res = await post(a, noInfo)
  t.equal(res.statusCode, 200)
  t.equal(res.json().result.content[0].text, 'hi')
  t.equal((await post(a, { ...noInfo, method: 'server/discover', params: { _meta: noInfo.params._meta } })).statusCode, 200)
})

t.test('MCP-Protocol-Version missing or ≠ _meta → 400 -32020, checked before version support', async (t) => {
  const a = await app(t)
  isError(t, await post(a, rpc('tools/list', {}, { id: 1 }), { omit: ['mcp-protocol-version'] }), 400, -32020, 1, 'missing')
  isError(t, await post(a, rpc('tools/list', {}, { id: 2 }), { headers: { 'mcp-protocol-version': '2025-11-25' } }), 400, -32020, 2, 'legacy header')
  isError(t, await post(a, rpc('tools/list', {}, { id: 3 }), { headers: { 'mcp-protocol-version': '2099-01-01' } }), 400, -32020, 3, 'unknown header, modern body')
  // Unsupported in the body but the header disagrees: the mismatch wins over -32022.
  isError(t, await post(a, rpc('tools/list', {}, { id: 4, meta: { [META_VERSION]: '2099-01-01' } }), { headers: { 'mcp-protocol-version': MODERN } }), 400, -32020, 4, 'mismatch first')
  // Case-insensitive header name, surrounding whitespace ignored.
  const ok = await post(a, rpc('tools/list', {}, { id: 5 }), { omit: ['mcp-protocol-version'], headers: { 'MCP-PROTOCOL-VERSION': ` ${MODERN} ` } })
  t.equal(ok.statusCode, 200, ok.body)
})

t.test('unsupported version → 400 -32022 with data.supported ⊆ server/discover supportedVersions', async (t) => {
  const a = await app(t)
  const discover = await call(a, 'server/discover')
  for (const v of ['2099-01-01', '1900-01-01', '2025-11-25', '2025-06-18', 'banana']) {
    const body = rpc('tools/list', {}, { id: `v-${v}`, meta: { [META_VERSION]: v } })
    const res = await post(a, body)
    const err = isError(t, res, 400, -32022, `v-${v}`, v)
    t.equal(err.error.data.requested, v)
    t.ok(Array.isArray(err.error.data.supported) && err.error.data.supported.length > 0)
    for (const s of err.error.data.supported) t.ok(discover.result.supportedVersions.includes(s), `${s} is in discover`)
  }
})

t.test('Mcp-Method missing or mismatched → 400 -32020 (name case-insensitive, value trimmed, value case-sensitive)', async (t) => {
  const a = await app(t)
  isError(t, await post(a, rpc('tools/list', {}, { id: 'm1' }), { omit: ['mcp-method'] }), 400, -32020, 'm1', 'missing')
  isError(t, await post(a, rpc('tools/list', {}, { id: 'm2' }), { headers: { 'mcp-method': 'prompts/list' } }), 400, -32020, 'm2', 'other method')
  isError(t, await post(a, rpc('tools/list', {}, { id: 'm3' }), { headers: { 'mcp-method': 'Tools/List' } }), 400, -32020, 'm3', 'value case')
  isError(t, await post(a, rpc('tools/list', {}, { id: 'm4' }), { headers: { 'mcp-method': '' } }), 400, -32020, 'm4', 'empty')
  isError(t, await post(a, rpc('initialize', {}, { id: 'm5' }), { omit: ['mcp-method'] }), 400, -32020, 'm5', 'headers checked before method lookup')
  for (const [name, value] of [['MCP-METHOD', 'tools/list'], ['Mcp-Method', '  tools/list  '], ['mcp-method', '\ttools/list']]) {
    const res = await post(a, rpc('tools/list', {}, { id: 'ok' }), { omit: ['mcp-method'], headers: { [name]: value } })
    t.equal(res.statusCode, 200, `${name}: ${JSON.stringify(value)} → ${res.body}`)
    t.equal(res.json().result.resultType, 'complete')
  }
})

t.test('Mcp-Name for tools/call, prompts/get and resources/read, with the base64 sentinel', async (t) => {
  const a = await app(t)
  const requests = [
    rpc('tools/call', { name: 'echo', arguments: { text: 'x' } }),
    rpc('prompts/get', { name: 'greet', arguments: {} }, { caps: ELICIT }),
    rpc('resources/read', { uri: 'test://static' })
  ]
  for (const body of requests) {
    isError(t, await post(a, body, { omit: ['mcp-name'] }), 400, -32020, body.id, `${body.method}: missing`)
    isError(t, await post(a, body, { headers: { 'mcp-name': 'other' } }), 400, -32020, body.id, `${body.method}: mismatch`)
    const target = body.method === 'resources/read' ? body.params.uri : body.params.name
    isError(t, await post(a, body, { headers: { 'mcp-name': target.toUpperCase() } }), 400, -32020, body.id, `${body.method}: value case-sensitive`)
    const plain = await post(a, body, { omit: ['mcp-name'], headers: { 'MCP-NAME': target } })
    t.equal(plain.statusCode, 200, `${body.method}: plain, any header-name case`)
    const encoded = await post(a, body, { headers: { 'mcp-name': b64(target) } })
    t.equal(encoded.statusCode, 200, `${body.method}: base64 sentinel decoded (${encoded.body})`)
  }
  // Non-ASCII names and URIs travel base64-encoded.
  const cafe = await post(a, rpc('prompts/get', { name: 'café' }))
  t.equal(cafe.statusCode, 200, cafe.body)
  t.equal(cafe.json().result.messages[0].content.text, 'crème')
  const cafeUri = await post(a, rpc('resources/read', { uri: 'test://café' }))
  t.equal(cafeUri.statusCode, 200, cafeUri.body)
  t.equal(cafeUri.json().result.contents[0].text, 'au lait')
  isError(t, await post(a, rpc('prompts/get', { name: 'café' }, { id: 'c2' }), { headers: { 'mcp-name': b64('cafe') } }), 400, -32020, 'c2', 'decoded value compared')
  // Malformed sentinels.
  const echo = rpc('tools/call', { name: 'echo', arguments: { text: 'x' } }, { id: 'bad' })
  for (const bad of ['=?base64?###?=', '=?base64?ZWNobw?=', '=?base64?ZWNo?=', '=?base64?/w==?=', '=?base64?ZW=Nobw=?=', '=?base64?ZWNobw===?=', '=?base64?ZWNobw==?= x']) {
    isError(t, await post(a, echo, { headers: { 'mcp-name': bad } }), 400, -32020, 'bad', `sentinel ${bad}`)
  }
  // Uppercase markers are not the sentinel: compared literally.
  isError(t, await post(a, echo, { headers: { 'mcp-name': '=?BASE64?ZWNobw==?=' } }), 400, -32020, 'bad', 'uppercase markers')
  // Other methods need no Mcp-Name (and a stray one is harmless).
  t.equal((await post(a, rpc('tools/list'), { headers: { 'mcp-name': 'whatever' } })).statusCode, 200)
})

t.test('Mcp-Param-* headers of x-mcp-header parameters', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const tool = (args: Record<string, unknown>, id: string): Record<string, any> => rpc('tools/call', { name: 'headers', arguments: args }, { id })
  const good = await post(a, tool({ region: 'eu-west', count: 7, verbose: true, query: 'q' }, 'g'), {
    headers: { 'mcp-param-region': 'eu-west', 'mcp-param-count': '7', 'mcp-param-verbose': 'true' }
  })
  t.equal(good.statusCode, 200, good.body)
  t.same(JSON.parse(good.json().result.content[0].text), { region: 'eu-west', count: 7, verbose: true, query: 'q' })
  t.equal(runs.headers, 1)

  const ok = async (args: Record<string, unknown>, headers: Record<string, string>, what: string): Promise<void> => {
    const res = await post(a, tool(args, 'ok'), { headers })
    t.equal(res.statusCode, 200, `${what}: ${res.body}`)
    t.notOk(res.json().error, what)
  }
  const bad = async (args: Record<string, unknown>, headers: Record<string, string>, what: string): Promise<void> => {
    const before = runs.headers
    isError(t, await post(a, tool(args, what), { headers }), 400, -32020, what, what)
    t.equal(runs.headers, before, `${what}: handler did not run`)
  }
  // Integers compare numerically.
  await ok({ count: 7 }, { 'mcp-param-count': '07' }, 'leading zero')
  await ok({ count: 7 }, { 'mcp-param-count': '7.0' }, '7.0')
  await ok({ count: -3 }, { 'mcp-param-count': '-3' }, 'negative')
  await ok({ count: 0 }, { 'mcp-param-count': '0' }, 'zero')
  await bad({ count: 7 }, { 'mcp-param-count': '8' }, 'count 8')
  await bad({ count: 7 }, { 'mcp-param-count': 'seven' }, 'count seven')
  await bad({ count: 7 }, { 'mcp-param-count': '' }, 'count empty')
  await bad({ count: 7 }, {}, 'count missing')
  for (const v of ['0x7', '0o7', '0b111', 'Infinity', '7n', '7 7']) await bad({ count: 7 }, { 'mcp-param-count': v }, `count ${v}: not a decimal numeral`)
  await ok({ count: 7 }, { 'mcp-param-count': '+7' }, '+7')
  // Booleans.
  await ok({ verbose: false }, { 'mcp-param-verbose': 'false' }, 'false')
  await bad({ verbose: true }, { 'mcp-param-verbose': 'false' }, 'verbose flipped')
  await bad({ verbose: true }, { 'mcp-param-verbose': '1' }, 'verbose 1')
  await bad({ verbose: true }, {}, 'verbose missing')
  // Strings: exact, header name case-insensitive, base64 sentinel.
  await ok({ region: 'eu' }, { 'MCP-PARAM-REGION': 'eu' }, 'header name case')
  await ok({ region: 'zürich' }, { 'mcp-param-region': b64('zürich') }, 'non-ASCII via base64')
  await ok({ region: ' padded ' }, { 'mcp-param-region': b64(' padded ') }, 'whitespace via base64')
  await ok({ region: 'eu' }, { 'mcp-param-region': b64('eu') }, 'ASCII via base64')
  await bad({ region: 'eu' }, { 'mcp-param-region': 'EU' }, 'region case')
  await bad({ region: 'eu' }, { 'mcp-param-region': '=?base64?!!?=' }, 'region malformed base64')
  await bad({ region: 'zürich' }, { 'mcp-param-region': b64('zurich') }, 'region decoded mismatch')
  await bad({ region: 'eu' }, {}, 'region missing')
  // Argument absent (or null) but header present.
  await bad({}, { 'mcp-param-region': 'eu' }, 'absent arg, header present')
  await bad({ region: null }, { 'mcp-param-region': 'eu' }, 'null arg, header present')
  await bad({ region: 'eu' }, { 'mcp-param-region': 'eu', 'mcp-param-count': '1' }, 'stray count header')
  // Absent everywhere: fine. A parameter without x-mcp-header needs nothing.
  await ok({}, {}, 'nothing')
  await ok({ query: 'free' }, {}, 'unannotated parameter')
})
