/**
 * Spans of what is not one MCP request per POST, captured with the SDK's in-memory exporter: a
 * handshake-era GET stream and DELETE (SERVER spans with the session, version and transport
 * attributes, the refusal's reason and the refusal counter), and the 2026-07-28 wire's
 * `input_required` rounds (a CLIENT span per input request under the call's span, and the count
 * of input requests and of answers on the rounds' spans).
 */
import { SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { Type } from '@sinclair/typebox'
import t from 'tap'
import { hashSessionId } from '../../lib/telemetry/index.js'
import type { McpDecorator } from '../../lib/index.js'
import { attrs, otel, useGlobally } from '../helpers/otel.js'
import { SseReader } from '../helpers/sse.js'
import { until } from '../helpers/time.js'
import { finalOf, modernHeaders, newId, rpc } from '../helpers/wire.js'
import { build, initialize, listen } from '../helpers/handshake-app.js'

const nameSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }

function tools (m: McpDecorator): void {
  m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
  m.tool({ name: 'ask', description: 'Asks a name and a confirmation', input: Type.Object({}) }, async (_a, ctx) => {
    const [who, ok] = await Promise.all([
      ctx.elicit('name', { message: 'Name?', requestedSchema: nameSchema }),
      ctx.elicit('confirm', { message: 'Sure?', requestedSchema: { type: 'object', properties: {} } })
    ])
    return `${String(who.content?.name)} ${ok.action}`
  })
}

t.test('GET stream: a SERVER span with the session\'s attributes, ended once the stream is open; a 429 carries its reason', async t => {
  const o = otel(t)
  const app = await build(t, { maxStreamsPerSession: 1, telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const live = await listen(t, app)
  const s = await live.initialize()
  const stream = live.track(new SseReader(await live.get(s)))
  await until(() => o.named('GET stream').length === 1, { what: 'the GET stream\'s span' })
  const [span] = o.named('GET stream')
  t.equal(span.kind, SpanKind.SERVER)
  t.match(attrs(span), { 'mcp.session.id': hashSessionId(s.sid), 'mcp.protocol.version': s.version, 'network.transport': 'tcp', 'network.protocol.name': 'http', 'fastify_mcp.era': '2025' })
  t.notOk('mcp.method.name' in span.attributes, 'a GET is no MCP method')
  t.notOk('error.type' in span.attributes)
  t.equal(span.status.code, SpanStatusCode.UNSET)

  const second = await live.get(s)
  t.equal(second.status, 429, 'past maxStreamsPerSession')
  await second.body?.cancel()
  await until(() => o.named('GET stream').length === 2, { what: 'the refused GET\'s span' })
  const refused = o.named('GET stream')[1]
  t.match(attrs(refused), { 'mcp.session.id': hashSessionId(s.sid), 'error.type': '-32000', 'rpc.response.status_code': '-32000', 'fastify_mcp.refusal.reason': 'session_streams' })
  t.equal(refused.status.code, SpanStatusCode.ERROR)
  const refusals = await o.points('fastify_mcp.refusals')
  t.match(refusals.map(p => ({ ...p.attributes, value: p.value })), [{ 'http.response.status_code': 429, 'fastify_mcp.refusal.reason': 'session_streams', value: 1 }])
  await stream.cancel()
})

t.test('DELETE: a SERVER span with the session\'s attributes; a DELETE of an unknown session carries its error', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const s = await initialize(app)
  const del = async (): Promise<number> => (await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid, 'mcp-protocol-version': s.version } })).statusCode
  t.equal(await del(), 200)
  const [span] = o.named('DELETE session')
  t.equal(span.kind, SpanKind.SERVER)
  t.match(attrs(span), {
    'mcp.session.id': hashSessionId(s.sid),
    'mcp.protocol.version': s.version,
    'network.transport': 'tcp',
    'fastify_mcp.era': '2025',
    'network.protocol.version': '1.1',
    'client.address': '127.0.0.1'
  })
  t.notOk('error.type' in span.attributes)

  t.equal(await del(), 404, 'the session is gone')
  const gone = o.named('DELETE session')[1]
  t.type(gone.attributes['error.type'], 'string', 'the error is on the span')
  t.equal(gone.status.code, SpanStatusCode.ERROR)
  t.notOk('fastify_mcp.refusal.reason' in gone.attributes, 'a 404 is no refusal')
  t.same(await o.points('fastify_mcp.refusals'), [], 'nor counted as one')
})

t.test('telemetry: false: a GET and a DELETE make no span', async t => {
  const o = otel(t)
  useGlobally(t, o)
  const app = await build(t, { telemetry: false }, tools)
  const s = await initialize(app)
  const live = await listen(t, app)
  const stream = live.track(new SseReader(await live.get(s)))
  await until(() => app.mcp.status().getStreams === 1, { what: 'the GET stream' })
  await stream.cancel()
  t.equal((await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid, 'mcp-protocol-version': s.version } })).statusCode, 200)
  t.same(o.spans(), [])
})

t.test('2026-07-28 input_required rounds: a CLIENT span per input request under the call\'s span; the rounds count requests and answers', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const send = async (body: Record<string, any>): Promise<Record<string, any>> => {
    const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: JSON.stringify(body) })
    t.equal(res.statusCode, 200, `${String(body.method)} answered`)
    return finalOf(res)
  }
  const body = rpc('tools/call', { name: 'ask', arguments: {} }, { id: 'round-1', caps: { elicitation: {} } })
  const first = await send(body)
  t.equal(first.result.resultType, 'input_required')
  const [round1] = o.named('tools/call ask')
  t.match(attrs(round1), { 'jsonrpc.request.id': 'round-1', 'fastify_mcp.input.requests': 2 })
  t.notOk('error.type' in round1.attributes, 'asking is no error')
  const asked = o.named('elicitation/create')
  t.equal(asked.length, 2, 'one CLIENT span per input request')
  t.same(asked.map(sp => sp.attributes['fastify_mcp.input.key']).sort(), ['confirm', 'name'])
  for (const sp of asked) {
    t.equal(sp.kind, SpanKind.CLIENT)
    t.equal(sp.parentSpanContext?.spanId, round1.spanContext().spanId, 'under the call\'s span')
    t.equal(sp.spanContext().traceId, round1.spanContext().traceId)
    t.match(attrs(sp), { 'mcp.method.name': 'elicitation/create', 'mcp.protocol.version': '2026-07-28', 'network.transport': 'tcp', 'fastify_mcp.era': '2026-07-28' })
  }

  const answers = { name: { action: 'accept', content: { name: 'Ada' } }, confirm: { action: 'accept', content: {} } }
  const second = await send({ ...body, id: newId(), params: { ...body.params, inputResponses: answers, requestState: first.result.requestState } })
  t.equal(second.result.content[0].text, 'Ada accept')
  const round2 = o.named('tools/call ask')[1]
  t.equal(round2.attributes['fastify_mcp.input.responses'], 2, 'the answers it carries')
  t.notOk('fastify_mcp.input.requests' in round2.attributes, 'it asked nothing more')
  t.equal(o.named('elicitation/create').length, 2, 'no new CLIENT span')
})
