import t from 'tap'
import { Type } from '@sinclair/typebox'
import { MemorySessionStore } from '../../../lib/sessions/memory-store.js'
import { build, call, initialize, request } from '../../helpers/handshake-app.js'
import { sleep } from '../../helpers/time.js'

t.test('session data persists across requests; request.mcpSession is the handle', async (t) => {
  const seen: Array<{ same: boolean, id: string | undefined }> = []
  const app = await build(t, {}, (m) => {
    m.tool({ name: 'count', description: 'Counts', input: Type.Object({ by: Type.Integer() }) }, async ({ by }, ctx) => {
      seen.push({ same: ctx.request.mcpSession === ctx.session, id: ctx.request.mcpSession?.id })
      const n = (ctx.session?.get<number>('n') ?? 0) + by
      ctx.session?.set('n', n)
      return String(n)
    })
  })
  const a = await initialize(app)
  const b = await initialize(app)
  t.equal((await call(app, a, 'tools/call', { name: 'count', arguments: { by: 2 } })).result.content[0].text, '2')
  t.equal((await call(app, a, 'tools/call', { name: 'count', arguments: { by: 3 } })).result.content[0].text, '5')
  t.equal((await call(app, b, 'tools/call', { name: 'count', arguments: { by: 1 } })).result.content[0].text, '1', 'sessions are separate')
  t.same(seen.map(s => s.same), [true, true, true], 'request.mcpSession === ctx.session')
  t.same(seen.map(s => s.id), [a.sid, a.sid, b.sid])
})

t.test('session ttl expiry → 404', async (t) => {
  const store = new MemorySessionStore({ ttl: 300, sweepInterval: 0 })
  t.teardown(() => store.close())
  const app = await build(t, { sessions: { store, gcProbability: 0 } })
  const s = await initialize(app)
  // Activity refreshes the idle ttl.
  for (let i = 0; i < 3; i++) {
    await sleep(120)
    t.equal((await request(app, s, 'ping')).statusCode, 200, `alive after ${(i + 1) * 120} ms of activity`)
  }
  await sleep(450)
  const res = await request(app, s, 'ping', undefined, { id: 'late' })
  t.equal(res.statusCode, 404, 'expired → 404')
  t.equal(res.json().id, 'late')
  const get = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': s.sid } })
  t.equal(get.statusCode, 404)
  const del = await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid } })
  t.equal(del.statusCode, 404)
  t.equal(store.size, 0, 'the expired session was dropped')
})

t.test('gc runs from the request path and removes expired sessions', async (t) => {
  const store = new MemorySessionStore({ ttl: 300, sweepInterval: 0 })
  t.teardown(() => store.close())
  const app = await build(t, { sessions: { store, gcProbability: 1, gcDivisor: 1 } })
  const old = await initialize(app)
  await sleep(400)
  t.equal(store.size, 1, 'the expired session is still held (nothing touched it)')
  const fresh = await initialize(app) // its notifications/initialized runs gc
  await sleep(10)
  t.equal(store.size, 1, 'gc removed the expired one')
  t.equal(await store.exists(fresh.sid), true)
  t.equal(await store.exists(old.sid), false)
})

t.test('a user store outlives the app; the plugin does not close it', async (t) => {
  let closed = false
  const store = new MemorySessionStore({ sweepInterval: 0 })
  const close = store.close.bind(store)
  store.close = async () => { closed = true; await close() }
  const app = await build(t, { sessions: { store } })
  await initialize(app)
  await app.close()
  t.equal(closed, false)
  t.equal(store.size, 1)
})
