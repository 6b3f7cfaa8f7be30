/**
 * Client responses nobody waits for are dropped, never stored: the store keeps an answer only for
 * a request the server sent and still waits for (on any instance), and nothing of it outlives the
 * wait. On Redis, counted in keys; in process, in the memory bus's expectations.
 */
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import mcp, { MemoryBus, RedisSessionStore, type BusMessage, type McpDecorator, type McpPluginOptions } from '../../../lib/index.js'
import { startRedisServer } from '../../helpers/redis-server.js'
import { listen, post, type Live } from '../../helpers/handshake-app.js'
import { SseReader } from '../../helpers/sse.js'
import { sleep } from '../../helpers/time.js'
import type { Session } from '../../helpers/wire.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => { admin.disconnect() })

function askTool (m: McpDecorator): void {
  m.tool({ name: 'ask', description: 'Asks a name' }, async (_a, ctx) => {
    const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
    return `Hello, ${String(r.content?.name)}!`
  })
}

async function app (t: Test, opts: McpPluginOptions): Promise<FastifyInstance> {
  const a = Fastify({ logger: false })
  t.teardown(() => a.close())
  // maxBatchSize raised so that a 10,000-answer batch reaches the answers path (the default refuses it outright).
  await a.register(mcp, { clientRequestTimeoutMs: 10_000, keepAliveIntervalMs: 0, maxBatchSize: 10_000, ...opts })
  askTool(a.mcp)
  return a
}

/** Calls `ask` on `live`, answers the elicitation through `answerOn`; resolves the tool's text. */
async function askAndAnswer (on: Live, answerOn: Live, s: Session, name: string): Promise<{ text: string, requestId: string }> {
  const res = await on.post({ jsonrpc: '2.0', id: `call-${name}`, method: 'tools/call', params: { name: 'ask', arguments: {} } }, s)
  const reader = on.track(new SseReader(res, { timeout: 5000 }))
  const ask = (await reader.waitFor(e => e.json?.method === 'elicitation/create')).json!
  const answered = await answerOn.post({ jsonrpc: '2.0', id: ask.id, result: { action: 'accept', content: { name } } }, s)
  if (answered.status !== 202) throw new Error(`answer: ${answered.status}`)
  await reader.waitClosed()
  const last = reader.messages[reader.messages.length - 1]
  return { text: last?.result?.content?.[0]?.text, requestId: ask.id }
}

async function answerKeys (prefix: string): Promise<string[]> {
  return [...await admin.keys(`${prefix}*:ans:*`), ...await admin.keys(`${prefix}*:exp:*`)]
}

t.test('Redis: a flood of answers nobody waits for keeps nothing; expected ones are delivered across instances and cleaned up', async (t) => {
  const prefix = `t${randomBytes(4).toString('hex')}:`
  const client = new Redis(server.url)
  t.teardown(() => { client.disconnect() })
  const store = new RedisSessionStore({ redis: client, prefix })
  const a = await app(t, { redis: { client: server.url, prefix }, sessions: { store } })
  const b = await app(t, { redis: { client: server.url, prefix }, sessions: { store } })
  const liveA = await listen(t, a)
  const liveB = await listen(t, b)
  const s = await liveA.initialize('2025-11-25', { elicitation: {} })

  // Expected: asked on A, answered through B.
  const first = await askAndAnswer(liveA, liveB, s, 'Ada')
  t.equal(first.text, 'Hello, Ada!', 'the answer reached the handler on the other instance')
  for (let i = 0; i < 50 && (await answerKeys(prefix)).length > 0; i++) await sleep(20)
  t.same(await answerKeys(prefix), [], 'after delivery: no expectation and no kept answer left')
  const again = await liveB.post({ jsonrpc: '2.0', id: first.requestId, result: { action: 'accept', content: { name: 'Eve' } } }, s)
  t.equal(again.status, 202, 'an answer sent again is still answered 202…')
  t.same(await answerKeys(prefix), [], '…and not kept')

  // Unexpected: 20 answers of 1 MiB (ids of the shape the server mints, and others).
  const big = 'x'.repeat(1024 * 1024)
  const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1])
  for (let i = 0; i < 20; i++) {
    const id = i % 2 === 0 ? `srv-0123abcd-${i + 1}` : `client-${i}`
    const res = await (i % 4 < 2 ? liveA : liveB).post({ jsonrpc: '2.0', id, result: { big } }, s)
    t.equal(res.status, 202, `unexpected answer ${id}: 202`)
  }
  t.same(await answerKeys(prefix), [], '20 unexpected answers of 1 MiB: 0 keys')
  const grown = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]) - used
  t.ok(grown < 4 * 1024 * 1024, `Redis memory grew by ${Math.round(grown / 1024)} KiB, not 20 MiB`)

  // A batch of 10,000 responses (batches: 2025-03-26 sessions).
  const old = await liveA.initialize('2025-03-26', { elicitation: {} })
  const batch = Array.from({ length: 10_000 }, (_, i) => ({ jsonrpc: '2.0', id: i % 3 === 0 ? `srv-0123abcd-${i + 1}` : i, result: {} }))
  const res = await liveB.post(batch, old)
  t.equal(res.status, 202, 'the batch is answered 202')
  t.same(await answerKeys(prefix), [], 'a batch of 10,000 unexpected answers: 0 keys')

  // The session still works end to end.
  t.equal((await askAndAnswer(liveB, liveA, s, 'Grace')).text, 'Hello, Grace!')
  for (let i = 0; i < 50 && (await answerKeys(prefix)).length > 0; i++) await sleep(20)
  t.same(await answerKeys(prefix), [])
})

t.test('memory bus: an answer is published only when expected, and no expectation outlives its wait', async (t) => {
  const bus = new MemoryBus()
  t.teardown(() => bus.close())
  const a = await app(t, { bus })
  const live = await listen(t, a)
  const s = await live.initialize('2025-11-25', { elicitation: {} })
  const published: BusMessage[] = []
  const off = await bus.subscribe(`s:${s.sid}`, m => { if (m.t === 'answer') published.push(m) })
  t.teardown(off)
  for (const id of ['srv-0123abcd-1', 'nope', 7]) {
    const res = await post(a, { jsonrpc: '2.0', id, result: {} }, { session: s })
    t.equal(res.statusCode, 202)
  }
  t.same(published, [], 'nothing published for answers nobody expects')
  const done = await askAndAnswer(live, live, s, 'Lin')
  t.equal(done.text, 'Hello, Lin!')
  t.equal(published.length, 1, 'the expected answer was published once')
  t.equal(bus.expected, 0, 'its expectation is gone')
})
