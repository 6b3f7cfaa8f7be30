/**
 * The legacy wire with a per-session lock: requests of a session queue (never rejected until the
 * lock timeout), and what a waiting handler needs (the client's answer, a cancellation) bypasses it.
 */
import t from 'tap'
import { MemorySessionLock } from '../../../lib/locks/memory-lock.js'
import type { McpDecorator } from '../../../lib/index.js'
import { build, call, initialize, listen, post, request } from '../../helpers/handshake-app.js'
import { SseReader } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'

let running = 0
let maxRunning = 0

function setup (m: McpDecorator): void {
  m.tool({ name: 'incr', description: 'Read, wait, write' }, async (_a, ctx) => {
    running++
    maxRunning = Math.max(maxRunning, running)
    try {
      const n = ctx.session?.get<number>('n') ?? 0
      await sleep(40)
      ctx.session?.set('n', n + 1)
      return String(n + 1)
    } finally {
      running--
    }
  })
  m.tool({ name: 'get', description: 'Reads n' }, async (_a, ctx) => String(ctx.session?.get<number>('n') ?? 0))
  m.tool({ name: 'ask', description: 'Elicits, keeping session changes around the wait' }, async (_a, ctx) => {
    ctx.session?.set('before', true)
    const r = await ctx.elicit('x', { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
    ctx.session?.set('name', r.content?.name ?? null)
    return `hi ${String(r.content?.name)}`
  })
  m.tool({ name: 'wait', description: 'Waits until cancelled' }, async (_a, ctx) => {
    await sleep(5000, ctx.signal)
    return 'finished'
  })
  m.tool({ name: 'keys', description: 'Lists keys' }, async (_a, ctx) => JSON.stringify({ before: ctx.session?.get('before'), name: ctx.session?.get('name') }))
}

t.test('requests of one session queue behind the lock and lose no update', async (t) => {
  const lock = new MemorySessionLock()
  t.teardown(() => lock.close())
  const app = await build(t, { sessions: { lock } }, setup)
  const s = await initialize(app)
  running = 0
  maxRunning = 0
  const res = await Promise.all([1, 2, 3].map(id => request(app, s, 'tools/call', { name: 'incr' }, { id })))
  t.same(res.map(r => r.statusCode), [200, 200, 200], 'all three succeed')
  t.equal(maxRunning, 1, 'one at a time')
  t.same(res.map(r => r.json().result.content[0].text).sort(), ['1', '2', '3'], 'no lost update')
  t.equal((await call(app, s, 'tools/call', { name: 'get' })).result.content[0].text, '3')
  t.equal(lock.size, 0, 'nothing held afterwards')
})

t.test('lock wait timeout → 503, the session survives', async (t) => {
  const lock = new MemorySessionLock({ timeout: 30 })
  t.teardown(() => lock.close())
  const app = await build(t, { sessions: { lock } }, setup)
  const s = await initialize(app)
  const first = request(app, s, 'tools/call', { name: 'wait', _meta: {} }, { id: 'w' })
  await sleep(20)
  const busy = await request(app, s, 'tools/call', { name: 'get' }, { id: 'busy' })
  t.equal(busy.statusCode, 503)
  t.equal(busy.json().error.code, -32000)
  t.equal(busy.json().id, 'busy')
  // Notifications (the cancel) do not wait for the lock.
  const cancel = await post(app, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'w' } }, { session: s })
  t.equal(cancel.statusCode, 202)
  t.equal((await first).statusCode, 202, 'the cancelled request got no response')
  t.equal((await request(app, s, 'ping')).statusCode, 200)
})

t.test('pings, lists and completions take no lock: they answer while a writer holds the session; a setLevel waits', async (t) => {
  const lock = new MemorySessionLock({ timeout: 5000 })
  t.teardown(() => lock.close())
  let open!: () => void
  const gate = new Promise<void>(resolve => { open = resolve })
  const app = await build(t, { sessions: { lock } }, (m) => {
    setup(m)
    m.tool({ name: 'hold', description: 'Holds the session until the gate opens' }, async (_a, ctx) => {
      ctx.session?.set('held', true)
      await gate
      return 'done'
    })
    m.prompt({ name: 'p', description: 'A prompt' }, async () => ({ messages: [] }))
  })
  const s = await initialize(app)
  const order: string[] = []
  const writer = request(app, s, 'tools/call', { name: 'hold' }, { id: 'hold' }).then(r => { order.push('writer'); return r })
  while (lock.size === 0) await sleep(1)
  for (const method of ['ping', 'tools/list', 'prompts/list']) {
    const r = await request(app, s, method)
    t.equal(r.statusCode, 200, `${method}: answered while the writer holds the lock`)
    order.push(method)
  }
  const setLevel = request(app, s, 'logging/setLevel', { level: 'debug' }).then(r => { order.push('setLevel'); return r })
  await sleep(20)
  open()
  t.equal((await writer).statusCode, 200)
  t.equal((await setLevel).statusCode, 200)
  t.same(order, ['ping', 'tools/list', 'prompts/list', 'writer', 'setLevel'], 'the readers went first; setLevel waited for the lock')
})

t.test('elicitation with a lock: the answer bypasses the lock; no deadlock', async (t) => {
  const lock = new MemorySessionLock({ timeout: 2000 })
  t.teardown(() => lock.close())
  const app = await build(t, { sessions: { lock }, keepAliveIntervalMs: 0 }, setup)
  const live = await listen(t, app)
  const s = await live.initialize('2025-11-25', { elicitation: {} })
  const r = live.track(new SseReader(await live.post({ jsonrpc: '2.0', id: 'ask', method: 'tools/call', params: { name: 'ask' } }, s)))
  const req = (await r.waitFor(e => e.json?.method === 'elicitation/create')).json!

  // While the handler waits for the client, the session is free for other requests.
  const other = await live.post({ jsonrpc: '2.0', id: 'g', method: 'tools/call', params: { name: 'keys' } }, s)
  t.equal(other.status, 200, 'another request runs while the handler waits for the client')
  const otherBody = await other.json() as { result: { content: Array<{ text: string }> } }
  t.same(JSON.parse(otherBody.result.content[0].text), { before: true }, 'changes made before the wait were saved')

  const answer = await live.post({ jsonrpc: '2.0', id: req.id, result: { action: 'accept', content: { name: 'Ada' } } }, s)
  t.equal(answer.status, 202)
  const done = await r.waitFor(e => e.json?.id === 'ask')
  t.equal(done.json?.result.content[0].text, 'hi Ada')
  await r.waitClosed()
  const keys = await live.post({ jsonrpc: '2.0', id: 'k', method: 'tools/call', params: { name: 'keys' } }, s)
  const keysBody = await keys.json() as { result: { content: Array<{ text: string }> } }
  t.same(JSON.parse(keysBody.result.content[0].text), { before: true, name: 'Ada' }, 'changes on both sides of the wait are kept')
  t.equal(lock.size, 0)
})
