/**
 * The drain on `app.close()` (lib/protocol/drain.ts), in process over real HTTP (`app.inject` is
 * refused once an app closes): requests running finish and answer; new ones get 503 with
 * `Retry-After`, `Connection: close` and a JSON-RPC error, on both wires; GET and listen streams end
 * at once with `retry`; at the deadline what is left is answered with an error (JSON or as the last
 * event of its SSE response) and logged once; a handler waiting for the client's answer gets
 * FST_ERR_MCP_SERVER_CLOSING; one that ignores its signal does not keep the app from closing;
 * `app.mcp.status()` shows the drain.
 */
import { Writable } from 'node:stream'
import Fastify, { type FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import mcp, { MemorySessionLock, type McpDecorator, type McpPluginOptions } from '../../lib/index.js'
import { modernSend, readReply, send, serve, type Served } from '../helpers/http-client.js'
import { SseReader } from '../helpers/sse.js'
import { until } from '../helpers/time.js'
import { settleWithin } from '../../lib/util/settle.js'
import { headers, initializeBody, rpc, SSE_ACCEPT, type Session } from '../helpers/wire.js'

const STOPPED = 'Server is shutting down: the request was stopped before it finished.'
const REFUSED = 'Server is shutting down; retry on another instance.'

interface Drained {
  app: FastifyInstance
  live: Served
  /** Parsed log lines at warn level and above. */
  logs: Array<Record<string, any>>
  /** Opens the gate every `wait` call waits at. */
  open: () => void
  /** Errors the `ask` handler's elicit rejected with. */
  elicitErrors: unknown[]
}

/**
 * A listening app (`return503OnClosing: false`, as docs/many-instances.md asks) with tools: `wait` (waits for
 * the test's gate, honouring its signal), `stubborn` (never finishes, ignores its signal),
 * `count` (progress, then waits for its signal), `ask` (elicits).
 */
async function start (opts: McpPluginOptions = {}): Promise<Drained> {
  const logs: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, done) { logs.push(JSON.parse(String(chunk))); done() } })
  const app = Fastify({ logger: { level: 'warn', stream }, return503OnClosing: false })
  t.teardown(async () => { await app.close() })
  await app.register(mcp, { retryIntervalMs: 2500, ...opts })
  let open = (): void => {}
  const gate = new Promise<void>(resolve => { open = resolve })
  const elicitErrors: unknown[] = []
  tools(app.mcp, gate, elicitErrors)
  const live = await serve(t, app)
  return { app, live, logs, open, elicitErrors }
}

/** Rejects with the signal's reason once it aborts (no timer: nothing keeps the test process alive). */
async function aborted (signal: AbortSignal): Promise<never> {
  return await new Promise<never>((_resolve, reject) => {
    if (signal.aborted) reject(signal.reason)
    else signal.addEventListener('abort', () => { reject(signal.reason) }, { once: true })
  })
}

function tools (m: McpDecorator, gate: Promise<void>, elicitErrors: unknown[]): void {
  m.tool({ name: 'wait', description: 'waits for the test' }, async (_a, ctx) => {
    await Promise.race([gate, aborted(ctx.signal)])
    return 'finished'
  })
  m.tool({ name: 'stubborn', description: 'never finishes' }, async () => await new Promise<string>(() => {}))
  m.tool({ name: 'count', description: 'progress, then waits' }, async (_a, ctx) => {
    await ctx.progress({ progress: 1, total: 2 })
    await aborted(ctx.signal)
    return 'counted'
  })
  m.tool({ name: 'ask', description: 'elicits' }, async (_a, ctx) => {
    try {
      await ctx.elicit('name', { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
    } catch (err) {
      elicitErrors.push(err)
      throw err
    }
    return 'answered'
  })
}

async function init (url: string, capabilities: Record<string, unknown> = {}): Promise<Session> {
  const res = await send(url, initializeBody({ capabilities }))
  const reply = await readReply(res)
  const session = { sid: res.headers.get('mcp-session-id') as string, version: reply.last!.result.protocolVersion as string }
  await readReply(await send(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, session))
  return session
}

const callBody = (id: number, name: string): Record<string, unknown> => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: {} } })

/** Starts `app.close()` and resolves once the plugin drains (its status says so), with the close (wrapped: not awaited here). */
async function closing (d: Drained): Promise<{ closed: Promise<unknown> }> {
  const closed = d.app.close()
  await until(() => d.app.mcp.status().draining, { what: 'the drain to start' })
  return { closed }
}

async function refusedLikeThis (t: Test, res: Response, id: number | string | null): Promise<void> {
  t.equal(res.status, 503)
  t.equal(res.headers.get('retry-after'), '3', 'Retry-After: retryIntervalMs in whole seconds')
  t.equal(res.headers.get('connection'), 'close')
  t.same(await res.json(), { jsonrpc: '2.0', id, error: { code: -32000, message: REFUSED } })
}

t.test('a request running finishes and answers; new ones get 503 + Retry-After + Connection: close on both wires', async t => {
  const d = await start({ drainTimeoutMs: 60_000 })
  const s = await init(d.live.url)
  const running = send(d.live.url, callBody(1, 'wait'), s)
  await until(() => d.app.mcp.status().inflightRequests === 1, { what: 'the call to run' })
  const { closed } = await closing(d)
  t.match(d.app.mcp.status(), { draining: true, inflightRequests: 1 }, 'status: draining, one request in flight')

  await refusedLikeThis(t, await send(d.live.url, callBody(2, 'wait'), s), 2)
  await refusedLikeThis(t, await send(d.live.url, initializeBody({ id: 'i' })), 'i')
  await refusedLikeThis(t, await modernSend(d.live.url, rpc('tools/list', {}, { id: 3 })), 3)
  await refusedLikeThis(t, await fetch(d.live.url, { headers: { accept: SSE_ACCEPT, 'mcp-session-id': s.sid, 'mcp-protocol-version': s.version } }), null)
  await refusedLikeThis(t, await fetch(d.live.url, { method: 'DELETE', headers: { 'mcp-session-id': s.sid, 'mcp-protocol-version': s.version } }), null)
  // What serves requests already running (a cancel, a client's answer) is still taken.
  const cancel = await send(d.live.url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 999 } }, s)
  t.equal(cancel.status, 202, 'a notification is still accepted')
  await cancel.arrayBuffer()

  d.open()
  const done = await running
  t.equal(done.headers.get('connection'), 'close', 'its answer closes the connection (a load balancer sends no more on it)')
  const answer = await readReply(done)
  t.equal(answer.status, 200, 'the running call answers normally')
  t.same(answer.last?.result?.content, [{ type: 'text', text: 'finished' }])
  await closed
  t.same(d.logs.filter(l => /drain deadline/.test(l.msg)), [], 'no deadline: nothing logged')
})

t.test('GET and listen streams end at once with retry', async t => {
  const d = await start({ drainTimeoutMs: 60_000 })
  const s = await init(d.live.url)
  const get = d.live.track(new SseReader(await fetch(d.live.url, { headers: { accept: SSE_ACCEPT, 'mcp-session-id': s.sid, 'mcp-protocol-version': s.version } })))
  const listen = d.live.track(new SseReader(await modernSend(d.live.url, rpc('subscriptions/listen', { notifications: { toolsListChanged: true } }, { id: 'L' }))))
  await listen.waitForMessage(m => m.method === 'notifications/subscriptions/acknowledged')
  await until(() => d.app.mcp.status().getStreams === 1, { what: 'the GET stream to be held' })
  // A running request keeps the drain open: the streams must end before it does.
  const running = send(d.live.url, callBody(1, 'wait'), s)
  await until(() => d.app.mcp.status().inflightRequests === 1, { what: 'the call to run' })
  const { closed } = await closing(d)
  await get.waitClosed()
  await listen.waitClosed()
  t.ok(get.events.some(e => e.retry === 2500), 'the GET stream ended with retry')
  t.ok(listen.events.some(e => e.retry === 2500), 'the listen stream ended with retry')
  t.ok(listen.messages.some(m => m.id === 'L' && m.result?.resultType === 'complete'), 'the listen stream ended with its result')
  t.equal(d.app.mcp.status().inflightRequests, 1, 'while the request still runs')
  d.open()
  t.equal((await readReply(await running)).status, 200)
  await closed
})

t.test('at the deadline: a JSON answer and an SSE answer end with the error, one log line', async t => {
  // Two calls running at once on one session: without the lock (with it the second would queue).
  const d = await start({ drainTimeoutMs: 300, sessions: { lock: false } })
  const s = await init(d.live.url)
  const json = send(d.live.url, callBody(1, 'wait'), s)
  const sse = d.live.track(new SseReader(await send(d.live.url, { ...callBody(2, 'count'), params: { name: 'count', arguments: {}, _meta: { progressToken: 'p' } } }, s)))
  await sse.waitForMessage(m => m.method === 'notifications/progress')
  await until(() => d.app.mcp.status().inflightRequests === 2, { what: 'both calls to run' })
  await d.app.close()
  const j = await json
  t.equal(j.status, 503)
  t.equal(j.headers.get('retry-after'), '3')
  t.same(await j.json(), { jsonrpc: '2.0', id: 1, error: { code: -32000, message: STOPPED } })
  await sse.waitClosed()
  t.same(sse.messages.at(-1), { jsonrpc: '2.0', id: 2, error: { code: -32000, message: STOPPED } }, 'the SSE response ends with the error response')
  const lines = d.logs.filter(l => /drain/.test(l.msg))
  t.equal(lines.length, 1, 'one log line (at warn)')
  t.match(lines[0], { level: 40, requests: 2, drainTimeoutMs: 300 })
})

t.test('at the deadline: a request still queued for its session\'s lock gets the error too', async t => {
  const d = await start({ drainTimeoutMs: 200, sessions: { lock: new MemorySessionLock() } })
  const s = await init(d.live.url)
  const holder = send(d.live.url, callBody(1, 'wait'), s)
  await until(() => d.app.mcp.status().inflightRequests === 1, { what: 'the first call to run' })
  const queued = send(d.live.url, callBody(2, 'wait'), s)
  await until(() => d.app.mcp.status().lockWaiters === 1, { what: 'the second call to queue' })
  await d.app.close()
  for (const [res, id] of [[await holder, 1], [await queued, 2]] as const) {
    t.equal(res.status, 503)
    t.same(await res.json(), { jsonrpc: '2.0', id, error: { code: -32000, message: STOPPED } })
  }
  t.same(d.logs.filter(l => /ignored their abort signal/.test(l.msg)), [], 'answered by the wire, not forced past the grace')
})

t.test('the 2026-07-28 wire: a running call finishes during the drain, and one left at the deadline gets the error', async t => {
  const d = await start({ drainTimeoutMs: 60_000 })
  const finishing = modernSend(d.live.url, rpc('tools/call', { name: 'wait', arguments: {} }, { id: 'm1' }))
  await until(() => d.app.mcp.status().inflightRequests === 1, { what: 'the call to run' })
  const { closed } = await closing(d)
  d.open()
  const ok = await readReply(await finishing)
  t.equal(ok.status, 200)
  t.equal(ok.last?.result?.resultType, 'complete')
  await closed

  const e = await start({ drainTimeoutMs: 100 })
  const stopped = modernSend(e.live.url, rpc('tools/call', { name: 'count', arguments: {} }, { id: 'm2' }))
  await until(() => e.app.mcp.status().inflightRequests === 1, { what: 'the call to run' })
  await e.app.close()
  const r = await readReply(await stopped)
  t.same(r.last, { jsonrpc: '2.0', id: 'm2', error: { code: -32000, message: STOPPED } })
  t.same(e.logs.filter(l => /ignored their abort signal/.test(l.msg)), [], 'answered by the wire, not forced past the grace')
})

t.test('a handler waiting for the client\'s answer at the deadline gets FST_ERR_MCP_SERVER_CLOSING; its client the error', async t => {
  const d = await start({ drainTimeoutMs: 200 })
  const s = await init(d.live.url, { elicitation: {} })
  const r = d.live.track(new SseReader(await send(d.live.url, callBody(1, 'ask'), s)))
  await r.waitForMessage(m => m.method === 'elicitation/create')
  await d.app.close()
  await r.waitClosed()
  t.same(r.messages.at(-1), { jsonrpc: '2.0', id: 1, error: { code: -32000, message: STOPPED } })
  t.same(d.logs.filter(l => /ignored their abort signal/.test(l.msg)), [], 'the handler stopped: its client was answered by the wire')
  t.equal(d.elicitErrors.length, 1)
  t.match(d.elicitErrors[0], { code: 'FST_ERR_MCP_SERVER_CLOSING', statusCode: 503 })
})

t.test('a handler that ignores its signal: its client is answered, and the app closes without it', async t => {
  const d = await start({ drainTimeoutMs: 100 })
  const s = await init(d.live.url)
  const running = send(d.live.url, callBody(7, 'stubborn'), s)
  await until(() => d.app.mcp.status().inflightRequests === 1, { what: 'the call to run' })
  // Bounded: without the drain's deadline this would wait for the handler forever (the file's timeout).
  if (!t.ok(await settleWithin(d.app.close(), 10_000), 'app.close() resolves although the handler never ends (drainTimeoutMs 100 ms + the grace)')) return
  if (!t.ok(await settleWithin(running, 5_000), 'its client is answered once the app closed')) return
  const res = await running
  t.equal(res.status, 503)
  t.same(await res.json(), { jsonrpc: '2.0', id: 7, error: { code: -32000, message: STOPPED } })
  t.match(d.app.mcp.status(), { draining: true, inflightRequests: 0 })
  t.match(d.logs.filter(l => /ignored their abort signal/.test(l.msg)), [{ level: 40, requests: 1 }], 'logged')
})

t.test('drainTimeoutMs is validated; Fastify\'s own return503OnClosing is warned about', async t => {
  for (const bad of [-1, 1.5, '10', 3_600_001]) {
    const app = Fastify({ logger: false })
    await t.rejects(async () => { await app.register(mcp, { drainTimeoutMs: bad as never }).ready() }, { code: 'FST_ERR_MCP_INVALID_OPTION', message: /drainTimeoutMs/ })
    await app.close()
  }
  const warned = async (fastifyOpts: Record<string, unknown>, running: boolean): Promise<boolean> => {
    const lines: string[] = []
    const stream = new Writable({ write (chunk, _enc, done) { lines.push(String(chunk)); done() } })
    const app = Fastify({ logger: { level: 'warn', stream }, ...fastifyOpts })
    await app.register(mcp, { requestState: { secret: 'a-secret-of-sixteen-chars' }, drainTimeoutMs: 2000 })
    let started = (): void => {}
    const inside = new Promise<void>(resolve => { started = resolve })
    app.mcp.tool({ name: 'wait', description: 'Waits a little' }, async () => { started(); await new Promise(resolve => setTimeout(resolve, 200)); return 'done' })
    await app.ready()
    let call: Promise<unknown> = Promise.resolve()
    if (running) {
      call = app.inject({
        method: 'POST',
        url: '/mcp',
        headers: headers(null, { 'mcp-protocol-version': '2025-11-25' }),
        payload: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'wait', arguments: {} } }
      })
      await inside
    }
    await app.close()
    await call
    return lines.some(l => l.includes('return503OnClosing'))
  }
  t.notOk(await warned({}, false), 'not when nothing runs as the app closes (it does not matter then)')
  t.ok(await warned({}, true), 'warned with the default when requests run as the app closes')
  t.notOk(await warned({ return503OnClosing: false }, true), 'not with return503OnClosing: false')
})
