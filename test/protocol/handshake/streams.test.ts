import t from 'tap'
import type { McpDecorator } from '../../../lib/index.js'
import { build, call, defaultTools, initialize, listen, request } from '../../helpers/handshake-app.js'
import { parseSse, SseReader, sseMessages } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'

function setup (m: McpDecorator): void {
  defaultTools(m)
  m.tool({ name: 'chatty', description: 'Logs at every level' }, async (_a, ctx) => {
    await ctx.log('debug', 'd')
    await ctx.log('info', { step: 'i' }, 'my-logger')
    await ctx.log('warning', 'w')
    await ctx.log('error', 'e')
    return 'logged'
  })
  m.tool({ name: 'quiet', description: 'Logs only debug' }, async (_a, ctx) => {
    await ctx.log('debug', 'd')
    return 'quiet'
  })
  m.tool({ name: 'progress', description: 'Reports progress' }, async (_a, ctx) => {
    await ctx.progress({ progress: 1, total: 3 })
    await ctx.progress({ progress: 1, total: 3 }) // not increasing: dropped
    await ctx.progress({ progress: 0.5 }) // decreasing: dropped
    await ctx.progress({ progress: 2, total: 3, message: 'two' })
    await ctx.progress({ progress: 3, total: 3 })
    return 'done'
  })
  m.resource({ uri: 'test://watched', name: 'watched', description: 'Watched' }, async (uri) => ({ uri, text: 'now' }))
  m.resource({ uri: 'test://other', name: 'other', description: 'Other' }, async (uri) => ({ uri, text: 'other' }))
}

t.test('logging/setLevel filters ctx.log', async (t) => {
  const app = await build(t, {}, setup)
  const s = await initialize(app)

  const bad = await call(app, s, 'logging/setLevel', { level: 'verbose' }, { id: 'bad' })
  t.equal(bad.error.code, -32602)
  t.equal(bad.id, 'bad')
  t.same(await call(app, s, 'logging/setLevel', { level: 'warning' }, { id: 'lv' }), { jsonrpc: '2.0', id: 'lv', result: {} })

  const res = await request(app, s, 'tools/call', { name: 'chatty' }, { id: 'c' })
  t.match(res.headers['content-type'], /^text\/event-stream/)
  const msgs = sseMessages(res.body)
  t.same(msgs.filter(m => m.method === 'notifications/message').map(m => m.params), [
    { level: 'warning', data: 'w' },
    { level: 'error', data: 'e' }
  ], 'only warning and above')
  t.same(msgs[msgs.length - 1], { jsonrpc: '2.0', id: 'c', result: { content: [{ type: 'text', text: 'logged' }] } })

  const quiet = await request(app, s, 'tools/call', { name: 'quiet' })
  t.match(quiet.headers['content-type'], /^application\/json/, 'a filtered-out message does not open a stream')
  t.equal(quiet.json().result.content[0].text, 'quiet')

  t.same((await call(app, s, 'logging/setLevel', { level: 'debug' })).result, {})
  const all = sseMessages((await request(app, s, 'tools/call', { name: 'chatty' })).body)
  t.same(all.filter(m => m.method === 'notifications/message').map(m => m.params.level), ['debug', 'info', 'warning', 'error'])
  t.same(all.find(m => m.params?.level === 'info')?.params, { level: 'info', data: { step: 'i' }, logger: 'my-logger' })

  // The level belongs to the session.
  const other = await initialize(app)
  t.same((await call(app, other, 'logging/setLevel', { level: 'emergency' })).result, {})
  t.match((await request(app, other, 'tools/call', { name: 'chatty' })).headers['content-type'], /^application\/json/)
  t.match((await request(app, s, 'tools/call', { name: 'chatty' })).headers['content-type'], /^text\/event-stream/)
})

t.test('progress', async (t) => {
  const app = await build(t, {}, setup)
  const s = await initialize(app)
  const without = await request(app, s, 'tools/call', { name: 'progress' }, { id: 1 })
  t.match(without.headers['content-type'], /^application\/json/, 'no progressToken → no notifications, plain JSON')
  t.same(without.json(), { jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: 'done' }] } })

  const res = await request(app, s, 'tools/call', { name: 'progress', _meta: { progressToken: 'tok-1' } }, { id: 2 })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/event-stream/)
  t.equal(res.headers['x-accel-buffering'], 'no')
  const msgs = sseMessages(res.body)
  const progress = msgs.filter(m => m.method === 'notifications/progress').map(m => m.params)
  t.same(progress, [
    { progressToken: 'tok-1', progress: 1, total: 3 },
    { progressToken: 'tok-1', progress: 2, total: 3, message: 'two' },
    { progressToken: 'tok-1', progress: 3, total: 3 }
  ], 'strictly increasing, echoing the token')
  t.same(msgs[msgs.length - 1], { jsonrpc: '2.0', id: 2, result: { content: [{ type: 'text', text: 'done' }] } }, 'the response comes last')

  const numeric = sseMessages((await request(app, s, 'tools/call', { name: 'progress', _meta: { progressToken: 7 } })).body)
  t.equal(numeric[0].params.progressToken, 7, 'numeric tokens are echoed as numbers')

  // A token that is neither a string nor a number, or a _meta that is not an object: -32602 in a
  // JSON response before the handler runs (it would otherwise echo the token into every notification).
  const bad: Array<[string, unknown]> = [['token null', { progressToken: null }], ['token object', { progressToken: { a: 1 } }],
    ['token array', { progressToken: ['x'] }], ['token boolean', { progressToken: false }], ['_meta a string', 'tok'], ['_meta an array', []]]
  for (const [what, m] of bad) {
    const r = await request(app, s, 'tools/call', { name: 'progress', _meta: m }, { id: what })
    t.equal(r.statusCode, 200, what)
    t.match(r.headers['content-type'], /^application\/json/, `${what}: no stream`)
    t.equal(r.json().error?.code, -32602, `${what}: ${r.body}`)
    t.equal(r.json().id, what)
  }
  t.same((await call(app, s, 'tools/call', { name: 'progress' })).result, { content: [{ type: 'text', text: 'done' }] }, 'the session goes on')
})

t.test('SSE priming event on 2025-11-25, none on 2025-06-18', async (t) => {
  const app = await build(t, {}, setup)
  const s25 = await initialize(app, { version: '2025-11-25' })
  const ev25 = parseSse((await request(app, s25, 'tools/call', { name: 'progress', _meta: { progressToken: 1 } })).body)
  t.ok(ev25[0].id !== undefined && ev25[0].id !== '', 'first event has an id')
  t.equal(ev25[0].data, '', 'and empty data')
  t.equal(ev25[0].json, undefined)
  const ids = ev25.map(e => e.id)
  t.ok(ids.every(id => id !== undefined), 'every event carries an id')
  t.equal(new Set(ids).size, ids.length, 'event ids are unique')
  const stream = ids[0]!.split('_')[0]
  t.ok(ids.every(id => id!.startsWith(`${stream}_`)), 'ids encode the stream')

  const ev25b = parseSse((await request(app, s25, 'tools/call', { name: 'progress', _meta: { progressToken: 1 } })).body)
  t.not(ev25b[0].id!.split('_')[0], stream, 'another POST is another stream')

  const s18 = await initialize(app, { version: '2025-06-18' })
  const ev18 = parseSse((await request(app, s18, 'tools/call', { name: 'progress', _meta: { progressToken: 1 } })).body)
  t.equal(ev18.length, 4, '3 progress + response, no priming event')
  t.ok(ev18.every(e => e.id === undefined && e.json !== undefined), 'no ids, no empty events')
})

t.test('GET stream: keep-alive, list_changed, one per session', async (t) => {
  const app = await build(t, { keepAliveIntervalMs: 30 }, setup)
  const live = await listen(t, app)
  const s = await live.initialize()
  const res = await live.get(s)
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^text\/event-stream/)
  t.equal(res.headers.get('x-accel-buffering'), 'no')
  const r = live.track(new SseReader(res))
  const priming = await r.waitFor(() => true)
  t.ok(priming.id !== undefined && priming.data === '', 'priming event first on 2025-11-25')
  await r.waitFor(e => e.comment === 'keep-alive', 10_000)
  t.pass('keep-alive comment received')

  // A second GET stream replaces the first (a client that reconnects before the server noticed
  // the old connection drop must not be locked out); each message still goes to one stream.
  const second = await live.get(s)
  t.equal(second.status, 200, 'a second GET stream takes over')
  const r2 = live.track(new SseReader(second))
  await r.waitClosed()
  t.ok(r.events.some(e => e.retry !== undefined), 'the replaced stream was told to retry')
  app.mcp.tool({ name: 'added_later', description: 'Added after start' }, async () => 'x')
  const changed = await r2.waitFor(e => e.json?.method === 'notifications/tools/list_changed')
  t.same(changed.json, { jsonrpc: '2.0', method: 'notifications/tools/list_changed' })
  app.mcp.prompt({ name: 'p_later', description: 'Added after start' }, async () => [])
  await r2.waitFor(e => e.json?.method === 'notifications/prompts/list_changed')
  app.mcp.removeResource('test://other')
  await r2.waitFor(e => e.json?.method === 'notifications/resources/list_changed')
  t.notOk(r2.messages.some(m => 'id' in m), 'no responses on the GET stream')

  // Request-related messages go on the request's stream only.
  const pr = await live.post({ jsonrpc: '2.0', id: 'pr', method: 'tools/call', params: { name: 'progress', _meta: { progressToken: 'x' } } }, s)
  t.match(await pr.text(), /notifications\/progress/)
  app.mcp.tool({ name: 'marker', description: 'marker' }, async () => 'x')
  await r2.waitFor(e => e.json?.method === 'notifications/tools/list_changed', 3000, r2.events.length)
  t.notOk(r2.messages.some(m => m.method === 'notifications/progress'), 'no progress on the GET stream')

  // After the stream closes, a new GET is allowed.
  await r2.cancel()
  await sleep(50)
  const again = await live.get(s)
  t.equal(again.status, 200, 'a new GET after the first one closed')
  live.track(new SseReader(again))
})

t.test('GET stream on 2025-06-18: no priming event', async (t) => {
  const app = await build(t, { keepAliveIntervalMs: 0 }, setup)
  const live = await listen(t, app)
  const s = await live.initialize('2025-06-18')
  const r = live.track(new SseReader(await live.get(s)))
  const first = await r.waitFor(() => true)
  t.equal(first.comment, 'stream open')
  t.equal(first.id, undefined)
  app.mcp.tool({ name: 'late', description: 'late' }, async () => 'x')
  const changed = await r.waitFor(e => e.json !== undefined)
  t.equal(changed.id, undefined, 'no event ids on 2025-06-18')
  t.equal(changed.json?.method, 'notifications/tools/list_changed')
})

t.test('resources/subscribe → notifications/resources/updated on the subscriber only', async (t) => {
  const app = await build(t, { keepAliveIntervalMs: 0 }, setup)
  const live = await listen(t, app)
  const a = await live.initialize()
  const b = await live.initialize()
  const ra = live.track(new SseReader(await live.get(a)))
  const rb = live.track(new SseReader(await live.get(b)))
  await ra.waitFor(() => true)
  await rb.waitFor(() => true)

  const sub = await live.post({ jsonrpc: '2.0', id: 's1', method: 'resources/subscribe', params: { uri: 'test://watched' } }, a)
  t.same(await sub.json(), { jsonrpc: '2.0', id: 's1', result: {} })
  const badSub = await live.post({ jsonrpc: '2.0', id: 's2', method: 'resources/subscribe', params: {} }, a)
  t.equal((await badSub.json() as { error: { code: number } }).error.code, -32602)

  app.mcp.resourceUpdated('test://watched')
  app.mcp.resourceUpdated('test://other')
  const upd = await ra.waitFor(e => e.json?.method === 'notifications/resources/updated')
  t.same(upd.json, { jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: 'test://watched' } })

  // A broadcast after the update: once B sees it, B would have seen the update too.
  app.mcp.tool({ name: 'marker1', description: 'marker' }, async () => 'x')
  await rb.waitFor(e => e.json?.method === 'notifications/tools/list_changed')
  await ra.waitFor(e => e.json?.method === 'notifications/tools/list_changed')
  t.notOk(rb.messages.some(m => m.method === 'notifications/resources/updated'), 'the other session gets nothing')
  t.equal(ra.messages.filter(m => m.method === 'notifications/resources/updated').length, 1, 'only the subscribed uri')

  const unsub = await live.post({ jsonrpc: '2.0', id: 'u1', method: 'resources/unsubscribe', params: { uri: 'test://watched' } }, a)
  t.same(await unsub.json(), { jsonrpc: '2.0', id: 'u1', result: {} })
  app.mcp.resourceUpdated('test://watched')
  const before = ra.events.length
  app.mcp.tool({ name: 'marker2', description: 'marker' }, async () => 'x')
  await ra.waitFor(e => e.json?.method === 'notifications/tools/list_changed', 3000, before)
  t.equal(ra.messages.filter(m => m.method === 'notifications/resources/updated').length, 1, 'nothing after unsubscribe')
})

t.test('app.close() ends open GET streams', async (t) => {
  // A GET stream is not a running request: the close ends it rather than waiting out the drain.
  // Shown against that wait in the same run (a ratio, not a figure a busy machine can miss).
  const DRAIN = 30_000
  const app = await build(t, { keepAliveIntervalMs: 0, retryIntervalMs: 250, drainTimeoutMs: DRAIN }, setup)
  const live = await listen(t, app)
  const s = await live.initialize()
  const r = live.track(new SseReader(await live.get(s)))
  await r.waitFor(() => true)
  const started = Date.now()
  await app.close()
  await r.waitClosed(DRAIN)
  const took = Date.now() - started
  t.ok(took < DRAIN / 2, `closed without waiting out the ${DRAIN} ms drain (${took} ms)`)
  t.ok(r.events.some(e => e.retry === 250), 'retry sent before closing')
})
