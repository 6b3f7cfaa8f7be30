/**
 * A client that left frees the session (issue 35, item 4): a handler that ignores `ctx.signal`
 * keeps its lease at most `sessions.cancelGraceMs` after its client went away; then the next request
 * on that session or state handle runs (long before the handler ends), and what the handler
 * saves afterwards is not stored (logged at warn). With the memory lock, and with the Redis lock
 * (whose lease is then no longer renewed).
 */
import t, { type Test } from 'tap'
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { LOCK_CLIENT_OPTIONS, RedisSessionStore, type SessionStore } from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { callTool, initialize, modernSend, readReply } from '../helpers/http-client.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { failFastRedis } from '../helpers/fail-fast-redis.js'
import { sleep, until } from '../helpers/time.js'
import { headers, newId, rpc } from '../helpers/wire.js'
import { LogCapture } from './fixtures/app.js'

const GRACE = 300
/** How long the stubborn handlers run: far beyond the grace. */
const STUBBORN_MS = 4000

interface Stubborn { url: string, logs: LogCapture, done: () => number }

async function start (t: Test, store?: SessionStore): Promise<Stubborn> {
  const logs = new LogCapture()
  const app = Fastify({ logger: { level: 'warn', stream: logs.stream }, forceCloseConnections: true })
  t.teardown(async () => { await app.close() })
  await app.register(mcp, { sessions: { store, cancelGraceMs: GRACE, gcProbability: 0 }, requestState: { secret: 'cancel-grace-test-secret-0123456789' }, drainTimeoutMs: 0 })
  registerDemoTools(app.mcp)
  let done = 0
  app.mcp.tool({ name: 'stubborn_add', description: 'counter + 100 after a long wait, ignoring the signal.' }, async (_args, ctx) => {
    const before = ctx.session?.get<number>('counter') ?? 0
    await sleep(STUBBORN_MS)
    ctx.session?.set('counter', before + 100)
    done++
    return 'late'
  })
  app.mcp.tool({
    name: 'stubborn_basket',
    description: 'Adds item after a long wait, ignoring the signal.',
    input: Type.Object({ basket: Type.String(), item: Type.String() }),
    handle: { argument: 'basket', kind: 'basket' }
  }, async ({ item }, ctx) => {
    const before = ctx.handle?.get<string[]>('items') ?? []
    await sleep(STUBBORN_MS)
    ctx.handle?.set('items', [...before, item])
    done++
    return 'late'
  })
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  return { url: `${address}/mcp`, logs, done: () => done }
}

async function modernCall (url: string, name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<Record<string, any> | undefined> {
  return (await readReply(await modernSend(url, rpc('tools/call', { name, arguments: args }), { signal }))).last
}

function lateDropLogged (t: Test, s: Stubborn): void {
  t.ok(s.logs.find(l => l.level === 40 && /client left and its lease was released after the grace/.test(l.msg)), 'the late save is refused, logged at warn')
}

async function sessionCase (t: Test, s: Stubborn): Promise<void> {
  const session = await initialize(s.url)
  const leaving = new AbortController()
  const first = fetch(s.url, {
    method: 'POST',
    headers: headers(session),
    signal: leaving.signal,
    body: JSON.stringify({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'stubborn_add', arguments: {} } })
  })
  first.catch(() => {})
  await sleep(100)
  leaving.abort()
  const next = await callTool(s.url, session, 'counter_add', { by: 1 })
  t.equal(next.last?.result?.structuredContent?.counter, 1, 'the next request ran, on the state as before')
  t.equal(s.done(), 0, 'while the first handler still runs (after the grace, not after the handler)')
  await until(() => s.done() === 1, { timeout: STUBBORN_MS * 2, what: 'the stubborn handler to end' })
  await sleep(100)
  t.equal((await callTool(s.url, session, 'counter_get', {})).last?.result?.structuredContent?.counter, 1, 'its late write was not stored')
  lateDropLogged(t, s)
}

async function handleCase (t: Test, s: Stubborn): Promise<void> {
  const basket = (await modernCall(s.url, 'basket_create', {}))?.result?.structuredContent?.basket as string
  const leaving = new AbortController()
  modernCall(s.url, 'stubborn_basket', { basket, item: 'late' }, leaving.signal).catch(() => {})
  await sleep(100)
  leaving.abort()
  const next = await modernCall(s.url, 'basket_add', { basket, item: 'next' })
  t.equal(next?.result?.structuredContent?.count, 1, 'the next call ran, on the basket as before')
  t.equal(s.done(), 0, 'while the first handler still runs')
  await until(() => s.done() === 1, { timeout: STUBBORN_MS * 2, what: 'the stubborn handler to end' })
  await sleep(100)
  t.same((await modernCall(s.url, 'basket_get', { basket }))?.result?.structuredContent?.items, ['next'], 'its late write was not stored')
  lateDropLogged(t, s)
}

t.test('memory lock: a session request whose client left', async t => { await sessionCase(t, await start(t)) })
t.test('memory lock: a handle call whose client left', async t => { await handleCase(t, await start(t)) })

t.test('Redis store and lock', async t => {
  const server = await startRedisServer(t)
  const client = await failFastRedis(t, server.url, LOCK_CLIENT_OPTIONS)
  t.test('a session request whose client left', async t => { await sessionCase(t, await start(t, new RedisSessionStore({ redis: client }))) })
  t.test('a handle call whose client left', async t => { await handleCase(t, await start(t, new RedisSessionStore({ redis: client }))) })
})
