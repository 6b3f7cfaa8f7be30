/**
 * Spans of MCP requests, captured with the SDK's in-memory exporter: one SERVER span per request
 * on both wires, named `{mcp.method.name} {target}` with the semantic conventions' attributes;
 * errors (JSON-RPC codes, `tool_error`, refusals with 503 and 429 and their reason); `traceparent`
 * in `_meta` as the parent, the HTTP request's context otherwise; the lock's and store's measures;
 * `telemetry: false` emits nothing.
 */
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type TracerProvider } from '@opentelemetry/api'
import { Type } from '@sinclair/typebox'
import t from 'tap'
import { hashSessionId } from '../../lib/telemetry/index.js'
import { MemorySessionLock, type McpDecorator } from '../../lib/index.js'
import { attrs, holdingTool, otel, useGlobally } from '../helpers/otel.js'
import { sleep } from '../helpers/time.js'
import { ACCEPT, modernHeaders, rpc } from '../helpers/wire.js'
import { build, call, initialize, post, request } from '../helpers/handshake-app.js'

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736'
const PARENT = '00f067aa0ba902b7'

/** The app's own tracer (the handler's spans); each test points it at its provider. */
let appTracer: TracerProvider = trace.getTracerProvider()

function tools (m: McpDecorator): void {
  m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
  m.tool({ name: 'fails', description: 'Throws', input: Type.Object({}) }, async () => { throw new Error('boom') })
  m.tool({ name: 'nested', description: 'Makes a span of its own', input: Type.Object({}) }, async () => {
    appTracer.getTracer('app').startSpan('app work').end()
    return 'ok'
  })
  m.tool({ name: 'limited', description: 'One call a minute', input: Type.Object({}), limits: { rate: { calls: 1, perMs: 60_000 } } }, async () => 'ok')
}

t.test('legacy wire: a tool call is a SERVER span named "tools/call echo" with the conventions\' attributes', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const s = await initialize(app)
  const res = await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'hi' } }, { id: 'r-7' })
  t.equal(res.result.content[0].text, 'hi')
  const [span] = o.named('tools/call echo')
  t.ok(span, 'the span is named {method} {tool}')
  t.equal(span.kind, SpanKind.SERVER)
  t.match(attrs(span), {
    'mcp.method.name': 'tools/call',
    'mcp.session.id': hashSessionId(s.sid),
    'jsonrpc.request.id': 'r-7',
    'gen_ai.tool.name': 'echo',
    'gen_ai.operation.name': 'execute_tool',
    'mcp.protocol.version': s.version,
    'network.transport': 'tcp',
    'fastify_mcp.era': '2025'
  })
  t.notOk('error.type' in span.attributes, 'no error.type on success')
  t.equal(span.status.code, SpanStatusCode.UNSET)
  // The lock is on by default: the session is read with the lease, measured as the lock's wait.
  t.type(span.attributes['fastify_mcp.lock.wait_ms'], 'number', 'the lock wait with the session load is measured')
  t.type(span.attributes['fastify_mcp.store.save_ms'], 'number', 'the save is measured')
  t.ok(o.named('initialize').length === 1, 'initialize has its span too')
})

t.test('mcp.session.id: hashed by default (never the id itself), raw or omitted when chosen', async t => {
  for (const choice of [undefined, 'hashed', 'raw', 'omitted'] as const) {
    const o = otel(t)
    const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider, sessionId: choice } }, tools)
    const s = await initialize(app)
    await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'hi' } })
    const [span] = o.named('tools/call echo')
    const expected = choice === 'raw' ? s.sid : choice === 'omitted' ? undefined : hashSessionId(s.sid)
    t.equal(span.attributes['mcp.session.id'], expected, `${choice ?? 'default'}: ${String(expected)}`)
    if (choice !== 'raw') t.notOk(JSON.stringify(o.spans().map(x => x.attributes)).includes(s.sid), `${choice ?? 'default'}: no span carries the id`)
  }
  t.equal(hashSessionId('a').length, 22)
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  await call(app, await initialize(app), 'tools/call', { name: 'echo', arguments: { text: 'hi' } })
  t.match(attrs(o.named('tools/call echo')[0]), { 'network.protocol.version': '1.1', 'client.address': '127.0.0.1' }, 'the conventions\' peer and HTTP version')
  const bad = build(t, { telemetry: { sessionId: 'plain' as never } }, tools)
  await t.rejects(bad, { code: 'FST_ERR_MCP_INVALID_OPTION', message: /telemetry\.sessionId/ })
})

t.test('modern wire: the same span, without a session', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const body = rpc('tools/call', { name: 'echo', arguments: { text: 'hi' } }, { id: 3 })
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: JSON.stringify(body) })
  t.equal(res.statusCode, 200)
  const [span] = o.named('tools/call echo')
  t.ok(span)
  t.match(attrs(span), { 'mcp.method.name': 'tools/call', 'jsonrpc.request.id': '3', 'gen_ai.tool.name': 'echo', 'mcp.protocol.version': '2026-07-28', 'fastify_mcp.era': '2026-07-28' })
  t.notOk('mcp.session.id' in span.attributes)

  // An error and a 429 on this wire too.
  const send = async (name: string, id: number): Promise<number> => {
    const b = rpc('tools/call', { name, arguments: {} }, { id })
    return (await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(b), payload: JSON.stringify(b) })).statusCode
  }
  t.equal(await send('fails', 4), 200)
  t.equal(o.named('tools/call fails')[0]?.attributes['error.type'], 'tool_error')
  t.equal(await send('limited', 5), 200)
  t.equal(await send('limited', 6), 429)
  const limited = o.named('tools/call limited').find(sp => sp.attributes['jsonrpc.request.id'] === '6')
  t.match(attrs(limited!), { 'error.type': '-32000', 'fastify_mcp.refusal.reason': 'tool_rate', 'fastify_mcp.era': '2026-07-28' })
})

t.test('errors: JSON-RPC codes, tool_error, unknown names never name a span', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const s = await initialize(app)
  t.equal((await call(app, s, 'tools/call', { name: 'fails', arguments: {} })).result.isError, true)
  const [failed] = o.named('tools/call fails')
  t.equal(failed.attributes['error.type'], 'tool_error')
  t.equal(failed.status.code, SpanStatusCode.ERROR)

  const unknown = await call(app, s, 'tools/call', { name: 'x'.repeat(5000), arguments: {} })
  t.ok(unknown.error ?? unknown.result?.isError, 'unknown tool refused')
  const [plain] = o.named('tools/call')
  t.ok(plain, 'an unknown tool is not in the span name')
  t.equal((plain.attributes['gen_ai.tool.name'] as string).length, 256, 'the name attribute is cut')

  const nf = await call(app, s, 'no/such/method', {})
  t.equal(nf.error.code, -32601)
  const [other] = o.named('_OTHER')
  t.equal(other.attributes['error.type'], '-32601')
  t.equal(other.attributes['rpc.response.status_code'], '-32601')
  t.equal(other.attributes['mcp.method.name'], 'no/such/method')
})

t.test('a 503 (lock wait timed out) and a 429 (tool rate limit) carry the reason', async t => {
  const o = otel(t)
  const lock = new MemorySessionLock({ timeout: 30 })
  t.teardown(() => lock.close())
  const hold = holdingTool()
  const app = await build(t, { sessions: { lock }, telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, (m) => {
    tools(m)
    hold.register(m)
  })
  const s = await initialize(app)
  const first = request(app, s, 'tools/call', { name: 'hold', arguments: {} })
  await hold.running
  const busy = await request(app, s, 'tools/call', { name: 'echo', arguments: { text: 'x' } }, { id: 'busy' })
  t.equal(busy.statusCode, 503)
  hold.release()
  t.equal((await first).statusCode, 200)
  const refused = o.named('tools/call echo').find(sp => sp.attributes['jsonrpc.request.id'] === 'busy')
  t.ok(refused)
  t.match(attrs(refused!), { 'error.type': '-32000', 'fastify_mcp.refusal.reason': 'session_busy' })
  t.equal(refused!.status.code, SpanStatusCode.ERROR)
  const [holding] = o.named('tools/call hold')
  t.type(holding.attributes['fastify_mcp.lock.wait_ms'], 'number', 'the lock wait is measured')
  t.type(holding.attributes['fastify_mcp.lock.hold_ms'], 'number', 'and how long it was held')

  t.equal((await request(app, s, 'tools/call', { name: 'limited', arguments: {} })).statusCode, 200)
  const limited = await request(app, s, 'tools/call', { name: 'limited', arguments: {} }, { id: 'lim' })
  t.equal(limited.statusCode, 429)
  const span = o.named('tools/call limited').find(sp => sp.attributes['jsonrpc.request.id'] === 'lim')
  t.match(attrs(span!), { 'error.type': '-32000', 'fastify_mcp.refusal.reason': 'tool_rate' })

  const refusals = await o.points('fastify_mcp.refusals')
  t.match(refusals.map(p => ({ ...p.attributes, value: p.value }) as Record<string, unknown>).sort((a, b) => Number(a['http.response.status_code']) - Number(b['http.response.status_code'])), [
    { 'http.response.status_code': 429, 'fastify_mcp.refusal.reason': 'tool_rate', value: 1 },
    { 'http.response.status_code': 503, 'fastify_mcp.refusal.reason': 'session_busy', value: 1 }
  ])
})

t.test('traceparent in params._meta is the parent; the HTTP request\'s context is linked', async t => {
  const o = otel(t)
  appTracer = o.tracerProvider
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const s = await initialize(app)
  const ambient = o.tracerProvider.getTracer('http').startSpan('HTTP POST')
  const ctx = trace.setSpan(ROOT_CONTEXT, ambient)
  await context.with(ctx, async () => await call(app, s, 'tools/call', {
    name: 'nested', arguments: {}, _meta: { traceparent: `00-${TRACE_ID}-${PARENT}-01`, tracestate: 'rojo=00f067aa0ba902b7' }
  }))
  ambient.end()
  const [span] = o.named('tools/call nested')
  t.equal(span.spanContext().traceId, TRACE_ID, 'joins the client\'s trace')
  t.equal(span.parentSpanContext?.spanId, PARENT)
  t.equal(span.spanContext().traceState?.get('rojo'), '00f067aa0ba902b7', 'tracestate kept')
  t.same(span.links.map(l => l.context.spanId), [ambient.spanContext().spanId], 'the HTTP span is linked')
  const [own] = o.named('app work')
  t.equal(own.parentSpanContext?.spanId, span.spanContext().spanId, 'the handler runs in the request\'s span')

  // Without _meta the HTTP request's span is the parent; a malformed traceparent is ignored.
  const http = o.tracerProvider.getTracer('http').startSpan('HTTP POST 2')
  await context.with(trace.setSpan(ROOT_CONTEXT, http), async () => {
    await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'a' } }, { id: 'plain' })
    await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'b' }, _meta: { traceparent: `00-${'0'.repeat(32)}-${PARENT}-01` } }, { id: 'bad' })
  })
  http.end()
  // 1 MiB of traceparent and tracestate: ignored, the request served as without them.
  const huge = await context.with(trace.setSpan(ROOT_CONTEXT, http), async () => await call(app, s, 'tools/call', {
    name: 'echo', arguments: { text: 'c' }, _meta: { traceparent: `00-${TRACE_ID}-${PARENT}-01${'0'.repeat(1 << 20)}`, tracestate: 'y'.repeat(1 << 20) }
  }, { id: 'huge' }))
  t.equal(huge.result.content[0].text, 'c')
  for (const id of ['plain', 'bad', 'huge']) {
    const sp = o.named('tools/call echo').find(x => x.attributes['jsonrpc.request.id'] === id)
    t.equal(sp?.parentSpanContext?.spanId, http.spanContext().spanId, `${id}: a child of the HTTP span`)
  }
})

t.test('a request without the version header: the span carries the session\'s version, known once the session is read', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const s = await initialize(app, { version: '2025-03-26' })
  const body = { jsonrpc: '2.0', id: 'no-header', method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' } } }
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: { accept: ACCEPT, 'content-type': 'application/json', 'mcp-session-id': s.sid }, payload: JSON.stringify(body) })
  t.equal(res.statusCode, 200, res.body)
  const span = o.named('tools/call echo').find(sp => sp.attributes['jsonrpc.request.id'] === 'no-header')
  t.equal(span?.attributes['mcp.protocol.version'], '2025-03-26')
})

t.test('batches: one span per request, each handler in its own', async t => {
  const o = otel(t)
  appTracer = o.tracerProvider
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const s = await initialize(app, { version: '2025-03-26' })
  const res = await post(app, [
    // The second request makes the span of its own: it must be under its request's, not the POST's first.
    { jsonrpc: '2.0', id: 'b', method: 'tools/call', params: { name: 'fails', arguments: {} } },
    { jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'nested', arguments: {} } },
    { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 1 } }
  ], { session: s })
  t.equal(res.statusCode, 200)
  const [a] = o.named('tools/call nested')
  const [b] = o.named('tools/call fails')
  t.equal(a.attributes['jsonrpc.request.id'], 'a')
  t.equal(b.attributes['error.type'], 'tool_error')
  t.notOk('error.type' in a.attributes)
  t.equal(o.named('app work')[0].parentSpanContext?.spanId, a.spanContext().spanId)
  t.equal(o.named('notifications/progress').length, 1, 'notifications have spans')
})

t.test('telemetry: false emits nothing', async t => {
  const o = otel(t)
  useGlobally(t, o)
  const app = await build(t, { telemetry: false }, tools)
  const s = await initialize(app)
  await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'hi' } })
  await sleep(1)
  t.same(o.spans(), [])
})
