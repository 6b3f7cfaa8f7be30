/**
 * The 2026-07-28 (modern, stateless) wire: routing and era, per-request validation, results,
 * caching hints, multi-round-trip requests (input_required + sealed requestState), request-scoped
 * notifications, cancellation by closing the stream, and subscriptions/listen.
 * Checklist: reference/mcp-spec.md §9 items 1–3 and 27–46.
 */
import t, { type Test } from 'tap'
import { Writable } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import type { McpDecorator } from '../../lib/index.js'
import { buildDemo } from '../../examples/server.js'
import { build, call, listen, post, SECRET, type BuildOptions } from './fixtures/helper.js'
import { b64, finalOf, headers, initializeBody, LEGACY, modernHeaders, META_CAPS, META_LOG, META_SERVER, META_SUB, META_VERSION, meta, MODERN, messagesOf, newId, rpc } from '../helpers/wire.js'
import type { SseReader } from '../helpers/sse.js'
import { sleep } from '../helpers/time.js'

const ELICIT = { elicitation: {} }
const ALL_CAPS = { elicitation: {}, sampling: {}, roots: {} }
const nameSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }
const SERVER_INFO = { name: 'modern-wire', version: '9.9.9' }

/** Handler runs, by name (a refused request must not add one). */
type Runs = Record<string, number>

/** The fixture: tools, prompts, resources and a template exercising the modern wire. */
function fixture (runs: Runs) {
  const ran = (name: string): void => { runs[name] = (runs[name] ?? 0) + 1 }
  return (m: McpDecorator): void => {
    m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
    m.tool({
      name: 'headers',
      description: 'Mirrors parameters into Mcp-Param-* headers',
      input: Type.Object({
        region: Type.Optional(Type.String({ 'x-mcp-header': 'Region' })),
        count: Type.Optional(Type.Integer({ 'x-mcp-header': 'Count' })),
        verbose: Type.Optional(Type.Boolean({ 'x-mcp-header': 'Verbose' })),
        query: Type.Optional(Type.String())
      })
    }, async (args) => { ran('headers'); return JSON.stringify(args) })
    m.tool({ name: 'ask', description: 'Asks a name', input: Type.Object({ greeting: Type.Optional(Type.String()) }) }, async ({ greeting }, ctx) => {
      ran('ask')
      const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: nameSchema })
      return `${greeting ?? 'Hello'}, ${String(r.content?.name)}!`
    })
    m.tool({ name: 'ask_url', description: 'URL-mode elicitation' }, async (_a, ctx) => {
      ran('ask_url')
      const r = await ctx.elicit('link', { mode: 'url', message: 'Open this', url: 'https://example.com/consent', elicitationId: 'dropped' })
      return r.action
    })
    m.tool({ name: 'multi', description: 'Asks three things at once' }, async (_a, ctx) => {
      ran('multi')
      const [name, said, roots] = await Promise.all([
        ctx.elicit('name', { message: 'Name?', requestedSchema: nameSchema }),
        ctx.sample('llm', { messages: [{ role: 'user', content: { type: 'text', text: 'Hi' } }], maxTokens: 5 }),
        ctx.roots('roots')
      ])
      return `${String(name.content?.name)}|${(said.content as { text: string }).text}|${roots.map(r => r.uri).join(',')}`
    })
    m.tool({ name: 'stateful', description: 'Carries ctx.state across two rounds' }, async (_a, ctx) => {
      ran('stateful')
      const state = (ctx as typeof ctx & { state: Record<string, unknown> }).state
      const rounds = ((state.rounds as number | undefined) ?? 0) + 1
      state.rounds = rounds
      if (state.first === undefined) {
        state.first = (await ctx.elicit('first', { message: 'First?', requestedSchema: nameSchema })).content?.name
      }
      const second = await ctx.elicit('second', { message: 'Second?', requestedSchema: nameSchema })
      return `${String(state.first)}+${String(second.content?.name)} after ${rounds} rounds`
    })
    m.tool({ name: 'hoard', description: 'Keeps `size` characters in ctx.state, then asks', input: Type.Object({ size: Type.Integer() }) }, async ({ size }, ctx) => {
      ran('hoard')
      const state = (ctx as typeof ctx & { state: Record<string, unknown> }).state
      state.blob ??= 'x'.repeat(size)
      const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: nameSchema })
      return `kept ${String(state.blob).length} for ${String(r.content?.name)}`
    })
    m.tool({ name: 'needs_sampling', description: 'Samples' }, async (_a, ctx) => {
      ran('needs_sampling')
      await ctx.sample('q', { messages: [{ role: 'user', content: { type: 'text', text: '?' } }], maxTokens: 5 })
      return 'sampled'
    })
    m.tool({ name: 'needs_roots', description: 'Lists roots' }, async (_a, ctx) => { await ctx.roots('r'); return 'rooted' })
    m.tool({ name: 'chatty', description: 'Progress and logs' }, async (_a, ctx) => {
      await ctx.progress({ progress: 1, total: 2 })
      await ctx.log('debug', 'd')
      await ctx.log('info', 'i')
      await ctx.log('warning', 'w', 'my-logger')
      await ctx.log('error', { e: 1 })
      await ctx.progress({ progress: 2, total: 2, message: 'done' })
      return 'chatted'
    })
    m.tool({ name: 'streaming_ask', description: 'Progress, a log line, then elicitation' }, async (_a, ctx) => {
      await ctx.progress({ progress: 1 })
      await ctx.log('info', 'about to ask')
      const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: nameSchema })
      return String(r.content?.name)
    })
    m.prompt({ name: 'greet', description: 'Asks before greeting', arguments: [{ name: 'lang', required: false }] }, async (args, ctx) => {
      ran('greet')
      const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: nameSchema })
      return [{ role: 'user', content: { type: 'text', text: `${args.lang ?? 'en'}: hi ${String(r.content?.name)}` } }]
    })
    m.prompt({ name: 'café', description: 'A non-ASCII prompt name' }, async () => [{ role: 'user', content: { type: 'text', text: 'crème' } }])
    m.resource({ uri: 'test://static', name: 'static', description: 'Static' }, async (uri) => ({ uri, text: 'static' }))
    m.resource({ uri: 'test://cached', name: 'cached', description: 'Own cache hint', cache: { ttlMs: 42, cacheScope: 'private' } },
      async (uri) => ({ uri, text: 'cached' }))
    m.resource({ uri: 'test://café', name: 'cafe', description: 'Non-ASCII URI' }, async (uri) => ({ uri, text: 'au lait' }))
    m.resource({ uri: 'test://ask', name: 'ask', description: 'Asks before reading' }, async (uri, ctx) => {
      ran('read-ask')
      const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: nameSchema })
      return { uri, text: `for ${String(r.content?.name)}` }
    })
    m.resourceTemplate({ uriTemplate: 'test://items/{id}', name: 'item', description: 'Items' }, async (uri, { id }) => ({ uri, text: `item ${id}` }))
  }
}

async function app (t: Test, runs: Runs = {}, opts: BuildOptions = {}): Promise<FastifyInstance> {
  return await build(t, { plugin: { requestStateSecret: SECRET, serverInfo: SERVER_INFO, ...opts.plugin }, ...opts }, fixture(runs))
}

/** Asserts a JSON-RPC error response: HTTP status, code and the echoed id. */
function isError (t: Test, res: { statusCode: number, json: () => any }, status: number, code: number, id: unknown, msg?: string): Record<string, any> {
  const body = res.json()
  t.equal(res.statusCode, status, `${msg ?? ''} status ${status}`)
  t.equal(body.jsonrpc, '2.0')
  t.equal(body.error?.code, code, `${msg ?? ''} code ${code}: ${JSON.stringify(body)}`)
  t.same(body.id, id, `${msg ?? ''} id echoed`)
  t.notOk('result' in body)
  return body
}

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
  const extras: Array<Record<string, string>> = [{}, { 'mcp-session-id': 'not-a-session' }, { 'mcp-session-id': sid }, { 'last-event-id': 'whatever_12' }, { 'mcp-session-id': sid, 'last-event-id': `${sid}_1` }]
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

t.test('removed and unknown methods sent the modern way → 404 + -32601 with the request id (the Tasks extension serves tasks/get, update and cancel; tasks/result and tasks/list are gone)', async (t) => {
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

// ─── results (items 38–41, 46) ──────────────────────────────────────────────────────────────

t.test('server/discover and resultType + serverInfo on every result', async (t) => {
  const a = await app(t, {}, { plugin: { requestStateSecret: SECRET, serverInfo: SERVER_INFO, instructions: 'Be nice' } })
  const d = await call(a, 'server/discover', {}, { id: 'd' })
  t.equal(d.id, 'd')
  t.same(d.result.supportedVersions, [MODERN])
  t.equal(d.result.resultType, 'complete')
  t.equal(d.result.instructions, 'Be nice')
  t.same(d.result._meta, { [META_SERVER]: SERVER_INFO })
  t.match(d.result.capabilities, { tools: { listChanged: true }, prompts: { listChanged: true }, resources: { subscribe: true, listChanged: true } })
  t.equal(d.result.ttlMs, 60_000)
  t.equal(d.result.cacheScope, 'public')
  t.notOk('protocolVersion' in d.result, 'no handshake fields')

  const requests: Array<[string, Record<string, unknown>, Record<string, unknown>?]> = [
    ['server/discover', {}],
    ['tools/list', {}],
    ['resources/list', {}],
    ['resources/templates/list', {}],
    ['prompts/list', {}],
    ['completion/complete', { ref: { type: 'ref/prompt', name: 'greet' }, argument: { name: 'lang', value: 'e' } }],
    ['tools/call', { name: 'echo', arguments: { text: 'x' } }],
    ['tools/call', { name: 'echo', arguments: { text: 42 } }],
    ['tools/call', { name: 'ask', arguments: {} }, ELICIT],
    ['prompts/get', { name: 'café' }],
    ['resources/read', { uri: 'test://static' }],
    ['resources/read', { uri: 'test://items/7' }]
  ]
  for (const [method, params, caps] of requests) {
    const res = await post(a, rpc(method, params, { caps }))
    t.equal(res.statusCode, 200, `${method}: ${res.body}`)
    const r = finalOf(res).result
    t.ok(r.resultType === 'complete' || r.resultType === 'input_required', `${method}: resultType ${String(r.resultType)}`)
    t.same(r._meta?.[META_SERVER], SERVER_INFO, `${method}: serverInfo`)
  }
  // Listing is deterministic and independent of earlier requests.
  const l1 = await call(a, 'tools/list')
  await call(a, 'tools/call', { name: 'echo', arguments: { text: 'x' } })
  const l2 = await call(a, 'tools/list', {}, { caps: ALL_CAPS })
  t.same(l1.result.tools, l2.result.tools)
  t.same(l1.result.tools.map((x: { name: string }) => x.name), ['echo', 'headers', 'ask', 'ask_url', 'multi', 'stateful', 'hoard', 'needs_sampling', 'needs_roots', 'chatty', 'streaming_ask'])
})

t.test('cache hints: defaults, the cache option, per-resource cache, private with authenticate', async (t) => {
  const hintsOf = async (a: FastifyInstance, headers?: Record<string, string>): Promise<Record<string, [unknown, unknown]>> => {
    const out: Record<string, [unknown, unknown]> = {}
    const reqs: Array<[string, string, Record<string, unknown>]> = [
      ['discover', 'server/discover', {}],
      ['tools', 'tools/list', {}],
      ['resources', 'resources/list', {}],
      ['templates', 'resources/templates/list', {}],
      ['prompts', 'prompts/list', {}],
      ['read', 'resources/read', { uri: 'test://static' }],
      ['readTemplate', 'resources/read', { uri: 'test://items/1' }],
      ['readOwn', 'resources/read', { uri: 'test://cached' }]
    ]
    for (const [k, method, params] of reqs) {
      const r = await call(a, method, params, { headers })
      t.ok(Number.isInteger(r.result.ttlMs) && r.result.ttlMs >= 0, `${k}: integer ttlMs`)
      out[k] = [r.result.ttlMs, r.result.cacheScope]
    }
    // Not cacheable: no hints.
    const c = await call(a, 'tools/call', { name: 'echo', arguments: { text: 'x' } }, { headers })
    t.notOk('ttlMs' in c.result || 'cacheScope' in c.result, 'tools/call has no cache hints')
    const g = await call(a, 'prompts/get', { name: 'café' }, { headers })
    t.notOk('ttlMs' in g.result, 'prompts/get has no cache hints')
    const ir = await call(a, 'resources/read', { uri: 'test://ask' }, { headers, caps: ELICIT })
    t.equal(ir.result.resultType, 'input_required')
    t.notOk('ttlMs' in ir.result || 'cacheScope' in ir.result, 'input_required is not cacheable')
    return out
  }
  const plain = await app(t)
  t.same(await hintsOf(plain), {
    discover: [60_000, 'public'],
    tools: [60_000, 'public'],
    resources: [60_000, 'public'],
    templates: [60_000, 'public'],
    prompts: [60_000, 'public'],
    read: [0, 'public'],
    readTemplate: [0, 'public'],
    readOwn: [42, 'private']
  })
  const configured = await app(t, {}, {
    plugin: {
      requestStateSecret: SECRET,
      cache: { discover: { ttlMs: 1 }, tools: { ttlMs: 5, cacheScope: 'private' }, templates: { cacheScope: 'private' }, read: { ttlMs: 1000 } }
    }
  })
  t.same(await hintsOf(configured), {
    discover: [1, 'public'],
    tools: [5, 'private'],
    resources: [60_000, 'public'],
    templates: [60_000, 'private'],
    prompts: [60_000, 'public'],
    read: [1000, 'public'],
    readTemplate: [1000, 'public'],
    readOwn: [42, 'private']
  })
  const authed = await app(t, {}, { plugin: { requestStateSecret: SECRET, authenticate: async (req) => ({ id: String(req.headers['x-user'] ?? 'anon') }) } })
  t.same(await hintsOf(authed, { 'x-user': 'alice' }), {
    discover: [60_000, 'private'],
    tools: [60_000, 'private'],
    resources: [60_000, 'private'],
    templates: [60_000, 'private'],
    prompts: [60_000, 'private'],
    read: [0, 'private'],
    readTemplate: [0, 'private'],
    readOwn: [42, 'private']
  })
  const explicitPublic = await app(t, {}, { plugin: { requestStateSecret: SECRET, authenticate: async () => ({ id: 'u' }), cache: { tools: { cacheScope: 'public' } } } })
  t.equal((await call(explicitPublic, 'tools/list')).result.cacheScope, 'public', 'the option overrides the private default')
  // Every page of a list has the same scope.
  const paged = await build(t, { plugin: { requestStateSecret: SECRET, pageSize: 2 } }, fixture({}))
  const p1 = await call(paged, 'tools/list')
  t.ok(p1.result.nextCursor)
  const p2 = await call(paged, 'tools/list', { cursor: p1.result.nextCursor })
  t.equal(p2.result.cacheScope, p1.result.cacheScope)
  t.equal(p2.result.ttlMs, p1.result.ttlMs)
})

t.test('resource not found → -32602 with data.uri', async (t) => {
  const a = await app(t)
  for (const uri of ['test://missing', 'test://items', 'other://static']) {
    const res = await post(a, rpc('resources/read', { uri }, { id: uri }))
    const body = res.json()
    t.equal(body.error?.code, -32602, uri)
    t.same(body.error.data, { uri })
    t.equal(body.id, uri)
    t.notOk('result' in body, 'never empty contents')
  }
})

// ─── capabilities (item 34) ─────────────────────────────────────────────────────────────────

t.test('needing an undeclared client capability → 400 -32021 with data.requiredCapabilities', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const cases: Array<[string, Record<string, unknown>, Record<string, unknown>]> = [
    ['needs_sampling', {}, { sampling: {} }],
    ['needs_sampling', { elicitation: {}, roots: {} }, { sampling: {} }],
    ['ask', {}, { elicitation: {} }],
    ['ask', { sampling: {} }, { elicitation: {} }],
    ['ask', { elicitation: { url: {} } }, { elicitation: { form: {} } }],
    ['ask_url', { elicitation: { form: {} } }, { elicitation: { url: {} } }],
    ['ask_url', { elicitation: {} }, { elicitation: { url: {} } }],
    ['ask_url', {}, { elicitation: { url: {} } }],
    ['needs_roots', { sampling: {} }, { roots: {} }]
  ]
  for (const [name, caps, required] of cases) {
    const id = `${name}-${JSON.stringify(caps)}`
    const body = isError(t, await post(a, rpc('tools/call', { name }, { id, caps })), 400, -32021, id, id)
    t.same(body.error.data, { requiredCapabilities: required }, `${id}: an object, not an array`)
  }
  t.same(runs, { needs_sampling: 2, ask: 3, ask_url: 3 }, 'the handlers ran up to the refused request (nothing was sent)')
  // Declared: input_required with only declared methods.
  const ok = await call(a, 'tools/call', { name: 'ask_url' }, { caps: { elicitation: { url: {} } } })
  t.equal(ok.result.resultType, 'input_required')
  t.same(ok.result.inputRequests.link, { method: 'elicitation/create', params: { mode: 'url', message: 'Open this', url: 'https://example.com/consent' } }, 'no elicitationId on this revision')
  const sampled = await call(a, 'tools/call', { name: 'needs_sampling' }, { caps: { sampling: {} } })
  t.equal(sampled.result.inputRequests.q.method, 'sampling/createMessage')
})

// ─── multi-round-trip requests (item 42) ────────────────────────────────────────────────────

/** Retries `first` (an input_required answer to `body`) with `inputResponses`, a new id. */
function retry (body: Record<string, any>, first: Record<string, any>, inputResponses: unknown, extra: Record<string, unknown> = {}): Record<string, any> {
  return { ...body, id: newId(), params: { ...body.params, inputResponses, requestState: first.result.requestState, ...extra } }
}

t.test('input_required from tools/call, prompts/get and resources/read; retry completes', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const flows: Array<[Record<string, any>, (r: Record<string, any>) => unknown, unknown]> = [
    [rpc('tools/call', { name: 'ask', arguments: { greeting: 'Hi' } }, { caps: ELICIT }), r => r.content[0].text, 'Hi, Ada!'],
    [rpc('prompts/get', { name: 'greet', arguments: { lang: 'fr' } }, { caps: ELICIT }), r => r.messages[0].content.text, 'fr: hi Ada'],
    [rpc('resources/read', { uri: 'test://ask' }, { caps: ELICIT }), r => r.contents[0].text, 'for Ada']
  ]
  for (const [body, pick, want] of flows) {
    const res = await post(a, body)
    t.equal(res.statusCode, 200)
    const first = finalOf(res)
    t.equal(first.id, body.id)
    t.equal(first.result.resultType, 'input_required', body.method)
    t.same(first.result.inputRequests, { name: { method: 'elicitation/create', params: { message: 'Name?', requestedSchema: nameSchema } } })
    t.type(first.result.requestState, 'string')
    t.same(first.result._meta, { [META_SERVER]: SERVER_INFO })
    const second = finalOf(await post(a, retry(body, first, { name: { action: 'accept', content: { name: 'Ada' } } })))
    t.equal(second.result.resultType, 'complete', body.method)
    t.equal(pick(second.result), want)
    t.notOk('inputRequests' in second.result || 'requestState' in second.result)
    if (body.method === 'resources/read') t.equal(second.result.ttlMs, 0, 'the completed read carries its cache hint')
  }
  t.same(runs, { ask: 2, greet: 2, 'read-ask': 2 })
  // Other methods never answer input_required, whatever they carry.
  for (const method of ['tools/list', 'prompts/list', 'resources/list', 'server/discover']) {
    const r = await call(a, method, { inputResponses: { name: { action: 'accept' } } }, { caps: ALL_CAPS })
    t.equal(r.result.resultType, 'complete', method)
  }
  // The answer without requestState is still just an answer (nothing was sealed yet): it completes.
  const direct = await call(a, 'tools/call', { name: 'ask', arguments: {}, inputResponses: { name: { action: 'decline' } } }, { caps: ELICIT })
  t.equal(direct.result.content[0].text, 'Hello, undefined!')
})

t.test('several inputs at once; missing keys re-asked; extra keys ignored; bad shapes', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const body = rpc('tools/call', { name: 'multi' }, { caps: ALL_CAPS })
  const first = await call(a, 'tools/call', body.params, { caps: ALL_CAPS, id: body.id })
  t.equal(first.result.resultType, 'input_required')
  t.same(Object.keys(first.result.inputRequests).sort(), ['llm', 'name', 'roots'], 'Promise.all: every key in one input_required')
  t.same(first.result.inputRequests.llm.method, 'sampling/createMessage')
  t.same(first.result.inputRequests.roots, { method: 'roots/list', params: {} })
  t.equal(runs.multi, 1)

  const name = { action: 'accept', content: { name: 'Ada' } }
  const llm = { role: 'assistant', content: { type: 'text', text: 'yo' }, model: 'm' }
  const roots = { roots: [{ uri: 'file:///a' }, { uri: 'file:///b' }] }
  // Only one answer: a new input_required for the rest.
  const partial = finalOf(await post(a, retry(body, first, { name })))
  t.equal(partial.result.resultType, 'input_required')
  t.same(Object.keys(partial.result.inputRequests).sort(), ['llm', 'roots'])
  t.type(partial.result.requestState, 'string')
  // Wrong shapes for a key: asked again, not an error.
  const wrong = finalOf(await post(a, retry(body, first, { name: 'Ada', llm: { text: 'no content' }, roots: { roots: 'none' } })))
  t.equal(wrong.result.resultType, 'input_required')
  t.same(Object.keys(wrong.result.inputRequests).sort(), ['llm', 'name', 'roots'])
  // Everything, plus keys nobody asked for.
  const done = finalOf(await post(a, retry(body, partial, { name, llm, roots, extra: { anything: true }, 'other-key': 1 })))
  t.equal(done.result.resultType, 'complete', JSON.stringify(done))
  t.equal(done.result.content[0].text, 'Ada|yo|file:///a,file:///b')
  // inputResponses that is not an object → -32602, and the handler does not run.
  const before = runs.multi
  for (const bad of [[], 'x', 1, null, true, [name]]) {
    const res = await post(a, retry(body, first, bad))
    const b = res.json()
    t.equal(b.error?.code, -32602, `inputResponses ${JSON.stringify(bad)}`)
  }
  t.equal(runs.multi, before)
})

t.test('ctx.state is carried across rounds', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const body = rpc('tools/call', { name: 'stateful' }, { caps: ELICIT })
  const r1 = finalOf(await post(a, body))
  t.same(Object.keys(r1.result.inputRequests), ['first'])
  const r2 = finalOf(await post(a, retry(body, r1, { first: { action: 'accept', content: { name: 'A' } } })))
  t.same(Object.keys(r2.result.inputRequests), ['second'], 'first answered')
  // Round 3 answers only "second": "first" comes from the state, not from inputResponses.
  const r3 = finalOf(await post(a, retry(body, r2, { second: { action: 'accept', content: { name: 'B' } } })))
  t.equal(r3.result.content[0].text, 'A+B after 3 rounds')
  t.equal(runs.stateful, 3)
  // The state is sealed: readable payload, but not the secret.
  t.notMatch(r1.result.requestState, SECRET)
})

t.test('refused requestState: tampered, expired, other method, other params, other principal; the handler does not run', async (t) => {
  const runs: Runs = {}
  const principal = async (req: { headers: Record<string, unknown> }): Promise<{ id: string } | null> => {
    const u = req.headers['x-user']
    return typeof u === 'string' ? { id: u } : null
  }
  const a = await app(t, runs, { plugin: { requestStateSecret: SECRET, authenticate: principal } })
  const alice = { 'x-user': 'alice' }
  const bob = { 'x-user': 'bob' }
  const body = rpc('tools/call', { name: 'ask', arguments: { greeting: 'Hi' } }, { caps: ELICIT })
  const first = finalOf(await post(a, body, { headers: alice }))
  t.equal(first.result.resultType, 'input_required')
  const answer = { name: { action: 'accept', content: { name: 'Ada' } } }
  t.equal(runs.ask, 1)

  const refused = async (req: Record<string, any>, headers: Record<string, string>, what: string, reason: RegExp): Promise<void> => {
    const before = runs.ask ?? 0
    const beforeGreet = runs.greet ?? 0
    const res = await post(a, req, { headers })
    const b = res.json()
    t.ok(b.error !== undefined, `${what}: a JSON-RPC error (${res.body})`)
    t.equal(b.error?.code, -32602, what)
    t.match(b.error?.message, reason, what)
    t.equal(b.id, req.id, `${what}: id echoed`)
    t.equal(runs.ask ?? 0, before, `${what}: handler did not run`)
    t.equal(runs.greet ?? 0, beforeGreet, `${what}: no other handler ran`)
  }
  const state: string = first.result.requestState
  const [payload, mac] = state.split('.')
  const decoded = JSON.parse(Buffer.from(payload, 'base64url').toString())
  const forged = Buffer.from(JSON.stringify({ ...decoded, s: { admin: true } })).toString('base64url')
  const flip = (s: string, i: number): string => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1)
  const tampered: Array<[string, unknown]> = [
    ['payload changed, old mac', `${forged}.${mac}`],
    ['one payload char flipped', `${flip(payload, 5)}.${mac}`],
    ['one mac char flipped', `${payload}.${flip(mac, 3)}`],
    ['mac truncated', `${payload}.${mac.slice(0, 10)}`],
    ['no mac', payload],
    ['empty', ''],
    ['dot only', '.'],
    ['not a string', 12345],
    ['object', { state }],
    ['huge', 'x'.repeat(70_000)]
  ]
  for (const [what, rs] of tampered) {
    await refused(retry(body, first, answer, { requestState: rs }), alice, `tampered: ${what}`, /requestState/)
  }
  await refused(retry(body, first, answer), bob, 'other principal', /principal/)
  await refused(retry({ ...body, params: { ...body.params, arguments: { greeting: 'Yo' } } }, first, answer), alice, 'other params', /another request/)
  await refused(retry({ ...body, params: { ...body.params, name: 'stateful' } }, first, answer), alice, 'other tool', /another request/)
  const prompt = rpc('prompts/get', { name: 'greet', arguments: {} }, { caps: ELICIT })
  await refused(retry(prompt, first, answer), alice, 'other method', /another request/)
  // Key order and _meta do not matter: same request.
  const reordered = retry({ ...body, params: { arguments: { greeting: 'Hi' }, name: 'ask', _meta: meta(ELICIT, { progressToken: 'p' }) } }, first, answer)
  const ok = finalOf(await post(a, reordered, { headers: alice }))
  t.equal(ok.result?.content?.[0]?.text, 'Hi, Ada!', 'the genuine state from the same principal completes')
  t.equal(runs.ask, 2)

  // Expiry.
  const expRuns: Runs = {}
  const short = await app(t, expRuns, { plugin: { requestStateSecret: SECRET, requestStateTtl: 20 } })
  const q = rpc('tools/call', { name: 'ask' }, { caps: ELICIT })
  const s1 = finalOf(await post(short, q))
  await sleep(40)
  const res = await post(short, retry(q, s1, answer))
  t.equal(res.json().error?.code, -32602)
  t.match(res.json().error?.message, /expired/)
  t.equal(expRuns.ask, 1, 'expired: handler did not run')
})

t.test('a ctx.state too large to come back: the round fails with -32603 and a log line naming ctx.state', async (t) => {
  const runs: Runs = {}
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, cb) { lines.push(JSON.parse(String(chunk))); cb() } })
  const a = await app(t, runs, { fastify: { logger: { level: 'error', stream } } })
  // Just under the limit (base64 grows it by a third): sealed, and it comes back.
  const small = rpc('tools/call', { name: 'hoard', arguments: { size: 40_000 } }, { caps: ELICIT })
  const r1 = finalOf(await post(a, small))
  t.equal(r1.result?.resultType, 'input_required')
  t.ok(r1.result.requestState.length > 50_000 && r1.result.requestState.length <= 65_536, `sealed ${String(r1.result.requestState.length)} characters`)
  const r2 = finalOf(await post(a, retry(small, r1, { name: { action: 'accept', content: { name: 'Ada' } } })))
  t.equal(r2.result?.content?.[0]?.text, 'kept 40000 for Ada', 'the sealed state was accepted back')

  // Over it: no input_required with a state the server itself would refuse.
  const big = rpc('tools/call', { name: 'hoard', arguments: { size: 60_000 } }, { id: 'big', caps: ELICIT })
  const res = await post(a, big)
  t.equal(res.statusCode, 200)
  t.same(finalOf(res), { jsonrpc: '2.0', id: 'big', error: { code: -32603, message: 'Internal error' } })
  const logged = lines.filter(l => l.level === 50 && /ctx\.state is too large/.test(l.err?.message ?? ''))
  t.equal(logged.length, 1, 'one error log line explains it')
  t.equal(logged[0]?.method, 'tools/call')
})

t.test('requestStateSecret: shared by two instances; without it a line is logged once', async (t) => {
  const runsA: Runs = {}
  const runsB: Runs = {}
  const A = await app(t, runsA, { plugin: { requestStateSecret: SECRET } })
  const B = await app(t, runsB, { plugin: { requestStateSecret: SECRET } })
  const body = rpc('tools/call', { name: 'stateful' }, { caps: ELICIT })
  const r1 = finalOf(await post(A, body))
  const r2 = finalOf(await post(B, retry(body, r1, { first: { action: 'accept', content: { name: 'A' } } })))
  t.same(Object.keys(r2.result.inputRequests), ['second'], 'B accepted the state A sealed')
  const r3 = finalOf(await post(A, retry(body, r2, { second: { action: 'accept', content: { name: 'B' } } })))
  t.equal(r3.result.content[0].text, 'A+B after 3 rounds', 'and back to A')
  t.same([runsA.stateful, runsB.stateful], [2, 1])

  // Without the secret: each instance has its own random one, and says so once (at info: nothing
  // in these options shares sessions across processes; test/app/startup.test.ts has the warning).
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, cb) { lines.push(JSON.parse(String(chunk))); cb() } })
  const runsC: Runs = {}
  const C = await build(t, { plugin: {}, fastify: { logger: { level: 'info', stream } } }, fixture(runsC))
  const D = await build(t, { plugin: {} }, fixture({}))
  const c1 = finalOf(await post(C, body))
  for (let i = 0; i < 3; i++) await post(C, rpc('tools/list'))
  const refused = (await post(D, retry(body, c1, { first: { action: 'accept', content: { name: 'A' } } }))).json()
  t.equal(refused.error?.code, -32602, 'another instance with another random secret refuses it')
  const said = lines.filter(l => /requestStateSecret/.test(l.msg))
  t.equal(said.length, 1, 'said once')
  t.equal(said[0]?.level, 30, 'at info for a single process')
  // With a secret: no warning.
  const quiet: Array<Record<string, any>> = []
  const qstream = new Writable({ write (chunk, _enc, cb) { quiet.push(JSON.parse(String(chunk))); cb() } })
  const E = await build(t, { plugin: { requestStateSecret: SECRET }, fastify: { logger: { level: 'info', stream: qstream } } }, fixture({}))
  await post(E, rpc('tools/list'))
  t.equal(quiet.filter(l => /requestStateSecret/.test(l.msg ?? '')).length, 0)
})

// ─── request-scoped notifications (items 36, 37, 43) ────────────────────────────────────────

t.test('progress only with a progressToken; notifications/message only with logLevel, at or above it', async (t) => {
  const a = await app(t)
  const plain = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p0' }))
  t.match(plain.headers['content-type'], /^application\/json/, 'neither: plain JSON')
  t.equal(plain.json().result.content[0].text, 'chatted')

  const withToken = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p1', meta: { progressToken: 'tok' } }))
  t.match(withToken.headers['content-type'], /^text\/event-stream/)
  t.equal(withToken.headers['x-accel-buffering'], 'no')
  t.equal(withToken.headers['mcp-session-id'], undefined)
  const m1 = messagesOf(withToken)
  t.same(m1.slice(0, -1), [
    { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'tok', progress: 1, total: 2 } },
    { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'tok', progress: 2, total: 2, message: 'done' } }
  ], 'progress only: no log messages without logLevel')
  t.equal(m1[m1.length - 1].id, 'p1')

  const withLevel = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p2', meta: { [META_LOG]: 'warning' } }))
  const m2 = messagesOf(withLevel)
  t.same(m2.slice(0, -1).map(m => m.params), [{ level: 'warning', data: 'w', logger: 'my-logger' }, { level: 'error', data: { e: 1 } }])
  t.ok(m2.slice(0, -1).every(m => m.method === 'notifications/message'), 'no progress without a token')

  const both = messagesOf(await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p3', meta: { [META_LOG]: 'debug', progressToken: 7 } })))
  t.same(both.slice(0, -1).map(m => m.method === 'notifications/progress' ? `p${String(m.params.progress)}` : m.params.level),
    ['p1', 'debug', 'info', 'warning', 'error', 'p2'])
  t.ok(both.filter(m => m.method === 'notifications/progress').every(m => m.params.progressToken === 7))
  const emergency = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p4', meta: { [META_LOG]: 'emergency' } }))
  t.match(emergency.headers['content-type'], /^application\/json/, 'filtered out: no stream')

  for (const bad of ['verbose', 'INFO', 3, null, {}]) {
    isError(t, await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'bad', meta: { [META_LOG]: bad } })), 400, -32602, 'bad', `logLevel ${JSON.stringify(bad)}`)
  }
  // A progress token must be a string or a number: anything else would be echoed into every
  // notification. Refused before the handler runs.
  for (const bad of [null, true, {}, ['t'], { t: 1 }]) {
    const res = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'tok', meta: { progressToken: bad } }))
    const err = isError(t, res, 400, -32602, 'tok', `progressToken ${JSON.stringify(bad)}`)
    t.match(err.error.message, /progressToken/)
    t.match(res.headers['content-type'], /^application\/json/, 'no stream was opened')
  }
  const zero = messagesOf(await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'z', meta: { progressToken: 0 } })))
  t.same(zero.filter(m => m.method === 'notifications/progress').map(m => m.params.progressToken), [0, 0], 'a token of 0 is a token')
})

t.test('an SSE response carries notifications and the final result only, never a request', async (t) => {
  const a = await app(t)
  const res = await post(a, rpc('tools/call', { name: 'streaming_ask' }, { id: 's', caps: ELICIT, meta: { progressToken: 'x', [META_LOG]: 'info' } }))
  t.match(res.headers['content-type'], /^text\/event-stream/)
  const msgs = messagesOf(res)
  t.same(msgs.map(m => m.method ?? 'response'), ['notifications/progress', 'notifications/message', 'response'])
  for (const m of msgs.slice(0, -1)) t.notOk('id' in m, `${String(m.method)} is a notification`)
  const last = msgs[msgs.length - 1]
  t.equal(last.id, 's')
  t.notOk('method' in last)
  t.equal(last.result.resultType, 'input_required', 'the elicitation travels inside the result')
  t.notOk(msgs.some(m => m.method === 'elicitation/create'))
  // Accept: text/event-stream only → even a plain result comes as SSE, still with the response last.
  const sseOnly = await post(a, rpc('tools/list', {}, { id: 'l' }), { headers: { accept: 'text/event-stream' } })
  t.match(sseOnly.headers['content-type'], /^text\/event-stream/)
  t.same(messagesOf(sseOnly).map(m => m.id), ['l'])
  // An error after a notification still ends the stream as a JSON-RPC error.
  const capErr = await post(a, rpc('tools/call', { name: 'streaming_ask' }, { id: 'e', meta: { progressToken: 'x' } }))
  const em = messagesOf(capErr)
  t.equal(em[em.length - 1].error?.code, -32021)
  t.equal(em[em.length - 1].id, 'e')
})

t.test('closing the response stream aborts ctx.signal and nothing more is written', async (t) => {
  let aborted!: () => void
  const abortedP = new Promise<void>(resolve => { aborted = resolve })
  let finished!: (v: string) => void
  const finishedP = new Promise<string>(resolve => { finished = resolve })
  const writes: Array<{ at: number, text: string }> = []
  let ended = false
  const a = await build(t, {
    before: (app) => {
      app.addHook('onRequest', async (req, reply) => {
        if (req.headers['x-track'] !== '1') return
        const raw = reply.raw
        const write = raw.write.bind(raw) as (...args: unknown[]) => boolean
        raw.write = ((chunk: unknown, ...rest: unknown[]) => { writes.push({ at: Date.now(), text: String(chunk) }); return write(chunk, ...rest) }) as typeof raw.write
        const end = raw.end.bind(raw) as (...args: unknown[]) => unknown
        raw.end = ((...args: unknown[]) => { ended = true; if (args[0] !== undefined && typeof args[0] !== 'function') writes.push({ at: Date.now(), text: String(args[0]) }); return end(...args) }) as typeof raw.end
      })
    }
  }, (m) => {
    m.tool({ name: 'slow', description: 'Waits for cancellation' }, async (_a, ctx) => {
      await ctx.progress({ progress: 1 })
      await new Promise<void>(resolve => { if (ctx.signal.aborted) resolve(); else ctx.signal.addEventListener('abort', () => resolve()) })
      aborted()
      await ctx.progress({ progress: 2 })
      await ctx.log('emergency', 'after the abort')
      await sleep(30)
      finished(String(ctx.signal.aborted))
      return 'too late'
    })
  })
  const live = await listen(t, a)
  const ac = new AbortController()
  const res = await live.post(rpc('tools/call', { name: 'slow' }, { meta: { progressToken: 'p', [META_LOG]: 'debug' } }), { 'x-track': '1' }, ac.signal)
  t.equal(res.status, 200)
  const reader = live.reader(res)
  await reader.waitFor(e => e.json?.method === 'notifications/progress')
  const count = writes.length
  ac.abort()
  await reader.cancel()
  await abortedP
  t.pass('ctx.signal aborted when the client closed the stream')
  t.equal(await finishedP, 'true')
  await sleep(50)
  t.equal(writes.length, count, `nothing written after the close: ${JSON.stringify(writes.slice(count))}`)
  t.notOk(writes.some(w => /too late|after the abort|"progress":2/.test(w.text)))
  t.notOk(ended && writes.length > count)
  // The server still answers.
  t.equal((await call(a, 'tools/list')).result.resultType, 'complete')
})

// ─── subscriptions/listen (items 44, 45) ────────────────────────────────────────────────────

async function openListen (t: Test, live: Awaited<ReturnType<typeof listen>>, id: string, notifications: Record<string, unknown>): Promise<SseReader> {
  const res = await live.post(rpc('subscriptions/listen', { notifications }, { id }))
  t.equal(res.status, 200, `listen ${id}`)
  t.match(res.headers.get('content-type'), /^text\/event-stream/)
  t.equal(res.headers.get('mcp-session-id'), null)
  const reader = live.reader(res)
  await reader.waitFor(e => e.json?.method === 'notifications/subscriptions/acknowledged')
  return reader
}

t.test('subscriptions/listen: acknowledgement, tagging, filtering, list changes, resource updates, keep-alive, shutdown', async (t) => {
  const a = await build(t, { plugin: { requestStateSecret: SECRET, keepAliveInterval: 40 } }, fixture({}))
  const live = await listen(t, a)
  const tp = await openListen(t, live, 'tp', { toolsListChanged: true, promptsListChanged: true })
  const p = await openListen(t, live, 'p', { promptsListChanged: true })
  const ra = await openListen(t, live, 'ra', { resourceSubscriptions: ['test://static', 'test://cached'] })
  const rb = await openListen(t, live, 'rb', { resourceSubscriptions: ['test://other'], resourcesListChanged: true })
  t.same(tp.messages[0], {
    jsonrpc: '2.0',
    method: 'notifications/subscriptions/acknowledged',
    params: { notifications: { toolsListChanged: true, promptsListChanged: true }, _meta: { [META_SUB]: 'tp' } }
  }, 'first frame: the acknowledgement, subscriptionId = the request id')
  t.same(ra.messages[0].params.notifications, { resourceSubscriptions: ['test://static', 'test://cached'] })
  t.same(rb.messages[0].params.notifications, { resourcesListChanged: true, resourceSubscriptions: ['test://other'] })

  a.mcp.tool({ name: 'late', description: 'Added after start' }, async () => 'late')
  await tp.waitFor(e => e.json?.method === 'notifications/tools/list_changed')
  a.mcp.resourceUpdated('test://static')
  await ra.waitFor(e => e.json?.method === 'notifications/resources/updated')
  a.mcp.prompt({ name: 'late', description: 'Added after start' }, async () => [])
  await p.waitFor(e => e.json?.method === 'notifications/prompts/list_changed')
  await tp.waitFor(e => e.json?.method === 'notifications/prompts/list_changed')
  a.mcp.resource({ uri: 'test://new', name: 'new', description: 'New' }, async (uri) => ({ uri, text: '' }))
  await rb.waitFor(e => e.json?.method === 'notifications/resources/list_changed')
  // Progress and log messages of other requests never reach a listen stream.
  await post(a, rpc('tools/call', { name: 'chatty' }, { meta: { progressToken: 1, [META_LOG]: 'debug' } }))
  await tp.waitFor(e => e.comment === 'keep-alive', 1000)
  await p.waitFor(e => e.comment === 'keep-alive', 1000)

  const methods = (r: SseReader): string[] => r.messages.map(m => m.method)
  t.same(methods(tp), ['notifications/subscriptions/acknowledged', 'notifications/tools/list_changed', 'notifications/prompts/list_changed'])
  t.same(methods(p), ['notifications/subscriptions/acknowledged', 'notifications/prompts/list_changed'], 'a prompts-only stream gets no tools change')
  t.same(ra.messages.slice(1), [{ jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: 'test://static', _meta: { [META_SUB]: 'ra' } } }])
  t.same(methods(rb), ['notifications/subscriptions/acknowledged', 'notifications/resources/list_changed'], 'not subscribed to test://static')
  for (const [id, r] of [['tp', tp], ['p', p], ['ra', ra], ['rb', rb]] as const) {
    t.ok(r.messages.every(m => m.params?._meta?.[META_SUB] === id), `${id}: every frame tagged`)
    t.notOk(r.messages.some(m => 'id' in m), `${id}: no requests or responses before shutdown`)
  }

  // Graceful shutdown: the final result, then the end of the stream.
  await a.close()
  for (const [id, r] of [['tp', tp], ['p', p], ['ra', ra], ['rb', rb]] as const) {
    await r.waitClosed()
    t.same(r.messages[r.messages.length - 1], { jsonrpc: '2.0', id, result: { resultType: 'complete', _meta: { [META_SUB]: id } } }, `${id}: final result`)
  }
})

t.test('subscriptions/listen: honored subset, validation, cap → 429', async (t) => {
  const a = await build(t, { plugin: { requestStateSecret: SECRET, maxListenStreams: 2 } }, (m) => {
    m.tool({ name: 'only', description: 'Only tools' }, async () => 'x')
  })
  const live = await listen(t, a)
  const all = await openListen(t, live, 'all', { toolsListChanged: true, promptsListChanged: true, resourcesListChanged: true, resourceSubscriptions: ['test://x'], bogus: true })
  t.same(all.messages[0].params.notifications, { toolsListChanged: true }, 'only what the server supports')
  const none = await openListen(t, live, 'none', {})
  t.same(none.messages[0].params.notifications, {})
  // The cap: a JSON-RPC error with the request id.
  const over = await live.post(rpc('subscriptions/listen', { notifications: { toolsListChanged: true } }, { id: 'third' }))
  t.equal(over.status, 429)
  const body = await over.json() as Record<string, any>
  t.equal(body.jsonrpc, '2.0')
  t.equal(body.id, 'third')
  t.type(body.error?.code, 'number')
  // A closed stream frees its slot.
  await none.cancel()
  let again: Response | null = null
  for (let i = 0; i < 150; i++) {
    again = await live.post(rpc('subscriptions/listen', { notifications: {} }, { id: `again-${i}` }))
    if (again.status === 200) break
    await again.body?.cancel()
    await sleep(20)
  }
  t.equal(again?.status, 200, 'slot freed after the client closed its stream')
  if (again !== null) await live.reader(again).cancel()
  // A malformed filter is refused.
  const filters: Array<[string, unknown]> = [['missing', undefined], ['an array', [1]], ['a string', 'all'], ['null', null],
    ['a flag as a string', { toolsListChanged: 'yes' }], ['a flag as a number', { promptsListChanged: 1 }],
    ['resourceSubscriptions not an array', { resourceSubscriptions: 'test://x' }], ['a URI not a string', { resourceSubscriptions: ['a', 2] }]]
  for (const [what, filter] of filters) {
    const res = await a.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(rpc('subscriptions/listen')), payload: rpc('subscriptions/listen', filter === undefined ? {} : { notifications: filter }, { id: what }) })
    isError(t, res, 400, -32602, what, `filter ${what}`)
    t.match(res.json().error.message, /notifications/)
  }
  // Listen validates like any modern request.
  const bad = await a.inject({ method: 'POST', url: '/mcp', headers: { ...modernHeaders(rpc('subscriptions/listen')), 'mcp-method': 'tools/list' }, payload: rpc('subscriptions/listen', {}, { id: 'h' }) })
  t.equal(bad.json().error.code, -32020)
  await all.cancel()
})

// ─── both eras, one handler ─────────────────────────────────────────────────────────────────

t.test('the same handler answers both eras: legacy SSE elicitation and modern input_required (demo ask_name)', async (t) => {
  const demo = await buildDemo({ logger: false })
  t.teardown(() => demo.close())
  const live = await listen(t, demo)
  const init = await fetch(live.url, {
    method: 'POST',
    headers: headers(),
    body: JSON.stringify(initializeBody({ id: 0, capabilities: { elicitation: {} } }))
  })
  t.equal(init.status, 200)
  const sid = init.headers.get('mcp-session-id')!
  t.ok(sid)
  await init.json()
  const session = headers({ sid, version: LEGACY })
  t.equal((await fetch(live.url, { method: 'POST', headers: session, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) })).status, 202)
  const callRes = await fetch(live.url, { method: 'POST', headers: session, body: JSON.stringify({ jsonrpc: '2.0', id: 'legacy-call', method: 'tools/call', params: { name: 'ask_name', arguments: {} } }) })
  t.match(callRes.headers.get('content-type'), /^text\/event-stream/)
  const reader = live.reader(callRes)
  const ask = (await reader.waitFor(e => e.json?.method === 'elicitation/create')).json!
  t.ok(ask.id !== undefined, 'legacy: a server→client request on the POST stream')
  t.equal(ask.params.message, 'What is your name?')
  const answer = await fetch(live.url, { method: 'POST', headers: session, body: JSON.stringify({ jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name: 'Grace' } } }) })
  t.equal(answer.status, 202)
  const final = (await reader.waitFor(e => e.json?.id === 'legacy-call')).json!
  t.equal(final.result.content[0].text, 'Hello, Grace!')
  t.notOk('resultType' in final.result, 'legacy results carry no resultType')

  // Modern: the same tool, stateless.
  const body = rpc('tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT })
  const first = finalOf(await post(demo, body))
  t.equal(first.result.resultType, 'input_required')
  t.equal(first.result.inputRequests.name.method, 'elicitation/create')
  t.equal(first.result.inputRequests.name.params.message, 'What is your name?')
  const second = finalOf(await post(demo, retry(body, first, { name: { action: 'accept', content: { name: 'Ada' } } })))
  t.equal(second.result.resultType, 'complete')
  t.equal(second.result.content[0].text, 'Hello, Ada!')
  const declined = finalOf(await post(demo, retry(body, first, { name: { action: 'decline' } })))
  t.equal(declined.result.content[0].text, 'No name given.')
  // Modern requests leave no session behind, and the legacy session is still there.
  const ping = await fetch(live.url, { method: 'POST', headers: session, body: JSON.stringify({ jsonrpc: '2.0', id: 'ping', method: 'ping' }) })
  t.same(await ping.json(), { jsonrpc: '2.0', id: 'ping', result: {} })
  await reader.cancel()
})
