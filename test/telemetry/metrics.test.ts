/**
 * Metrics read with an in-memory metric reader: `mcp.server.operation.duration` (seconds, by
 * method, tool, error type; unknown names never become attribute values), `mcp.server.session.duration`
 * when a client ends its session, the lock wait, and the gauges of what the instance holds (lock
 * waiters, GET streams, sessions) — the same counts `app.mcp.status()` gives.
 */
import { Type } from '@sinclair/typebox'
import t from 'tap'
import { MemorySessionLock, type McpDecorator } from '../../lib/index.js'
import type { Histogram } from '@opentelemetry/sdk-metrics'
import { SseReader } from '../helpers/sse.js'
import { holdingTool, otel, type Otel } from '../helpers/otel.js'
import { until } from '../helpers/time.js'
import { finalOf, modernHeaders, rpc } from '../helpers/wire.js'
import { build, call, initialize, listen, request } from '../helpers/handshake-app.js'

/** A gauge's value (of the point whose stream or lock kind is `kind`, when given). */
async function gaugeOf (o: Otel, name: string, kind?: string): Promise<number | undefined> {
  const points = await o.points(name)
  return points.find(p => kind === undefined || p.attributes['fastify_mcp.stream.kind'] === kind || p.attributes['fastify_mcp.lock.kind'] === kind)?.value as number | undefined
}

function tools (m: McpDecorator): void {
  m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
}

t.test('mcp.server.operation.duration: seconds, by method and known tool; unknown names are _OTHER or left out', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const s = await initialize(app)
  await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'a' } })
  await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'b' } })
  await call(app, s, 'tools/call', { name: 'nope', arguments: {} })
  await call(app, s, 'made/up', {})
  const metric = await o.metric('mcp.server.operation.duration')
  t.equal(metric?.descriptor.unit, 's')
  const points = metric?.dataPoints ?? []
  const echo = points.find(p => p.attributes['gen_ai.tool.name'] === 'echo')
  t.equal((echo?.value as Histogram).count, 2, 'two calls of echo')
  t.match(echo?.attributes, { 'mcp.method.name': 'tools/call', 'mcp.protocol.version': s.version, 'network.transport': 'tcp' })
  t.ok(((echo?.value as Histogram).sum ?? Infinity) < 5, 'in seconds')
  t.notOk(points.some(p => p.attributes['gen_ai.tool.name'] === 'nope'), 'an unknown tool is no attribute value')
  const other = points.find(p => p.attributes['mcp.method.name'] === '_OTHER')
  t.equal(other?.attributes['error.type'], '-32601', 'an unknown method is _OTHER, with its error')
  t.ok(points.some(p => p.attributes['mcp.method.name'] === 'initialize'))
})

t.test('mcp.server.session.duration: recorded when the client ends its session', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, tools)
  const s = await initialize(app)
  t.same(await o.points('mcp.server.session.duration'), [], 'nothing while it lives')
  const res = await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid, 'mcp-protocol-version': s.version } })
  t.equal(res.statusCode, 200)
  const [point] = await o.points('mcp.server.session.duration')
  t.equal((point.value as Histogram).count, 1)
  t.equal(point.attributes['mcp.protocol.version'], s.version)
})

t.test('lock wait histogram, and the gauges (lock waiters, GET streams, sessions held) match app.mcp.status()', async t => {
  const o = otel(t)
  const lock = new MemorySessionLock({ timeout: 5000 })
  t.teardown(() => lock.close())
  const hold = holdingTool()
  const app = await build(t, { sessions: { lock }, telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, (m) => {
    tools(m)
    hold.register(m)
  })
  const live = await listen(t, app)
  const s = await live.initialize()
  const stream = live.track(new SseReader(await live.get(s)))
  await until(() => app.mcp.status().getStreams === 1, { what: 'the GET stream' })
  const first = request(app, s, 'tools/call', { name: 'hold', arguments: {} })
  await hold.running
  const second = request(app, s, 'tools/call', { name: 'echo', arguments: { text: 'x' } })
  await until(() => app.mcp.status().lockWaiters === 1, { what: 'the second request to queue' })
  const gauge = async (name: string, kind?: string): Promise<number | undefined> => await gaugeOf(o, name, kind)
  t.equal(await gauge('fastify_mcp.lock.waiters', 'session'), 1, 'one lock waiter, for a session\'s lock')
  t.equal(await gauge('fastify_mcp.lock.waiters', 'handle'), 0)
  t.equal(await gauge('fastify_mcp.streams.open', 'get'), 1, 'one GET stream')
  t.equal(await gauge('fastify_mcp.streams.open', 'listen'), 0)
  t.equal(await gauge('fastify_mcp.sessions.held'), app.mcp.status().sessionsHeld)
  t.equal(await gauge('fastify_mcp.event_log.streams'), 1, 'the in-process event log keeps the GET stream')
  hold.release()
  t.equal((await first).statusCode, 200)
  t.equal((await second).statusCode, 200)
  t.equal(app.mcp.status().lockWaiters, 0)
  t.equal(await gauge('fastify_mcp.lock.waiters', 'session'), 0)
  const [wait] = await o.points('fastify_mcp.lock.wait.duration')
  t.equal((wait.value as Histogram).count, 2, 'both requests\' lock waits')
  t.ok((wait.value as Histogram).max! > 0, 'the queued one waited')
  await stream.cancel()
})

t.test('the lock-waiter gauge counts calls queued for a state handle\'s lock, by kind (2026-07-28 wire)', async t => {
  const o = otel(t)
  const lock = new MemorySessionLock({ timeout: 5000 })
  t.teardown(() => lock.close())
  const hold = holdingTool()
  const app = await build(t, { sessions: { lock }, telemetry: { tracerProvider: o.tracerProvider, meterProvider: o.meterProvider } }, (m) => {
    m.handleKind('box', { ttl: 60_000 })
    m.tool({ name: 'box_create', description: 'Makes a box' }, async (_a, ctx) => await ctx.handles.create('box', {}))
    hold.register(m, 'box_hold', { input: Type.Object({ box: Type.String() }), handle: { argument: 'box', kind: 'box' } })
  })
  const send = async (body: Record<string, any>): Promise<Record<string, any>> => {
    const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: JSON.stringify(body) })
    t.equal(res.statusCode, 200, `${String(body.params.name)} answered`)
    return finalOf(res)
  }
  const box = (await send(rpc('tools/call', { name: 'box_create', arguments: {} }))).result.content[0].text as string
  const first = send(rpc('tools/call', { name: 'box_hold', arguments: { box } }))
  await hold.running
  const second = send(rpc('tools/call', { name: 'box_hold', arguments: { box } }))
  await until(() => app.mcp.status().lockWaiters === 1, { what: 'the second call to queue for the box' })
  t.equal(await gaugeOf(o, 'fastify_mcp.lock.waiters', 'handle'), 1, 'one waiter, for a handle\'s lock')
  t.equal(await gaugeOf(o, 'fastify_mcp.lock.waiters', 'session'), 0, 'none for a session\'s')
  hold.release()
  t.equal((await first).result.content[0].text, 'done')
  t.equal((await second).result.content[0].text, 'done')
  t.equal(app.mcp.status().lockWaiters, 0)
  t.equal(await gaugeOf(o, 'fastify_mcp.lock.waiters', 'handle'), 0)
})

t.test('Instruments.recordsOperations: false only on the API no-op meter (a POST then skips the clock and the attributes)', async t => {
  const { createNoopMeter, metrics } = await import('@opentelemetry/api')
  const { Instruments } = await import('../../lib/telemetry/instruments.js')
  t.equal(new Instruments(createNoopMeter()).recordsOperations, false)
  t.equal(new Instruments(metrics.getMeter('no-sdk')).recordsOperations, false, 'no global provider: the no-op meter')
  const o = otel(t)
  t.equal(new Instruments(o.meterProvider.getMeter('sdk')).recordsOperations, true)
})
