/**
 * Clients reuse request ids (and a hostile one sends hundreds of requests with one id at once):
 * every request in flight is tracked and counted on its own, whatever its id.
 */
import t from 'tap'
import { Type } from '@sinclair/typebox'
import type { McpDecorator } from '../../../lib/index.js'
import { build, listen } from '../../helpers/handshake-app.js'
import { sseMessages } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'

/** A tool that runs until `release()` (or until cancelled), counting how many run at once. */
function gate (): { running: () => number, started: () => number, aborted: () => number, release: () => void, setup: (m: McpDecorator) => void } {
  let running = 0
  let started = 0
  let aborted = 0
  let open!: () => void
  const opened = new Promise<void>(resolve => { open = resolve })
  return {
    running: () => running,
    started: () => started,
    aborted: () => aborted,
    release: () => open(),
    setup: (m) => {
      m.tool({ name: 'slow', description: 'waits for the test', input: Type.Object({ tag: Type.String() }) }, async ({ tag }, ctx) => {
        running++
        started++
        await ctx.progress({ progress: 1, total: 2, message: tag })
        try {
          await new Promise<void>((resolve, reject) => {
            opened.then(resolve, reject)
            ctx.signal.addEventListener('abort', () => { aborted++; reject(ctx.signal.reason) }, { once: true })
          })
        } finally {
          running--
        }
        return `done ${tag}`
      })
    }
  }
}

/** Waits until `cond` holds or `ms` passed (a hang guard: on a busy machine 300 requests take seconds to arrive; the assertions after it say what went wrong). */
async function until (cond: () => boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms
  while (!cond() && Date.now() < end) await sleep(5)
}

t.test('300 concurrent calls with id 1 on one session: exactly maxStreamsPerSession run, the rest get 429', async (t) => {
  const g = gate()
  // Calls of one session at once: without the lock (with it they would queue one by one).
  const app = await build(t, { maxStreamsPerSession: 64, keepAliveIntervalMs: 0, sessions: { lock: false } }, g.setup)
  t.teardown(g.release)
  const live = await listen(t, app)
  const s = await live.initialize()
  const calls = Array.from({ length: 300 }, async (_, i) => {
    const res = await live.post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'slow', arguments: { tag: `t${i}` }, _meta: { progressToken: `p${i}` } } }, s)
    return { i, status: res.status, text: await res.text() }
  })
  // The refusals come back while the admitted calls still run.
  const settled: Array<{ i: number, status: number, text: string }> = []
  for (const c of calls) c.then(r => settled.push(r), () => {})
  await until(() => settled.length + g.running() >= 300)
  await sleep(100) // nothing more is admitted meanwhile
  t.equal(g.running(), 64, 'exactly 64 run at once')
  t.equal(g.started(), 64, 'and no more ever started')
  const refused = settled.filter(r => r.status === 429)
  t.equal(refused.length, 236, 'the rest got 429')
  for (const r of refused) {
    const body = JSON.parse(r.text) as { id: unknown, error: { code: number } }
    if (body.id !== 1 || body.error.code !== -32000) { t.fail(`bad refusal: ${r.text}`); break }
  }
  g.release()
  const all = await Promise.all(calls)
  const served = all.filter(r => r.status === 200)
  t.equal(served.length, 64)
  // Each admitted request got its own answer and its own progress, on its own response.
  let own = 0
  for (const r of served) {
    const msgs = sseMessages(r.text)
    const progress = msgs.find(m => m.method === 'notifications/progress')
    const answer = msgs.find(m => m.id === 1)
    if (progress?.params.progressToken === `p${r.i}` && progress.params.message === `t${r.i}` &&
      answer?.result?.content?.[0]?.text === `done t${r.i}`) own++
  }
  t.equal(own, 64, 'every admitted call got its own progress and its own answer')
  await until(() => app.mcp.status().sessionsHeld === 0)
  const again = await live.post({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, s)
  t.equal(again.status, 200, 'the count went back to 0: the session is served again')
  await again.text()
})

t.test('notifications/cancelled for a reused id cancels every request of the session in flight with that id', async (t) => {
  const g = gate()
  // Calls of one session at once: without the lock (with it they would queue one by one).
  const app = await build(t, { keepAliveIntervalMs: 0, sessions: { lock: false } }, g.setup)
  t.teardown(g.release)
  const live = await listen(t, app)
  const s = await live.initialize()
  const other = await live.initialize()
  const send = (session: typeof s, id: number, tag: string): Promise<{ status: number, text: string }> =>
    live.post({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'slow', arguments: { tag }, _meta: { progressToken: tag } } }, session)
      .then(async res => ({ status: res.status, text: await res.text() }))
  const ones = [send(s, 1, 'a'), send(s, 1, 'b'), send(s, 1, 'c')]
  const two = send(s, 2, 'd')
  const otherOne = send(other, 1, 'e')
  await until(() => g.running() === 5)
  t.equal(g.running(), 5)
  const cancel = await live.post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1, reason: 'stop' } }, s)
  t.equal(cancel.status, 202)
  await until(() => g.aborted() >= 3, 1000)
  await sleep(50)
  t.equal(g.aborted(), 3, 'the three requests with id 1 of that session, and nothing else')
  g.release()
  for (const r of await Promise.all(ones)) {
    t.notOk(sseMessages(r.text).some(m => m.id === 1), 'a cancelled request gets no response')
  }
  const d = sseMessages((await two).text).find(m => m.id === 2)
  t.equal(d?.result?.content?.[0]?.text, 'done d', 'id 2 of the same session ran to the end')
  const e = sseMessages((await otherOne).text).find(m => m.id === 1)
  t.equal(e?.result?.content?.[0]?.text, 'done e', 'id 1 of another session ran to the end')
})

t.test('notifications/cancelled matches the id by type and value: requestId "1" cancels request "1", never request 1', async (t) => {
  const g = gate()
  const app = await build(t, { keepAliveIntervalMs: 0, sessions: { lock: false } }, g.setup)
  t.teardown(g.release)
  const live = await listen(t, app)
  const s = await live.initialize()
  const send = (id: number | string, tag: string): Promise<{ status: number, text: string }> =>
    live.post({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'slow', arguments: { tag }, _meta: { progressToken: tag } } }, s)
      .then(async res => ({ status: res.status, text: await res.text() }))
  const number = send(1, 'number')
  const text = send('1', 'text')
  await until(() => g.running() === 2)
  t.equal(g.running(), 2)
  const cancel = await live.post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: '1', reason: 'stop' } }, s)
  t.equal(cancel.status, 202)
  await until(() => g.aborted() >= 1, 1000)
  await sleep(50)
  t.equal(g.aborted(), 1, 'one request cancelled')
  t.notOk(sseMessages((await text).text).some(m => m.id === '1'), 'the request "1" was cancelled: no response')
  g.release()
  const answer = sseMessages((await number).text).find(m => m.id === 1)
  t.equal(answer?.result?.content?.[0]?.text, 'done number', 'the request 1 ran to the end')
})
