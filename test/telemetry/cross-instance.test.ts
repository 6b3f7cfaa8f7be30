/**
 * One trace across instances: two apps share one real redis-server (store, lock, bus); a tool
 * call on A asks the client (elicitation) and the client's answer lands on B. A's SERVER span and
 * its `elicitation/create` CLIENT span, and B's delivery of the answer, share the client's trace
 * id, B's span a child of A's; A records that the answer crossed one instance. Each app has its
 * own SDK (as two processes would). While the handler waits, A's status and gauges count it.
 */
import { SpanKind } from '@opentelemetry/api'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import mcp, { RedisSessionLock, RedisSessionStore } from '../../lib/index.js'
import { initialize, send, serve } from '../helpers/http-client.js'
import { otel, type Otel } from '../helpers/otel.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { SseReader } from '../helpers/sse.js'
import { until } from '../helpers/time.js'
import { headers } from '../helpers/wire.js'

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c'
const CLIENT_SPAN = 'b7ad6b7169203331'

const redisServer = await startRedisServer(t)

async function instance (t: Test, o: Otel): Promise<{ url: string, app: ReturnType<typeof Fastify> }> {
  const client = new Redis(redisServer.url)
  const lock = new RedisSessionLock({ redis: redisServer.url, timeout: 5000 })
  await lock.ready()
  const app = Fastify({ logger: false })
  t.teardown(async () => {
    await app.close()
    await lock.close()
    await client.quit().catch(() => client.disconnect())
  })
  await app.register(mcp, {
    redis: redisServer.url,
    sessions: { store: new RedisSessionStore({ redis: client }), lock },
    telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider }
  })
  app.mcp.tool({ name: 'ask', description: 'Asks the client for a name' }, async (_args, ctx) => {
    const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
    return `hello ${String((r as { content?: { name?: string } }).content?.name)}`
  })
  const { url } = await serve(t, app)
  return { url, app }
}

/** Calls `ask` on `a` with the client's trace context, answers on `answerOn`; resolves the final result. */
async function askAcross (t: Test, a: { url: string, app: ReturnType<typeof Fastify> }, answerOn: string, aOtel: Otel): Promise<Record<string, any>> {
  const session = await initialize(a.url, { capabilities: { elicitation: {} } })
  const res = await fetch(a.url, {
    method: 'POST',
    headers: headers(session),
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'ask', arguments: {}, _meta: { traceparent: `00-${TRACE_ID}-${CLIENT_SPAN}-01` } } })
  })
  const reader = new SseReader(res)
  t.teardown(() => reader.cancel())
  const ask = await reader.waitForMessage(m => m.method === 'elicitation/create', 5000)
  t.match(ask.params._meta.traceparent, new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-01$`), 'the request to the client carries the trace context')
  t.equal(a.app.mcp.status().pendingClientRequests, 1, 'status: one pending client request')
  const pending = (await aOtel.points('fastify_mcp.client_requests.pending'))[0]
  t.equal(pending?.value, 1, 'the gauge reads it too')
  const answer = await send(answerOn, { jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name: 'Ada' } } }, session)
  t.equal(answer.status, 202)
  const final = await reader.waitForMessage(m => m.id === 1, 5000)
  await until(() => aOtel.named('tools/call ask').length === 1, { timeout: 2000, what: 'the tool call span to end' })
  t.equal(a.app.mcp.status().pendingClientRequests, 0)
  return final
}

t.test('an answer landing on B joins the trace started on A', async t => {
  const oa = otel(t)
  const ob = otel(t)
  const a = await instance(t, oa)
  const b = await instance(t, ob)
  const final = await askAcross(t, a, b.url, oa)
  t.equal(final.result.content[0].text, 'hello Ada')

  const [call] = oa.named('tools/call ask')
  const [asked] = oa.named('elicitation/create')
  const [delivered] = ob.named('answer delivery')
  t.ok(call !== undefined && asked !== undefined && delivered !== undefined, 'the three spans exist')
  t.equal(call.spanContext().traceId, TRACE_ID)
  t.equal(call.parentSpanContext?.spanId, CLIENT_SPAN)
  t.equal(asked.kind, SpanKind.CLIENT)
  t.equal(asked.spanContext().traceId, TRACE_ID)
  t.equal(asked.parentSpanContext?.spanId, call.spanContext().spanId, 'the request to the client is a child of the tool call')
  t.equal(delivered.spanContext().traceId, TRACE_ID, 'B\'s span is in the same trace')
  t.equal(delivered.parentSpanContext?.spanId, asked.spanContext().spanId, 'a child of A\'s elicitation/create span')
  t.equal(asked.attributes['fastify_mcp.answer.hops'], 1, 'the answer crossed one instance')
  t.equal(oa.named('answer delivery').length, 0, 'A delivered nothing')
  t.type(call.attributes['fastify_mcp.redis.round_trips'], 'number', 'Redis round trips are counted')
  // A ping changes nothing and takes no lease: one read of the session, nothing else.
  // (Every kind of request, locked and not: test/state/round-trips.test.ts.)
  const session = await initialize(a.url)
  t.equal((await send(a.url, { jsonrpc: '2.0', id: 'p', method: 'ping' }, session)).status, 200)
  const [ping] = oa.named('ping')
  t.equal(ping.attributes['fastify_mcp.redis.round_trips'], 1, 'exactly 1 Redis round trip')
})

t.test('an answer landing on A itself: zero hops', async t => {
  const oa = otel(t)
  const a = await instance(t, oa)
  const final = await askAcross(t, a, a.url, oa)
  t.equal(final.result.content[0].text, 'hello Ada')
  const [asked] = oa.named('elicitation/create')
  t.equal(asked.attributes['fastify_mcp.answer.hops'], 0)
  t.equal(oa.named('answer delivery')[0]?.parentSpanContext?.spanId, asked.spanContext().spanId)
})

t.test('Redis stopped: the call is refused with 503 and its span says why; Redis back, answered again', async t => {
  const oa = otel(t)
  const a = await instance(t, oa)
  const session = await initialize(a.url, { capabilities: { elicitation: {} } })
  await redisServer.stop()
  const res = await send(a.url, { jsonrpc: '2.0', id: 'down', method: 'tools/call', params: { name: 'ask', arguments: {} } }, session)
  t.equal(res.status, 503)
  const span = oa.named('tools/call ask').find(s => s.attributes['jsonrpc.request.id'] === 'down')
  t.equal(span?.attributes['error.type'], '-32000')
  t.match(span?.attributes['fastify_mcp.refusal.reason'], /^(lock|store)_unavailable$/)
  const refusals = await oa.points('fastify_mcp.refusals')
  t.equal(refusals[0]?.attributes['http.response.status_code'], 503)
  await redisServer.start()
  // Redis came back empty (no persistence): the session is gone, a 404 rather than a 503.
  await until(async () => (await send(a.url, { jsonrpc: '2.0', id: 'p', method: 'ping' }, session)).status === 404, { timeout: 10_000, what: 'Redis back' })
})
