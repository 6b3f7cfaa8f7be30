/**
 * The 2026-07-28 wire's streams: request-scoped notifications (progress, log), what an SSE
 * response may carry, cancellation by closing the stream, subscriptions/listen, and one handler
 * answering both eras.
 * Checklist: reference/mcp-spec.md §9 items 36, 37, 43–45.
 */
import t, { type Test } from 'tap'
import { buildDemo } from '../../../examples/server.js'
import { build, call, listen, post, SECRET } from './fixtures/helper.js'
import { finalOf, headers, initializeBody, LEGACY, modernHeaders, META_LOG, META_SUB, messagesOf, rpc } from '../../helpers/wire.js'
import type { SseReader } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'
import { app, ELICIT, fixture, isError, retry } from './fixtures/wire-app.js'

// ─── request-scoped notifications (items 36, 37, 43) ────────────────────────────────────────

t.test('progress only with a progressToken; notifications/message only with logLevel, at or above it', async (t) => {
  const a = await app(t)
  const plain = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p0' }))
  t.match(plain.headers['content-type'], /^application\/json/, 'neither: plain JSON')
  t.equal(plain.json().result.content[0].text, 'chatted')

  const withToken = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p1', meta: { progressToken: 'tok' } }))
  t.match(withToken.headers['content-type'], /^text\/event-stream/)
  t.equal(withToken.headers['x-accel-buffering'], 'no')
  t.equal(withToken.headers['mcp-session-id'], undefined)
  const m1 = messagesOf(withToken)
  t.same(m1.slice(0, -1), [
    { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'tok', progress: 1, total: 2 } },
    { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'tok', progress: 2, total: 2, message: 'done' } }
  ], 'progress only: no log messages without logLevel')
  t.equal(m1[m1.length - 1].id, 'p1')

  const withLevel = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p2', meta: { [META_LOG]: 'warning' } }))
  const m2 = messagesOf(withLevel)
  t.same(m2.slice(0, -1).map(m => m.params), [{ level: 'warning', data: 'w', logger: 'my-logger' }, { level: 'error', data: { e: 1 } }])
  t.ok(m2.slice(0, -1).every(m => m.method === 'notifications/message'), 'no progress without a token')

  const both = messagesOf(await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p3', meta: { [META_LOG]: 'debug', progressToken: 7 } })))
  t.same(both.slice(0, -1).map(m => m.method === 'notifications/progress' ? `p${String(m.params.progress)}` : m.params.level),
    ['p1', 'debug', 'info', 'warning', 'error', 'p2'])
  t.ok(both.filter(m => m.method === 'notifications/progress').every(m => m.params.progressToken === 7))
  const emergency = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'p4', meta: { [META_LOG]: 'emergency' } }))
  t.match(emergency.headers['content-type'], /^application\/json/, 'filtered out: no stream')

  for (const bad of ['verbose', 'INFO', 3, null, {}]) {
    isError(t, await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'bad', meta: { [META_LOG]: bad } })), 400, -32602, 'bad', `logLevel ${JSON.stringify(bad)}`)
  }
  // A progress token must be a string or a number: anything else would be echoed into every
  // notification. Refused before the handler runs.
  for (const bad of [null, true, {}, ['t'], { t: 1 }]) {
    const res = await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'tok', meta: { progressToken: bad } }))
    const err = isError(t, res, 400, -32602, 'tok', `progressToken ${JSON.stringify(bad)}`)
    t.match(err.error.message, /progressToken/)
    t.match(res.headers['content-type'], /^application\/json/, 'no stream was opened')
  }
  const zero = messagesOf(await post(a, rpc('tools/call', { name: 'chatty' }, { id: 'z', meta: { progressToken: 0 } })))
  t.same(zero.filter(m => m.method === 'notifications/progress').map(m => m.params.progressToken), [0, 0], 'a token of 0 is a token')
})

t.test('an SSE response carries notifications and the final result only, never a request', async (t) => {
  const a = await app(t)
  const res = await post(a, rpc('tools/call', { name: 'streaming_ask' }, { id: 's', caps: ELICIT, meta: { progressToken: 'x', [META_LOG]: 'info' } }))
  t.match(res.headers['content-type'], /^text\/event-stream/)
  const msgs = messagesOf(res)
  t.same(msgs.map(m => m.method ?? 'response'), ['notifications/progress', 'notifications/message', 'response'])
  for (const m of msgs.slice(0, -1)) t.notOk('id' in m, `${String(m.method)} is a notification`)
  const last = msgs[msgs.length - 1]
  t.equal(last.id, 's')
  t.notOk('method' in last)
  t.equal(last.result.resultType, 'input_required', 'the elicitation travels inside the result')
  t.notOk(msgs.some(m => m.method === 'elicitation/create'))
  // Accept: text/event-stream only → even a plain result comes as SSE, still with the response last.
  const sseOnly = await post(a, rpc('tools/list', {}, { id: 'l' }), { headers: { accept: 'text/event-stream' } })
  t.match(sseOnly.headers['content-type'], /^text\/event-stream/)
  t.same(messagesOf(sseOnly).map(m => m.id), ['l'])
  // An error after a notification still ends the stream as a JSON-RPC error.
  const capErr = await post(a, rpc('tools/call', { name: 'streaming_ask' }, { id: 'e', meta: { progressToken: 'x' } }))
  const em = messagesOf(capErr)
  t.equal(em[em.length - 1].error?.code, -32021)
  t.equal(em[em.length - 1].id, 'e')
})

t.test('closing the response stream aborts ctx.signal and nothing more is written', async (t) => {
  let aborted!: () => void
  const abortedP = new Promise<void>(resolve => { aborted = resolve })
  let finished!: (v: string) => void
  const finishedP = new Promise<string>(resolve => { finished = resolve })
  const writes: Array<{ at: number, text: string }> = []
  let ended = false
  const a = await build(t, {
    before: (app) => {
      app.addHook('onRequest', async (req, reply) => {
        if (req.headers['x-track'] !== '1') return
        const raw = reply.raw
        const write = raw.write.bind(raw) as (...args: unknown[]) => boolean
        raw.write = ((chunk: unknown, ...rest: unknown[]) => { writes.push({ at: Date.now(), text: String(chunk) }); return write(chunk, ...rest) }) as typeof raw.write
        const end = raw.end.bind(raw) as (...args: unknown[]) => unknown
        raw.end = ((...args: unknown[]) => {
          ended = true; if (args[0] !== undefined && typeof args[0] !== 'function') writes.push({ at: Date.now(), text: String(args[0]) }); return end(...args)
        }) as typeof raw.end
      })
    }
  }, (m) => {
    m.tool({ name: 'slow', description: 'Waits for cancellation' }, async (_a, ctx) => {
      await ctx.progress({ progress: 1 })
      await new Promise<void>(resolve => { if (ctx.signal.aborted) resolve(); else ctx.signal.addEventListener('abort', () => resolve()) })
      aborted()
      await ctx.progress({ progress: 2 })
      await ctx.log('emergency', 'after the abort')
      await sleep(30)
      finished(String(ctx.signal.aborted))
      return 'too late'
    })
  })
  const live = await listen(t, a)
  const ac = new AbortController()
  const res = await live.post(rpc('tools/call', { name: 'slow' }, { meta: { progressToken: 'p', [META_LOG]: 'debug' } }), { 'x-track': '1' }, ac.signal)
  t.equal(res.status, 200)
  const reader = live.reader(res)
  await reader.waitFor(e => e.json?.method === 'notifications/progress')
  const count = writes.length
  ac.abort()
  await reader.cancel()
  await abortedP
  t.pass('ctx.signal aborted when the client closed the stream')
  t.equal(await finishedP, 'true')
  await sleep(50)
  t.equal(writes.length, count, `nothing written after the close: ${JSON.stringify(writes.slice(count))}`)
  t.notOk(writes.some(w => /too late|after the abort|"progress":2/.test(w.text)))
  t.notOk(ended && writes.length > count)
  // The server still answers.
  t.equal((await call(a, 'tools/list')).result.resultType, 'complete')
})

// ─── subscriptions/listen (items 44, 45) ────────────────────────────────────────────────────

async function openListen (t: Test, live: Awaited<ReturnType<typeof listen>>, id: string, notifications: Record<string, unknown>): Promise<SseReader> {
  const res = await live.post(rpc('subscriptions/listen', { notifications }, { id }))
  t.equal(res.status, 200, `listen ${id}`)
  t.match(res.headers.get('content-type'), /^text\/event-stream/)
  t.equal(res.headers.get('mcp-session-id'), null)
  const reader = live.reader(res)
  await reader.waitFor(e => e.json?.method === 'notifications/subscriptions/acknowledged')
  return reader
}

t.test('subscriptions/listen: acknowledgement, tagging, filtering, list changes, resource updates, keep-alive, shutdown', async (t) => {
  const a = await build(t, { plugin: { requestState: { secret: SECRET }, keepAliveIntervalMs: 40 } }, fixture({}))
  const live = await listen(t, a)
  const tp = await openListen(t, live, 'tp', { toolsListChanged: true, promptsListChanged: true })
  const p = await openListen(t, live, 'p', { promptsListChanged: true })
  const ra = await openListen(t, live, 'ra', { resourceSubscriptions: ['test://static', 'test://cached'] })
  const rb = await openListen(t, live, 'rb', { resourceSubscriptions: ['test://other'], resourcesListChanged: true })
  t.same(tp.messages[0], {
    jsonrpc: '2.0',
    method: 'notifications/subscriptions/acknowledged',
    params: { notifications: { toolsListChanged: true, promptsListChanged: true }, _meta: { [META_SUB]: 'tp' } }
  }, 'first frame: the acknowledgement, subscriptionId = the request id')
  t.same(ra.messages[0].params.notifications, { resourceSubscriptions: ['test://static', 'test://cached'] })
  t.same(rb.messages[0].params.notifications, { resourcesListChanged: true, resourceSubscriptions: ['test://other'] })

  a.mcp.tool({ name: 'late', description: 'Added after start' }, async () => 'late')
  await tp.waitFor(e => e.json?.method === 'notifications/tools/list_changed')
  a.mcp.resourceUpdated('test://static')
  await ra.waitFor(e => e.json?.method === 'notifications/resources/updated')
  a.mcp.prompt({ name: 'late', description: 'Added after start' }, async () => [])
  await p.waitFor(e => e.json?.method === 'notifications/prompts/list_changed')
  await tp.waitFor(e => e.json?.method === 'notifications/prompts/list_changed')
  a.mcp.resource({ uri: 'test://new', name: 'new', description: 'New' }, async (uri) => ({ uri, text: '' }))
  await rb.waitFor(e => e.json?.method === 'notifications/resources/list_changed')
  // Progress and log messages of other requests never reach a listen stream.
  await post(a, rpc('tools/call', { name: 'chatty' }, { meta: { progressToken: 1, [META_LOG]: 'debug' } }))
  await tp.waitFor(e => e.comment === 'keep-alive', 10_000)
  await p.waitFor(e => e.comment === 'keep-alive', 10_000)

  const methods = (r: SseReader): string[] => r.messages.map(m => m.method)
  t.same(methods(tp), ['notifications/subscriptions/acknowledged', 'notifications/tools/list_changed', 'notifications/prompts/list_changed'])
  t.same(methods(p), ['notifications/subscriptions/acknowledged', 'notifications/prompts/list_changed'], 'a prompts-only stream gets no tools change')
  t.same(ra.messages.slice(1), [{ jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: 'test://static', _meta: { [META_SUB]: 'ra' } } }])
  t.same(methods(rb), ['notifications/subscriptions/acknowledged', 'notifications/resources/list_changed'], 'not subscribed to test://static')
  for (const [id, r] of [['tp', tp], ['p', p], ['ra', ra], ['rb', rb]] as const) {
    t.ok(r.messages.every(m => m.params?._meta?.[META_SUB] === id), `${id}: every frame tagged`)
    t.notOk(r.messages.some(m => 'id' in m), `${id}: no requests or responses before shutdown`)
  }

  // Graceful shutdown: the final result, then the end of the stream.
  await a.close()
  for (const [id, r] of [['tp', tp], ['p', p], ['ra', ra], ['rb', rb]] as const) {
    await r.waitClosed()
    t.same(r.messages[r.messages.length - 1], { jsonrpc: '2.0', id, result: { resultType: 'complete', _meta: { [META_SUB]: id } } }, `${id}: final result`)
  }
})

t.test('subscriptions/listen: honored subset, validation, cap → 429', async (t) => {
  const a = await build(t, { plugin: { requestState: { secret: SECRET }, listen: { max: 2 } } }, (m) => {
    m.tool({ name: 'only', description: 'Only tools' }, async () => 'x')
  })
  const live = await listen(t, a)
  const all = await openListen(t, live, 'all', { toolsListChanged: true, promptsListChanged: true, resourcesListChanged: true, resourceSubscriptions: ['test://x'], bogus: true })
  t.same(all.messages[0].params.notifications, { toolsListChanged: true }, 'only what the server supports')
  const none = await openListen(t, live, 'none', {})
  t.same(none.messages[0].params.notifications, {})
  // The cap: a JSON-RPC error with the request id.
  const over = await live.post(rpc('subscriptions/listen', { notifications: { toolsListChanged: true } }, { id: 'third' }))
  t.equal(over.status, 429)
  const body = await over.json() as Record<string, any>
  t.equal(body.jsonrpc, '2.0')
  t.equal(body.id, 'third')
  t.type(body.error?.code, 'number')
  // A closed stream frees its slot.
  await none.cancel()
  let again: Response | null = null
  for (let i = 0; i < 150; i++) {
    again = await live.post(rpc('subscriptions/listen', { notifications: {} }, { id: `again-${i}` }))
    if (again.status === 200) break
    await again.body?.cancel()
    await sleep(20)
  }
  t.equal(again?.status, 200, 'slot freed after the client closed its stream')
  if (again !== null) await live.reader(again).cancel()
  // A malformed filter is refused.
  const filters: Array<[string, unknown]> = [['missing', undefined], ['an array', [1]], ['a string', 'all'], ['null', null],
    ['a flag as a string', { toolsListChanged: 'yes' }], ['a flag as a number', { promptsListChanged: 1 }],
    ['resourceSubscriptions not an array', { resourceSubscriptions: 'test://x' }], ['a URI not a string', { resourceSubscriptions: ['a', 2] }]]
  for (const [what, filter] of filters) {
    const res = await a.inject({
      method: 'POST',
      url: '/mcp',
      headers: modernHeaders(rpc('subscriptions/listen')),
      payload: rpc('subscriptions/listen', filter === undefined ? {} : { notifications: filter }, { id: what })
    })
    isError(t, res, 400, -32602, what, `filter ${what}`)
    t.match(res.json().error.message, /notifications/)
  }
  // Listen validates like any modern request.
  const bad = await a.inject({
    method: 'POST',
    url: '/mcp',
    headers: { ...modernHeaders(rpc('subscriptions/listen')), 'mcp-method': 'tools/list' },
    payload: rpc('subscriptions/listen', {}, { id: 'h' })
  })
  t.equal(bad.json().error.code, -32020)
  await all.cancel()
})

// ─── both eras, one handler ─────────────────────────────────────────────────────────────────

t.test('the same handler answers both eras: legacy SSE elicitation and modern input_required (demo ask_name)', async (t) => {
  const demo = await buildDemo({ logger: false })
  t.teardown(() => demo.close())
  const live = await listen(t, demo)
  const init = await fetch(live.url, {
    method: 'POST',
    headers: headers(),
    body: JSON.stringify(initializeBody({ id: 0, capabilities: { elicitation: {} } }))
  })
  t.equal(init.status, 200)
  const sid = init.headers.get('mcp-session-id')!
  t.ok(sid)
  await init.json()
  const session = headers({ sid, version: LEGACY })
  t.equal((await fetch(live.url, { method: 'POST', headers: session, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) })).status, 202)
  const callRes = await fetch(live.url, {
    method: 'POST',
    headers: session,
    body: JSON.stringify({ jsonrpc: '2.0', id: 'legacy-call', method: 'tools/call', params: { name: 'ask_name', arguments: {} } })
  })
  t.match(callRes.headers.get('content-type'), /^text\/event-stream/)
  const reader = live.reader(callRes)
  const ask = (await reader.waitFor(e => e.json?.method === 'elicitation/create')).json!
  t.ok(ask.id !== undefined, 'legacy: a server→client request on the POST stream')
  t.equal(ask.params.message, 'What is your name?')
  const answer = await fetch(live.url, { method: 'POST', headers: session, body: JSON.stringify({ jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name: 'Grace' } } }) })
  t.equal(answer.status, 202)
  const final = (await reader.waitFor(e => e.json?.id === 'legacy-call')).json!
  t.equal(final.result.content[0].text, 'Hello, Grace!')
  t.notOk('resultType' in final.result, 'legacy results carry no resultType')

  // Modern: the same tool, stateless.
  const body = rpc('tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT })
  const first = finalOf(await post(demo, body))
  t.equal(first.result.resultType, 'input_required')
  t.equal(first.result.inputRequests.name.method, 'elicitation/create')
  t.equal(first.result.inputRequests.name.params.message, 'What is your name?')
  const second = finalOf(await post(demo, retry(body, first, { name: { action: 'accept', content: { name: 'Ada' } } })))
  t.equal(second.result.resultType, 'complete')
  t.equal(second.result.content[0].text, 'Hello, Ada!')
  const declined = finalOf(await post(demo, retry(body, first, { name: { action: 'decline' } })))
  t.equal(declined.result.content[0].text, 'No name given.')
  // Modern requests leave no session behind, and the legacy session is still there.
  const ping = await fetch(live.url, { method: 'POST', headers: session, body: JSON.stringify({ jsonrpc: '2.0', id: 'ping', method: 'ping' }) })
  t.same(await ping.json(), { jsonrpc: '2.0', id: 'ping', result: {} })
  await reader.cancel()
})
