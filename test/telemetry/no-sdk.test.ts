/**
 * Telemetry on with no SDK: a POST gets the telemetry that does nothing (`NO_POST`) while no SDK
 * is the global tracer provider and the meter is the API's no-op one, since its spans would not
 * record; an SDK registered after the plugin records from the next POST, and `trace.disable()`
 * silences it again. Given providers (the `telemetry` option) always record.
 */
import { trace } from '@opentelemetry/api'
import { Type } from '@sinclair/typebox'
import t from 'tap'
import type { McpDecorator } from '../../lib/index.js'
import { hashSessionId, resolveTelemetry, Telemetry, NO_POST, type KnownNames } from '../../lib/telemetry/index.js'
import { otel } from '../helpers/otel.js'
import { build, call, initialize } from '../helpers/handshake-app.js'

const known: KnownNames = { method: () => true, tool: () => true, prompt: () => true }
const fail = (name: string, why: string): never => { throw new Error(`${name} ${why}`) }
const message = [{ kind: 'request', message: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo' } } }] as Parameters<Telemetry['post']>[3]

function echo (m: McpDecorator): void {
  m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
}

t.test('a POST\'s telemetry is silent only while nothing can record it', async t => {
  const o = otel(t)
  const on = new Telemetry(resolveTelemetry(true, fail), '1.0.0', known)
  t.equal(on.post('2025', null, undefined, message), NO_POST, 'no SDK, no-op meter: nothing to record')
  trace.setGlobalTracerProvider(o.tracerProvider)
  t.teardown(() => trace.disable())
  t.not(on.post('2025', null, undefined, message), NO_POST, 'an SDK registered after the plugin: spans start')
  trace.disable()
  t.equal(on.post('2025', null, undefined, message), NO_POST, 'after trace.disable(): silent again')
  const given = new Telemetry(resolveTelemetry({ tracerProvider: o.tracerProvider }, fail), '1.0.0', known)
  t.not(given.post('2025', null, undefined, message), NO_POST, 'a given tracer provider records, whatever the global')
  const metered = new Telemetry(resolveTelemetry({ meterProvider: o.meterProvider }, fail), '1.0.0', known)
  t.not(metered.post('2025', null, undefined, message), NO_POST, 'a meter that records: durations are measured')
  const off = new Telemetry(resolveTelemetry(false, fail), '1.0.0', known)
  t.equal(off.post('2025', null, undefined, message), NO_POST, 'telemetry: false')
})

t.test('an SDK registered after the plugin gets the next request\'s span', async t => {
  const o = otel(t)
  const app = await build(t, {}, echo)
  const s = await initialize(app)
  await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'before' } })
  trace.setGlobalTracerProvider(o.tracerProvider)
  t.teardown(() => trace.disable())
  const res = await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'after' } }, { id: 'r-2' })
  t.equal(res.result.content[0].text, 'after')
  const spans = o.named('tools/call echo')
  t.equal(spans.length, 1, 'one span: the call made after the SDK was registered')
  t.equal(spans[0].attributes['jsonrpc.request.id'], 'r-2')
  t.equal(spans[0].attributes['mcp.session.id'], hashSessionId(s.sid), 'its attributes read from the request as with an SDK from the start')
  trace.disable()
  await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'later' } })
  t.equal(o.named('tools/call echo').length, 1, 'none once the SDK is disabled')
})

t.test('a meter provider alone: operation durations are recorded without a tracer SDK', async t => {
  const o = otel(t)
  const app = await build(t, { telemetry: { meterProvider: o.meterProvider } }, echo)
  const s = await initialize(app)
  await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'hi' } })
  const points = await o.points('mcp.server.operation.duration')
  t.ok(points.some(p => p.attributes['gen_ai.tool.name'] === 'echo'), 'the call\'s duration is recorded')
  t.same(o.spans(), [], 'and no span')
})
