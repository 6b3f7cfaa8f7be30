/**
 * The telemetry of one POST in a tight loop, under a registered SDK (async-hooks context manager,
 * AlwaysOn sampling, `NoopSpanProcessor`, a meter provider without reader), against what no
 * plugin could do with less: `none` (an async call under the context manager), `bare` (start a
 * span, set the attributes the plugin sets on a `tools/call` of a session, both histogram values,
 * end it: the same SDK calls as `plugin`, nothing around them), `bareCtx` (the same with the span
 * entered as the active context), `plugin` (the calls handshake/wire.ts and the engine make for a lone
 * request: `post`, the context entered, `opened`, `version`, `answered`, `closed`, `end`). Medians of 7
 * alternating rounds, CPU ns per iteration of this process; the differences are what matter
 * (`npm run bench -- --scenarios tracing` gives the cost per HTTP request, noisier). `plugin` −
 * `bareCtx` is the plugin's own share; `bareCtx` − `none` the SDK's, which no plugin can cut.
 *
 *   npx tsx bench/telemetry-micro.ts            (N=200000 iterations per round)
 *   FN=plugin npx tsx bench/telemetry-micro.ts  (one of them, e.g. under --cpu-prof)
 *
 * Instructions (load-insensitive) per iteration: run one FN under callgrind with two N and divide
 * the difference of the totals by twice the difference of N (each run times N twice), e.g.
 *   FN=plugin N=20000 valgrind --tool=callgrind --smc-check=all-non-file node --import tsx bench/telemetry-micro.ts
 */
import { context, metrics, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { BasicTracerProvider, NoopSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { MeterProvider } from '@opentelemetry/sdk-metrics'
import { Telemetry, resolveTelemetry } from '../lib/telemetry/index.js'
import { parseBody } from '../lib/jsonrpc/messages.js'

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new NoopSpanProcessor()] }))
metrics.setGlobalMeterProvider(new MeterProvider())
const known = { method: () => true, tool: () => true, prompt: () => true }
const tel = new Telemetry(resolveTelemetry(true, () => { throw new Error() }), '1.0.0', known, false)
const body = parseBody(JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' } } }))
if (!body.ok) throw new Error('body')
const messages = body.messages
const response = { jsonrpc: '2.0', id: 7, result: { content: [{ type: 'text', text: 'hi' }] } }
const sid = '0123456789abcdef0123456789abcdef'
const noop = async (): Promise<void> => {}

const msg = (messages[0] as { message: object }).message
// The calls in the order the wire makes them; one async frame entered with the context, as in
// bareCtx (a lone request's handler runs in the POST's context: the wire calls `run` only in a batch).
async function plugin (): Promise<void> {
  const p = tel.post('2025', sid, '2025-06-18', messages)
  p.opened(0.05, true)
  p.version('2025-06-18')
  await (p.context === null ? noop() : context.with(p.context, noop))
  p.answered(msg, response, 200)
  p.closed(0.02)
  p.end()
}
const tracer = trace.getTracer('x')
const meter = metrics.getMeter('x')
const lockWait = meter.createHistogram('w')
const h = meter.createHistogram('h')
/** The SDK calls the conventions need for this request, with nothing around them: what `plugin` pays at least. */
function startSpan (): ReturnType<typeof tracer.startSpan> {
  const span = tracer.startSpan('tools/call echo', { kind: 1 })
  span.setAttribute('mcp.method.name', 'tools/call')
  span.setAttribute('network.transport', 'tcp')
  span.setAttribute('network.protocol.name', 'http')
  span.setAttribute('fastify_mcp.era', '2025')
  span.setAttribute('jsonrpc.request.id', '7')
  span.setAttribute('mcp.session.id', sid)
  span.setAttribute('mcp.protocol.version', '2025-06-18')
  span.setAttribute('gen_ai.tool.name', 'echo')
  span.setAttribute('gen_ai.operation.name', 'execute_tool')
  return span
}
function endSpan (span: ReturnType<typeof tracer.startSpan>): void {
  lockWait.record(0.00005)
  span.setAttribute('fastify_mcp.lock.wait_ms', 0.05)
  span.setAttribute('fastify_mcp.store.save_ms', 0.02)
  span.setAttribute('fastify_mcp.lock.hold_ms', 0.1)
  span.end()
  h.record(0.001, { 'mcp.method.name': 'tools/call', 'network.transport': 'tcp', 'network.protocol.name': 'http', 'mcp.protocol.version': '2025-06-18', 'gen_ai.tool.name': 'echo' })
}
async function bare (): Promise<void> {
  const span = startSpan()
  await noop()
  endSpan(span)
}
async function bareCtx (): Promise<void> {
  const span = startSpan()
  await context.with(trace.setSpan(context.active(), span), noop)
  endSpan(span)
}
async function none (): Promise<void> {
  const run = async (): Promise<void> => { await noop() }
  await run()
}
const N = Number(process.env.N ?? 200000)
async function time (fn: () => Promise<void>): Promise<number> {
  const t0 = process.cpuUsage()
  for (let i = 0; i < N; i++) await fn()
  const c = process.cpuUsage(t0)
  return (c.user + c.system) * 1000 / N
}
const fns = { none, bare, bareCtx, plugin }
if (process.env.FN !== undefined) {
  const f = (fns as Record<string, () => Promise<void>>)[process.env.FN]; await time(f); console.log(`${process.env.FN} ${(await time(f)).toFixed(0)} ns`); process.exit(0)
}
for (const f of Object.values(fns)) await time(f)
const res: Record<string, number[]> = { none: [], bare: [], bareCtx: [], plugin: [] }
for (let r = 0; r < 7; r++) for (const [k, f] of Object.entries(fns)) res[k].push(await time(f))
const med = (x: number[]): number => [...x].sort((a, b) => a - b)[x.length >> 1]
console.log(Object.entries(res).map(([k, v]) => `${k} ${med(v).toFixed(0)} ns`).join(', '))
