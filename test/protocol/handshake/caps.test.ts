/** Unbounded growth is a bug: per-session caps answer a clear 429 and keep the session usable. */
import t from 'tap'
import { build, call, initialize, listen, request } from '../../helpers/handshake-app.js'
import { SseReader } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'

t.test('maxStreamsPerSession: a request past the cap gets 429 and a JSON-RPC error under its id', async (t) => {
  const app = await build(t, { keepAliveIntervalMs: 0, maxStreamsPerSession: 1 })
  const live = await listen(t, app)
  const s = await live.initialize()
  const r = live.track(new SseReader(await live.get(s)))
  await r.waitFor(() => true)
  const refused = await live.post({ jsonrpc: '2.0', id: 'over', method: 'tools/list' }, s)
  t.equal(refused.status, 429)
  const body = await refused.json() as { id: unknown, error: { code: number, message: string } }
  t.equal(body.id, 'over')
  t.equal(body.error.code, -32000)
  t.match(body.error.message, /Too many/)
  await r.cancel()
  // Once the stream is gone, the session works again.
  for (let i = 0; i < 50; i++) {
    const res = await live.post({ jsonrpc: '2.0', id: 'again', method: 'tools/list' }, s)
    if (res.status === 200) { t.pass('served after the stream closed'); await res.text(); return }
    await res.text()
    await sleep(20)
  }
  t.fail('still refused after the stream closed')
})

t.test('maxPendingClientRequests caps requests to the client', async (t) => {
  const app = await build(t, { maxPendingClientRequests: 1, clientRequestTimeoutMs: 200 }, (m) => {
    m.tool({ name: 'twice', description: 'asks twice at once' }, async (_a, ctx) => {
      const [a, b] = await Promise.allSettled([
        ctx.elicit('a', { message: 'a?', requestedSchema: { type: 'object', properties: {} } }),
        ctx.elicit('b', { message: 'b?', requestedSchema: { type: 'object', properties: {} } })
      ])
      return `${a.status}/${b.status}:${b.status === 'rejected' ? (b.reason as Error).message : ''}`
    })
  })
  // The client-request timer is unref()ed; keep the test process alive while it runs.
  const keep = setInterval(() => {}, 1000)
  t.teardown(() => clearInterval(keep))
  const s = await initialize(app, { capabilities: { elicitation: {} } })
  const res = await request(app, s, 'tools/call', { name: 'twice' })
  t.match(res.body, /rejected\/rejected:.*too many pending requests/)
  const ok = await call(app, s, 'tools/list')
  t.ok(Array.isArray(ok.result.tools), 'the session still works')
})
