/**
 * One GET stream per session across instances: two apps sharing a store and a bus stand for two
 * instances behind a load balancer. A GET stream opened on B makes A's step down (with `retry`),
 * and a notification for the session then arrives once, on B.
 */
import t from 'tap'
import Fastify from 'fastify'
import mcp, { MemoryBus, MemorySessionStore } from '../../../lib/index.js'
import { initialize, listen, post } from '../../helpers/handshake-app.js'
import { SseReader } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'

t.test('a GET stream opened on another instance takes over; each notification reaches one stream', async (t) => {
  const store = new MemorySessionStore()
  const bus = new MemoryBus()
  t.teardown(async () => { await store.close() })
  const apps = await Promise.all([0, 1].map(async () => {
    const app = Fastify({ logger: false })
    t.teardown(() => app.close())
    await app.register(mcp, { sessions: { store }, bus, keepAliveIntervalMs: 0 })
    app.mcp.tool({ name: 'echo', description: 'echo' }, async () => 'x')
    return app
  }))
  const [a, b] = await Promise.all(apps.map(async app => await listen(t, app)))
  const s = await a.initialize()
  const onA = a.track(new SseReader(await a.get(s)))
  await onA.waitFor(() => true)
  const onB = b.track(new SseReader(await b.get(s)))
  await onB.waitFor(() => true)
  await onA.waitClosed()
  t.ok(onA.events.some(e => e.retry !== undefined), "A's stream was told to retry")
  await apps[0].mcp.notify(s.sid, 'notifications/message', { level: 'info', data: 'once' })
  const got = await onB.waitFor(e => e.json?.method === 'notifications/message')
  t.equal(got.json?.params.data, 'once')
  t.notOk(onA.messages.some(m => m.method === 'notifications/message'), 'not on the stream that stepped down')
})

t.test('a cancel sent to another instance reaches a request that runs for a while', async (t) => {
  // Short requests never subscribe to their session's channel (two bus round trips each); one that
  // is still running after a moment does, so that a cancel published elsewhere reaches it.
  const store = new MemorySessionStore()
  const bus = new MemoryBus()
  t.teardown(async () => { await store.close() })
  let aborted = false
  const apps = await Promise.all([0, 1].map(async () => {
    const app = Fastify({ logger: false })
    t.teardown(() => app.close())
    await app.register(mcp, { sessions: { store }, bus, keepAliveIntervalMs: 0 })
    app.mcp.tool({ name: 'wait', description: 'Waits to be cancelled (3 s at most)' }, async (_args, ctx) => {
      await sleep(3000, ctx.signal).catch(() => { aborted = true })
      return 'done'
    })
    return app
  }))
  const s = await initialize(apps[0])
  const running = post(apps[0], { jsonrpc: '2.0', id: 'long-1', method: 'tools/call', params: { name: 'wait', arguments: {} } }, { session: s })
  await sleep(100)
  const cancel = await post(apps[1], { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'long-1' } }, { session: s })
  t.equal(cancel.statusCode, 202)
  const res = await running
  t.ok(aborted, 'the handler on A saw the cancel sent to B')
  t.equal(res.statusCode, 202, 'and the cancelled request got no response')
})
