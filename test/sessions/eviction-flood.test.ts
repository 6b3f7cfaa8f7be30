/**
 * A flood of cheap records cannot push out the state of a client it competes with (issues 40 and
 * 47). With the memory store full, a record that holds no state goes before any that holds state
 * (`lib/sessions/held-state.ts`), whoever made it — so a flood of `initialize` + `ping` from the
 * victim's own address leaves its session holding data and its basket holding an item; within
 * each class a record of the client holding the most goes (`lib/sessions/owner-index.ts`), and
 * among clients holding as many, the least recently active one. The bound that holds for records
 * holding state: a victim record goes only once no client holds more such records than the
 * victim's client, i.e. after a flood of records holding state from about `max` / (the victim's
 * records) different addresses (IPv6: /64s).
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import mcp, { MemorySessionStore } from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { headers, initializeBody, modernHeaders, newId, rpc, type Session } from '../helpers/wire.js'

// Floods of 10,000 requests: a loaded machine may take minutes.
t.setTimeout(600_000)

const MAX = 200
const VICTIM = '198.51.100.7'
const ATTACKER = '203.0.113.9'
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } }

async function build (t: Test, max = MAX): Promise<{ app: FastifyInstance, store: MemorySessionStore }> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  const store = new MemorySessionStore({ max })
  await app.register(mcp, { sessions: { store, gcProbability: 0 }, requestState: { secret: 'eviction-flood-secret-0123456789' }, tasks: { ttlMs: 60_000 } })
  registerDemoTools(app.mcp)
  await app.ready()
  return { app, store }
}

async function post (app: FastifyInstance, ip: string, body: Record<string, any>, h: Record<string, string>): Promise<{ status: number, json: Record<string, any>, headers: Record<string, unknown> }> {
  const res = await app.inject({ method: 'POST', url: '/mcp', remoteAddress: ip, headers: h, payload: body })
  return { status: res.statusCode, json: res.body === '' ? {} : res.json(), headers: res.headers }
}

async function openSession (app: FastifyInstance, ip: string): Promise<Session> {
  const res = await post(app, ip, initializeBody(), headers())
  const session = { sid: res.headers['mcp-session-id'] as string, version: res.json.result.protocolVersion as string }
  await post(app, ip, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers(session))
  return session
}

async function legacyCall (app: FastifyInstance, ip: string, session: Session, name: string, args: Record<string, unknown> = {}): Promise<{ status: number, json: Record<string, any> }> {
  return await post(app, ip, { jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name, arguments: args } }, headers(session))
}

async function modernCall (app: FastifyInstance, ip: string, name: string, args: Record<string, unknown>, caps: Record<string, unknown> = {}): Promise<Record<string, any>> {
  const body = rpc('tools/call', { name, arguments: args }, { caps })
  return (await post(app, ip, body, modernHeaders(body))).json
}

/** The victim: a session and a basket, each used once, then idle. */
async function victim (app: FastifyInstance): Promise<{ session: Session, basket: string }> {
  const session = await openSession(app, VICTIM)
  if ((await legacyCall(app, VICTIM, session, 'counter_add', { by: 5 })).json.result?.structuredContent?.counter !== 5) throw new Error('victim set-up failed')
  const basket = (await modernCall(app, VICTIM, 'basket_create', {})).result?.structuredContent?.basket as string
  await modernCall(app, VICTIM, 'basket_add', { basket, item: 'tea' })
  return { session, basket }
}

/** `initialize`, then one `ping` on the session: a session used, holding nothing. */
async function pinged (app: FastifyInstance, ip: string): Promise<Session> {
  const res = await post(app, ip, initializeBody(), headers())
  const s = { sid: res.headers['mcp-session-id'] as string, version: res.json.result.protocolVersion as string }
  const pong = await post(app, ip, { jsonrpc: '2.0', id: newId(), method: 'ping' }, headers(s))
  if (pong.status !== 200) throw new Error(`ping: ${pong.status}`)
  return s
}

async function ping (app: FastifyInstance, ip: string, s: Session): Promise<number> {
  return (await post(app, ip, { jsonrpc: '2.0', id: newId(), method: 'ping' }, headers(s))).status
}

async function assertSurvived (t: Test, app: FastifyInstance, v: { session: Session, basket: string }): Promise<void> {
  const counter = await legacyCall(app, VICTIM, v.session, 'counter_get')
  t.equal(counter.status, 200, 'the victim session is still there (not 404)')
  t.equal(counter.json.result?.structuredContent?.counter, 5, 'with its state')
  const items = await modernCall(app, VICTIM, 'basket_get', { basket: v.basket })
  t.same(items.result?.structuredContent?.items, ['tea'], 'the victim basket is still there, with its items')
}

t.test(`${MAX * 2} initialize + ping from one address against a full store: the victim session and basket survive`, async t => {
  const { app, store } = await build(t)
  const v = await victim(app)
  for (let i = 0; i < MAX * 2; i++) {
    const s = await openSession(app, ATTACKER)
    const pong = await post(app, ATTACKER, { jsonrpc: '2.0', id: newId(), method: 'ping' }, headers(s))
    if (pong.status !== 200) t.fail(`ping ${i}: ${pong.status}`)
  }
  t.equal(store.size, MAX, 'the store is full')
  await assertSurvived(t, app, v)
})

t.test(`${MAX * 2} anonymous tasks that finish at once from one address: the victim session and basket survive`, async t => {
  const { app, store } = await build(t)
  const v = await victim(app)
  let accepted = 0
  for (let i = 0; i < MAX * 2; i++) {
    const r = await modernCall(app, ATTACKER, 'long_job', { seconds: 0 }, TASKS)
    if (r.result?.resultType === 'task') accepted++
  }
  t.ok(accepted > MAX, `the tasks were made (${accepted}): the store overflowed`)
  t.ok(store.size <= MAX)
  await assertSurvived(t, app, v)
})

t.test(`${MAX * 2} initialize + ping from as many addresses of one IPv6 /64: one client, the victim survives`, async t => {
  const { app } = await build(t)
  const v = await victim(app)
  for (let i = 0; i < MAX * 2; i++) {
    const ip = `2001:db8:0:7:${(i + 1).toString(16)}::1`
    const s = await openSession(app, ip)
    await post(app, ip, { jsonrpc: '2.0', id: newId(), method: 'ping' }, headers(s))
  }
  await assertSurvived(t, app, v)
})

t.test('the bound that holds: a record goes only once no owner holds more than its owner', async t => {
  const store = new MemorySessionStore({ max: 10, sweepInterval: 0 })
  await store.create('victim', {}, { owner: 'a:198.51.100.7' })
  await store.load('victim')
  for (let i = 0; i < 50; i++) {
    await store.create(`flood-${i}`, {}, { owner: 'a:203.0.113.9' })
    await store.load(`flood-${i}`)
  }
  t.ok(await store.exists('victim'), 'one owner flooding: its own records go')
  t.ok(await store.exists('flood-49') && !await store.exists('flood-40'), 'the flooder keeps its most recent ones')
  // Nine more owners of one record each: the flooder's records go until it holds as many as they.
  for (let i = 0; i < 9; i++) await store.create(`other-${i}`, {}, { owner: `a:192.0.2.${i}` })
  t.ok(await store.exists('victim'), 'still there: the flooder held more')
  t.ok(await store.exists('flood-49'), 'the flooder keeps one, its most recent')
  t.notOk(await store.exists('flood-48'), 'its others went')
  // Every owner holds one record now: the usual order among them (never-used first, then LRU).
  t.notOk(await store.exists('other-0'), 'the oldest never-used record of an owner holding as many went')
  await store.create('one-more', {}, { owner: 'a:192.0.2.200' })
  t.notOk(await store.exists('other-1'))
  t.ok(await store.exists('victim'), 'a used record outlives the never-used ones of owners holding as many')
  // The victim goes once as many owners as the store holds records compete with it.
  for (let i = 0; i < 20; i++) {
    await store.create(`many-${i}`, {}, { owner: `a:192.0.2.${100 + i}` })
    await store.load(`many-${i}`)
  }
  t.notOk(await store.exists('victim'), 'past max owners of one record each, it goes (the documented bound)')
})

t.test('10,000 initialize + ping from the victim\'s own address (one NAT, one client): its session holding data and its basket holding an item survive', async t => {
  const { app, store } = await build(t, 1_000)
  const v = await victim(app)
  for (let i = 0; i < 10_000; i++) await pinged(app, VICTIM)
  t.equal(store.size, 1_000, 'the store is full')
  // The flood's sessions hold nothing: they went before the victim's records, made earlier and idle since.
  await assertSurvived(t, app, v)
})

t.test('1,100 single-session clients against max 1,000: the least recently active goes first, not the first to come', async t => {
  const { app, store } = await build(t, 1_000)
  // The victim came first, holds one session (holding nothing, like the flood's) and pings now and then.
  const mine = await pinged(app, VICTIM)
  const flood: Session[] = []
  for (let i = 0; i < 1_100; i++) {
    flood.push(await pinged(app, `10.1.${i >> 8}.${i & 255}`))
    if (i % 50 === 0) t.equal(await ping(app, VICTIM, mine), 200, `the victim's ping after ${i} clients`)
  }
  t.equal(store.size, 1_000, 'the store is full')
  t.equal(await ping(app, VICTIM, mine), 200, 'the victim, active all along, is still there')
  const gone: number[] = []
  for (let i = 0; i < flood.length; i++) if (!await store.exists(flood[i]!.sid)) gone.push(i)
  // 1,101 sessions for 1,000 places: 101 went, the flood's least recently active (its first).
  t.same(gone, Array.from({ length: 101 }, (_, i) => i), 'the first 101 clients of the flood went, in the order they went quiet')
})

t.test('finished tasks whose outcome the client read go before a session holding data, from the same address', async t => {
  const { app } = await build(t)
  const v = await victim(app)
  for (let i = 0; i < MAX * 2; i++) {
    const r = await modernCall(app, VICTIM, 'long_job', { seconds: 0 }, TASKS)
    const taskId = r.result?.taskId as string
    // Read until it ended: the outcome seen, the record is spent.
    for (let tries = 0; tries < 100; tries++) {
      const body = rpc('tasks/get', { taskId }, { caps: TASKS })
      const got = await post(app, VICTIM, body, modernHeaders(body))
      if (got.json.result?.status === 'completed') break
      await new Promise(resolve => setImmediate(resolve))
    }
  }
  await assertSurvived(t, app, v)
})
