import t from 'tap'
import type { McpDecorator } from '../../../lib/index.js'
import type { Test } from 'tap'
import { build, call, initialize, listen, post, request } from '../../helpers/handshake-app.js'
import { SseReader, sseMessages } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'

interface Probe {
  started: Promise<void>
  signal: AbortSignal | null
  finished: boolean
}

/** The client-request timer is unref()ed; through inject nothing else keeps the loop alive. */
function holdLoop (t: Test): void {
  const timer = setInterval(() => {}, 1000)
  t.teardown(() => clearInterval(timer))
}

function probe (): Probe & { start: () => void } {
  let start!: () => void
  const started = new Promise<void>(resolve => { start = resolve })
  return { started, start, signal: null, finished: false }
}

t.test('notifications/cancelled aborts ctx.signal and suppresses the response', async (t) => {
  let p = probe()
  const app = await build(t, {}, (m: McpDecorator) => {
    m.tool({ name: 'wait', description: 'Waits until cancelled' }, async (_a, ctx) => {
      p.signal = ctx.signal
      if (ctx.meta?.progressToken !== undefined) await ctx.progress({ progress: 1 })
      p.start()
      await sleep(5000, ctx.signal)
      p.finished = true
      return 'finished'
    })
  })
  const s = await initialize(app)
  const other = await initialize(app)

  const pending = request(app, s, 'tools/call', { name: 'wait' }, { id: 'w1' })
  await p.started
  // A cancel from another session, or for another id, does nothing.
  t.equal((await post(app, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'w1' } }, { session: other })).statusCode, 202)
  t.equal((await post(app, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'w-other' } }, { session: s })).statusCode, 202)
  await sleep(20)
  t.equal(p.signal?.aborted, false, 'not aborted by a foreign cancel')

  const cancel = await post(app, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'w1', reason: 'user' } }, { session: s })
  t.equal(cancel.statusCode, 202)
  t.equal(cancel.body, '')
  const res = await pending
  t.equal(p.signal?.aborted, true, 'ctx.signal aborted')
  t.equal(p.finished, false, 'the handler stopped')
  t.equal(res.statusCode, 202, 'no response for the cancelled request')
  t.equal(res.body, '')

  // Cancelled after the response switched to SSE: the stream ends without the response.
  p = probe()
  const pending2 = request(app, s, 'tools/call', { name: 'wait', _meta: { progressToken: 'pt' } }, { id: 'w2' })
  await p.started
  await post(app, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'w2' } }, { session: s })
  const res2 = await pending2
  t.match(res2.headers['content-type'], /^text\/event-stream/)
  const msgs = sseMessages(res2.body)
  t.same(msgs.map(m => m.method), ['notifications/progress'], 'only the progress notification, no response')

  // The session still works.
  t.same((await call(app, s, 'ping', undefined, { id: 'after' })).result, {})
})

t.test('elicitation over raw HTTP', async (t) => {
  const app = await build(t, { keepAliveIntervalMs: 0 }, (m) => {
    m.tool({ name: 'ask', description: 'Asks for a name' }, async (_a, ctx) => {
      const r = await ctx.elicit('name', {
        message: 'Name?',
        requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }
      })
      return r.action === 'accept' ? `Hello, ${String(r.content?.name)}!` : `action=${r.action}`
    })
    m.tool({ name: 'ask_url', description: 'URL elicitation' }, async (_a, ctx) => {
      const r = await ctx.elicit('url', { mode: 'url', message: 'Go there', url: 'https://example.com/auth' })
      return `action=${r.action}`
    })
    m.tool({ name: 'sample', description: 'Samples' }, async (_a, ctx) => {
      const r = await ctx.sample('s', { messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 10 })
      return `model=${r.model}`
    })
  })
  const live = await listen(t, app)
  const s = await live.initialize('2025-11-25', { elicitation: { form: {}, url: {} }, sampling: {} })
  const other = await live.initialize('2025-11-25', { elicitation: {} })
  const getStream = live.track(new SseReader(await live.get(s)))
  await getStream.waitFor(() => true)

  const res = await live.post({ jsonrpc: '2.0', id: 'call-1', method: 'tools/call', params: { name: 'ask' } }, s)
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^text\/event-stream/)
  const r = live.track(new SseReader(res))
  const primed = await r.waitFor(() => true)
  t.equal(primed.data, '', 'priming event first')
  const elicit = (await r.waitFor(e => e.json?.method === 'elicitation/create')).json!
  t.type(elicit.id, 'string')
  t.same(elicit.params, { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } })

  // An answer from another session does not reach this request: the result below greets the
  // answer of this session (a foreign answer that got through would have completed the call first).
  const foreign = await live.post({ jsonrpc: '2.0', id: elicit.id, result: { action: 'accept', content: { name: 'Mallory' } } }, other)
  t.equal(foreign.status, 202)

  const answer = await live.post({ jsonrpc: '2.0', id: elicit.id, result: { action: 'accept', content: { name: 'Ada' } } }, s)
  t.equal(answer.status, 202, 'the answer POST → 202')
  t.equal(await answer.text(), '')
  const done = await r.waitFor(e => e.json?.id === 'call-1')
  t.same(done.json, { jsonrpc: '2.0', id: 'call-1', result: { content: [{ type: 'text', text: 'Hello, Ada!' }] } }, 'Ada, not Mallory')
  await r.waitClosed()
  t.notOk(getStream.messages.some(m => m.method === 'elicitation/create'), 'never on the GET stream')

  // URL mode gets an elicitationId.
  const urlRes = live.track(new SseReader(await live.post({ jsonrpc: '2.0', id: 'call-2', method: 'tools/call', params: { name: 'ask_url' } }, s)))
  const urlReq = (await urlRes.waitFor(e => e.json?.method === 'elicitation/create')).json!
  t.equal(urlReq.params.mode, 'url')
  t.equal(urlReq.params.url, 'https://example.com/auth')
  t.type(urlReq.params.elicitationId, 'string')
  await live.post({ jsonrpc: '2.0', id: urlReq.id, result: { action: 'decline' } }, s)
  t.equal((await urlRes.waitFor(e => e.json?.id === 'call-2')).json?.result.content[0].text, 'action=decline')

  // An error answer fails the client request: the tool result is an error.
  const errRes = live.track(new SseReader(await live.post({ jsonrpc: '2.0', id: 'call-3', method: 'tools/call', params: { name: 'ask' } }, s)))
  const errReq = (await errRes.waitFor(e => e.json?.method === 'elicitation/create')).json!
  t.equal((await live.post({ jsonrpc: '2.0', id: errReq.id, error: { code: -1, message: 'user went away' } }, s)).status, 202)
  const errDone = (await errRes.waitFor(e => e.json?.id === 'call-3')).json!
  t.equal(errDone.result.isError, true)
  t.match(errDone.result.content[0].text, /user went away/)

  // Sampling works the same way.
  const sRes = live.track(new SseReader(await live.post({ jsonrpc: '2.0', id: 'call-4', method: 'tools/call', params: { name: 'sample' } }, s)))
  const sReq = (await sRes.waitFor(e => e.json?.method === 'sampling/createMessage')).json!
  t.same(sReq.params, { messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 10 })
  await live.post({ jsonrpc: '2.0', id: sReq.id, result: { role: 'assistant', content: { type: 'text', text: 'yo' }, model: 'm1' } }, s)
  t.equal((await sRes.waitFor(e => e.json?.id === 'call-4')).json?.result.content[0].text, 'model=m1')
})

t.test('undeclared capability: ctx.elicit throws and nothing is sent', async (t) => {
  let caught: unknown
  const app = await build(t, {}, (m) => {
    m.tool({ name: 'ask', description: 'Asks' }, async (_a, ctx) => {
      await ctx.elicit('x', { message: 'Name?', requestedSchema: { type: 'object', properties: {} } })
      return 'unreachable'
    })
    m.tool({ name: 'ask_url', description: 'Asks by URL' }, async (_a, ctx) => {
      try {
        await ctx.elicit('x', { mode: 'url', message: 'Go', url: 'https://example.com' })
      } catch (err) { caught = err; throw err }
      return 'unreachable'
    })
    m.tool({ name: 'sample', description: 'Samples' }, async (_a, ctx) => {
      await ctx.sample('s', { messages: [], maxTokens: 1 })
      return 'unreachable'
    })
    m.tool({ name: 'roots', description: 'Roots' }, async (_a, ctx) => {
      await ctx.roots('r')
      return 'unreachable'
    })
  })
  const none = await initialize(app, { capabilities: {} })
  for (const [name, cap] of [['ask', 'elicitation'], ['sample', 'sampling'], ['roots', 'roots']]) {
    const res = await request(app, none, 'tools/call', { name }, { id: name })
    t.match(res.headers['content-type'], /^application\/json/, `${name}: no stream was opened`)
    const body = res.json()
    t.equal(body.id, name)
    t.equal(body.result.isError, true, `${name}: isError result`)
    t.equal(body.result.content[0].text, `The client did not declare the "${cap}" capability`)
  }
  const formOnly = await initialize(app, { capabilities: { elicitation: {} } })
  const res = await request(app, formOnly, 'tools/call', { name: 'ask_url' })
  t.match(res.headers['content-type'], /^application\/json/)
  t.equal(res.json().result.isError, true, 'URL mode needs elicitation.url')
  t.equal((caught as { code?: string }).code, 'FST_ERR_MCP_CAPABILITY')
})

t.test('client request timeout', async (t) => {
  holdLoop(t)
  let caught: { code?: string } | undefined
  const app = await build(t, { clientRequestTimeoutMs: 80 }, (m) => {
    m.tool({ name: 'ask', description: 'Asks' }, async (_a, ctx) => {
      try {
        await ctx.elicit('x', { message: 'Name?', requestedSchema: { type: 'object', properties: {} } })
        return 'answered'
      } catch (err) {
        caught = err as { code?: string }
        return `failed: ${caught.code}`
      }
    })
  })
  const s = await initialize(app, { capabilities: { elicitation: {} } })
  const started = Date.now()
  const res = await request(app, s, 'tools/call', { name: 'ask' }, { id: 't1' })
  t.ok(Date.now() - started >= 70, 'waited for the timeout')
  t.equal(caught?.code, 'FST_ERR_MCP_CLIENT_TIMEOUT', 'the handler got the timeout error')
  const msgs = sseMessages(res.body)
  const req = msgs.find(m => m.method === 'elicitation/create')
  t.ok(req, 'the request was sent on the response stream')
  t.same(msgs[msgs.length - 1], { jsonrpc: '2.0', id: 't1', result: { content: [{ type: 'text', text: 'failed: FST_ERR_MCP_CLIENT_TIMEOUT' }] } })
  // A late answer is accepted and dropped.
  t.equal((await post(app, { jsonrpc: '2.0', id: req!.id, result: { action: 'accept' } }, { session: s })).statusCode, 202)
})

t.test('maxPendingClientRequests bounds concurrent client requests', async (t) => {
  holdLoop(t)
  const app = await build(t, { maxPendingClientRequests: 1, clientRequestTimeoutMs: 300 }, (m) => {
    m.tool({ name: 'ask', description: 'Asks' }, async (_a, ctx) => {
      try {
        await ctx.elicit('x', { message: 'Name?', requestedSchema: { type: 'object', properties: {} } })
        return 'answered'
      } catch (err) {
        return `failed: ${(err as { code?: string }).code}`
      }
    })
  })
  const s = await initialize(app, { capabilities: { elicitation: {} } })
  const first = request(app, s, 'tools/call', { name: 'ask' }, { id: 'a' })
  await sleep(30)
  const second = await request(app, s, 'tools/call', { name: 'ask' }, { id: 'b' })
  t.same(second.json(), { jsonrpc: '2.0', id: 'b', result: { content: [{ type: 'text', text: 'failed: FST_ERR_MCP_CLIENT_REQUEST' }] } })
  const firstMsgs = sseMessages((await first).body)
  t.equal(firstMsgs[firstMsgs.length - 1].result.content[0].text, 'failed: FST_ERR_MCP_CLIENT_TIMEOUT')
})
