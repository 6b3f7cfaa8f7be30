import t from 'tap'
import type { McpDecorator } from '../../../lib/index.js'
import { build, listen } from '../../helpers/handshake-app.js'
import { SseReader } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'
import { headers } from '../../helpers/wire.js'

/** A tool that logs, closes its SSE connection, waits for `release()`, logs again and answers. */
function setup (gate: { wait: () => Promise<void> }) {
  return (m: McpDecorator): void => {
    m.tool({ name: 'reconnect', description: 'Closes the SSE stream mid-call' }, async (_a, ctx) => {
      await ctx.log('info', 'before')
      ctx.closeSSEStream(100)
      await gate.wait()
      await ctx.log('info', 'after')
      return 'reconnected'
    })
    m.tool({ name: 'noop', description: 'noop' }, async () => 'x')
  }
}

function makeGate (): { wait: () => Promise<void>, release: () => void } {
  let release!: () => void
  let p = new Promise<void>(resolve => { release = resolve })
  return {
    wait: async () => { await p },
    release: () => { release(); p = new Promise<void>(resolve => { release = resolve }) }
  }
}

t.test('closeSSEStream mid-call, then GET + Last-Event-ID replays the rest and the result', async (t) => {
  const gate = makeGate()
  const app = await build(t, { keepAliveIntervalMs: 0 }, setup(gate))
  const live = await listen(t, app)
  const s = await live.initialize()

  // 1. The stream is still live when the client comes back.
  const r1 = live.track(new SseReader(await live.post({ jsonrpc: '2.0', id: 'r1', method: 'tools/call', params: { name: 'reconnect' } }, s)))
  await r1.waitClosed()
  const [priming, before, retry] = r1.events
  t.equal(priming.data, '', 'priming event')
  t.match(priming.id, /^[A-Za-z0-9-]+_\d+$/)
  t.equal(before.json?.params.data, 'before')
  t.ok(before.id !== undefined && before.id !== priming.id)
  t.same(retry, { retry: 100 }, 'retry sent before the server closed the connection')
  t.equal(r1.events.length, 3)

  const g1 = await live.get(s, { 'last-event-id': priming.id! })
  t.equal(g1.status, 200)
  t.match(g1.headers.get('content-type'), /^text\/event-stream/)
  const resumed = live.track(new SseReader(g1))
  const replayed = await resumed.waitFor(e => e.json !== undefined)
  t.equal(replayed.id, before.id, 'the events after Last-Event-ID are replayed')
  gate.release()
  const result = await resumed.waitFor(e => e.json?.id === 'r1')
  t.same(result.json, { jsonrpc: '2.0', id: 'r1', result: { content: [{ type: 'text', text: 'reconnected' }] } })
  await resumed.waitClosed()
  t.same(resumed.messages.map(m => m.method ?? m.id), ['notifications/message', 'notifications/message', 'r1'])
  t.equal(resumed.messages[1].params.data, 'after')
  t.ok(resumed.events.every(e => e.id?.startsWith(priming.id!.split('_')[0] + '_')), 'same stream ids')

  // 2. The request finished before the client came back: the log replays it and the GET ends.
  const r2 = live.track(new SseReader(await live.post({ jsonrpc: '2.0', id: 'r2', method: 'tools/call', params: { name: 'reconnect' } }, s)))
  await r2.waitClosed()
  const before2 = r2.events[1]
  gate.release()
  await sleep(50)
  const g2 = live.track(new SseReader(await live.get(s, { 'last-event-id': before2.id! })))
  await g2.waitClosed()
  t.same(g2.messages.map(m => m.method ?? m.id), ['notifications/message', 'r2'], 'only the events after that id')
  t.equal(g2.messages[0].params.data, 'after')

  // A replay GET is not the standalone stream: a standalone GET is still allowed.
  const standalone = await live.get(s)
  t.equal(standalone.status, 200)
  live.track(new SseReader(standalone))
})

t.test('a forged or garbage Last-Event-ID replays nothing', async (t) => {
  const gate = makeGate()
  const app = await build(t, { keepAliveIntervalMs: 0 }, setup(gate))
  const live = await listen(t, app)
  const a = await live.initialize()
  const b = await live.initialize()

  const ra = live.track(new SseReader(await live.post({ jsonrpc: '2.0', id: 'ra', method: 'tools/call', params: { name: 'reconnect' } }, a)))
  await ra.waitClosed()
  const aPriming = ra.events[0].id!
  const aStream = aPriming.split('_')[0]
  gate.release()
  await sleep(50)

  for (const forged of [aPriming, `${aStream}_1`, `${aStream}_999`, 'garbage', '../../etc/passwd', '']) {
    const res = await live.get(b, { 'last-event-id': forged })
    t.equal(res.status, 200, `Last-Event-ID ${JSON.stringify(forged)}: a fresh standalone stream`)
    const r = live.track(new SseReader(res))
    const first = await r.waitFor(() => true)
    t.equal(first.data, '', 'it starts with its own priming event')
    t.notOk(first.id?.startsWith(aStream), 'not session A\'s stream')
    // A broadcast marks "everything sent so far".
    app.mcp.tool({ name: `marker_${Math.random().toString(36).slice(2)}`, description: 'marker' }, async () => 'x')
    await r.waitFor(e => e.json?.method === 'notifications/tools/list_changed')
    t.same(r.messages.map(m => m.method), ['notifications/tools/list_changed'], 'nothing of A was replayed')
    await r.cancel()
    await sleep(20)
  }

  // A's own id still works for A.
  const own = live.track(new SseReader(await live.get(a, { 'last-event-id': aPriming })))
  await own.waitClosed()
  t.same(own.messages.map(m => m.method ?? m.id), ['notifications/message', 'notifications/message', 'ra'])
})

t.test('a client disconnect is not cancellation; the client resumes the POST stream', async (t) => {
  let signal: AbortSignal | null = null
  const gate = makeGate()
  const app = await build(t, { keepAliveIntervalMs: 0 }, (m) => {
    m.tool({ name: 'long', description: 'Long' }, async (_a, ctx) => {
      signal = ctx.signal
      await ctx.progress({ progress: 1 })
      await gate.wait()
      await ctx.progress({ progress: 2 })
      return 'survived'
    })
  })
  const live = await listen(t, app)
  const s = await live.initialize()
  const controller = new AbortController()
  const res = await fetch(live.url, {
    method: 'POST',
    signal: controller.signal,
    headers: headers(s),
    body: JSON.stringify({ jsonrpc: '2.0', id: 'L', method: 'tools/call', params: { name: 'long', _meta: { progressToken: 'p' } } })
  })
  const r = new SseReader(res)
  const p1 = await r.waitFor(e => e.json?.method === 'notifications/progress')
  controller.abort()
  await sleep(50)
  t.equal((signal as AbortSignal | null)?.aborted, false, 'the handler was not cancelled by the disconnect')
  gate.release()
  await sleep(50)
  const resumed = live.track(new SseReader(await live.get(s, { 'last-event-id': p1.id! })))
  await resumed.waitClosed()
  t.same(resumed.messages.map(m => m.method ?? m.id), ['notifications/progress', 'L'])
  t.equal(resumed.messages[0].params.progress, 2)
  t.equal(resumed.messages[1].result.content[0].text, 'survived')
})

t.test('resuming the standalone GET stream continues it', async (t) => {
  const app = await build(t, { keepAliveIntervalMs: 0 })
  const live = await listen(t, app)
  const s = await live.initialize()
  const r = live.track(new SseReader(await live.get(s)))
  await r.waitFor(() => true)
  app.mcp.tool({ name: 'm1', description: 'm' }, async () => 'x')
  const ev = await r.waitFor(e => e.json !== undefined)
  await r.cancel()
  await sleep(50)
  const r2 = live.track(new SseReader(await live.get(s, { 'last-event-id': ev.id! })))
  app.mcp.tool({ name: 'm2', description: 'm' }, async () => 'x')
  await r2.waitFor(e => e.json?.method === 'notifications/tools/list_changed', 10_000)
  t.equal(r2.closed, false, 'the resumed GET stream stays open')
})

t.test('resuming after DELETE → 404', async (t) => {
  const gate = makeGate()
  const app = await build(t, { keepAliveIntervalMs: 0 }, setup(gate))
  const live = await listen(t, app)
  const s = await live.initialize()
  const r = live.track(new SseReader(await live.post({ jsonrpc: '2.0', id: 'x', method: 'tools/call', params: { name: 'reconnect' } }, s)))
  await r.waitClosed()
  const del = await fetch(live.url, { method: 'DELETE', headers: { 'mcp-session-id': s.sid } })
  t.equal(del.status, 200)
  gate.release()
  const res = await live.get(s, { 'last-event-id': r.events[0].id! })
  t.equal(res.status, 404)
  await res.body?.cancel()
})
