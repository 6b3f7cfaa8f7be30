/**
 * Replica acknowledgement (MCP_REDIS_WAIT_REPLICAS / MCP_REDIS_WAIT_TIMEOUT_MS, the store's and
 * the lock's `waitReplicas`): with the only replica paused (SIGSTOP), nothing is answered as kept.
 *
 * - a call on a state handle: the lease is not confirmed, so it is let go and the handler never
 *   runs (its item is absent); the client gets 503 + Retry-After + "nothing was done" (reason
 *   `lease_unconfirmed`), not the "may or may not have been kept" of an unconfirmed save;
 * - what changes nothing takes no lease and waits for no replica: a session's ping, tools/list and
 *   a read-only tool answer 200 while the replica is paused; a session's writing call gets the
 *   lease's refusal and its counter is unchanged;
 * - a task create: the lease unconfirmed → "nothing was done"; the record unconfirmed (a Redis
 *   store with waitReplicas and `lock: false`, so that no lease comes first) → "unconfirmed";
 * - the replica paused while the handler runs: the lease was confirmed, the save is not → the
 *   same 503 (the item may be there or not: unconfirmed, not "not saved");
 * - a handle mint (basket_create) and a session (initialize): the same 503;
 * - the replica back: calls succeed again.
 * Without the setting, the same paused replica lets every call answer success: what a failover
 * then loses was told kept (the contrast that makes the setting worth its round trip).
 */
import t, { type Test } from 'tap'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { buildDemo } from '../../examples/server.js'
import Fastify from 'fastify'
import mcp, { RedisSessionStore, createRedisClient } from '../../lib/index.js'
import { callTool, counterIn, initialize, modernSend, post, readReply, type Reply } from '../helpers/http-client.js'
import { initializeBody, headers, rpc } from '../helpers/wire.js'
import { startSentinelDeployment } from '../helpers/redis-sentinel.js'
import { registerDemoTools } from '../../examples/demo-tools.js'

t.setTimeout(120_000)

const UNCONFIRMED = 'The change could not be confirmed by enough replicas: it may or may not have been kept; retry later.'
const LEASE_UNCONFIRMED = 'The lock could not be confirmed by enough replicas: nothing was done; retry later.'
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } }
const deployment = await startSentinelDeployment(t, { downAfterMs: 60_000 })
// The sentinels settle (they may reconfigure the replica once) and the replica is in sync.
await deployment.awaitSettled()
const { replica } = await deployment.roles()

async function demo (extra: Record<string, string | undefined>): Promise<{ url: string, app: FastifyInstance }> {
  const app = await buildDemo({
    logger: false,
    env: {
      MCP_STORE: 'redis',
      MCP_LOCK: 'redis',
      MCP_LOCK_TIMEOUT_MS: '2000',
      MCP_REDIS_SENTINELS: deployment.sentinelList,
      MCP_REDIS_MASTER: deployment.masterName,
      MCP_STATE_SECRET: 'replica-ack-test-secret',
      ...extra
    }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => { await app.close() })
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp` }
}

const acked = await demo({ MCP_REDIS_WAIT_REPLICAS: '1', MCP_REDIS_WAIT_TIMEOUT_MS: '300' })
const plain = await demo({})
// No MCP_LOCK: the plugin's default lock, on the store's client (which lends it its waitReplicas).
const defaulted = await demo({ MCP_LOCK: undefined, MCP_REDIS_WAIT_REPLICAS: '1', MCP_REDIS_WAIT_TIMEOUT_MS: '300' })

async function call (url: string, name: string, args: Record<string, unknown>, caps?: Record<string, unknown>): Promise<Reply & { retryAfter: string | null }> {
  const res = await modernSend(url, rpc('tools/call', { name, arguments: args }, { caps }))
  return { ...await readReply(res), retryAfter: res.headers.get('retry-after') }
}

async function basketOf (url: string): Promise<string> {
  const r = await call(url, 'basket_create', {})
  const basket = r.last?.result?.structuredContent?.basket
  if (typeof basket !== 'string') throw new Error(`basket_create failed: ${r.status} ${r.text}`)
  return basket
}

const itemsOf = async (url: string, basket: string): Promise<string[]> =>
  (await call(url, 'basket_get', { basket })).last?.result?.structuredContent?.items

function unconfirmed (t: Test, r: Reply & { retryAfter: string | null }, what: string): void {
  t.equal(r.status, 503, `${what}: 503`)
  t.equal(r.last?.error?.message, UNCONFIRMED, `${what}: the change could not be confirmed`)
  t.equal(r.last?.error?.data?.reason, 'unconfirmed')
  t.ok(Number(r.retryAfter) >= 1, `${what}: Retry-After`)
}

/** The refusal of a lease too few replicas confirmed: nothing was done, retry. */
function leaseUnconfirmed (t: Test, r: Reply & { retryAfter: string | null }, what: string): void {
  t.equal(r.status, 503, `${what}: 503`)
  t.equal(r.last?.error?.message, LEASE_UNCONFIRMED, `${what}: nothing was done`)
  t.equal(r.last?.error?.data?.reason, 'lease_unconfirmed')
  t.ok(Number(r.retryAfter) >= 1, `${what}: Retry-After`)
}

t.test('with waitReplicas: a paused replica → 503 unconfirmed, nothing reported as kept', async t => {
  const basket = await basketOf(acked.url)
  t.equal((await call(acked.url, 'basket_add', { basket, item: 'first' })).status, 200, 'acknowledged while the replica runs')
  replica.pause()
  try {
    leaseUnconfirmed(t, await call(acked.url, 'basket_add', { basket, item: 'never' }), 'a call on a handle')
    unconfirmed(t, await call(acked.url, 'basket_create', {}), 'a handle mint')
    const init = await fetch(acked.url, { method: 'POST', headers: headers(null), body: JSON.stringify(initializeBody()) })
    const initReply = { ...await readReply(init), retryAfter: init.headers.get('retry-after') }
    unconfirmed(t, initReply, 'a session')
    t.equal(init.headers.get('mcp-session-id'), null, 'no session id handed out')
  } finally {
    replica.resume()
  }
  t.same(await itemsOf(acked.url, basket), ['first'], 'the lease was not confirmed: the handler never ran')
  t.equal((await call(acked.url, 'basket_add', { basket, item: 'second' })).status, 200, 'the replica back: calls succeed again')
  t.same(await itemsOf(acked.url, basket), ['first', 'second'])
})

t.test('with waitReplicas and the default lock: the lease and the save are confirmed as with the Redis lock', async t => {
  const basket = await basketOf(defaulted.url)
  t.equal((await call(defaulted.url, 'basket_add', { basket, item: 'first' })).status, 200)
  replica.pause()
  try {
    leaseUnconfirmed(t, await call(defaulted.url, 'basket_add', { basket, item: 'never' }), 'a call on a handle under the default lock')
  } finally {
    replica.resume()
  }
  t.same(await itemsOf(defaulted.url, basket), ['first'], 'the lease was not confirmed: the handler never ran')
})

t.test('with waitReplicas: the replica paused while the handler runs → the save is unconfirmed', async t => {
  const basket = await basketOf(acked.url)
  const running = call(acked.url, 'basket_add', { basket, item: 'maybe', delayMs: 600 })
  await new Promise(resolve => setTimeout(resolve, 300))
  replica.pause()
  let r
  try {
    r = await running
  } finally {
    replica.resume()
  }
  unconfirmed(t, r, 'the save')
})

t.test('without waitReplicas: the same paused replica, and every call is told success', async t => {
  const basket = await basketOf(plain.url)
  replica.pause()
  let r
  try {
    r = await call(plain.url, 'basket_add', { basket, item: 'unreplicated' })
  } finally {
    replica.resume()
  }
  t.equal(r.status, 200)
  t.equal(r.last?.result?.structuredContent?.count, 1, 'answered as kept though no replica holds it')
})

t.test('with waitReplicas: what changes nothing waits for no replica; a writing call is refused with nothing done', async t => {
  const session = await initialize(acked.url)
  t.equal(counterIn(await callTool(acked.url, session, 'counter_add', { by: 1 })), 1)
  const basket = await basketOf(acked.url)
  replica.pause()
  let ping, list, unmarked, handleRead, add
  try {
    ping = await post(acked.url, { jsonrpc: '2.0', id: 1, method: 'ping' }, session)
    list = await post(acked.url, { jsonrpc: '2.0', id: 2, method: 'tools/list' }, session)
    const get = await fetch(acked.url, {
      method: 'POST',
      headers: headers(session),
      body: JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'counter_get', arguments: {} } })
    })
    unmarked = { ...await readReply(get), retryAfter: get.headers.get('retry-after') }
    handleRead = await call(acked.url, 'basket_get', { basket })
    const res = await fetch(acked.url, {
      method: 'POST',
      headers: headers(session),
      body: JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'counter_add', arguments: { by: 100 } } })
    })
    add = { ...await readReply(res), retryAfter: res.headers.get('retry-after') }
  } finally {
    replica.resume()
  }
  t.equal(ping.status, 200, 'a ping: no lease, no wait')
  t.same(ping.last?.result, {})
  t.equal(list.status, 200, 'tools/list: no lease, no wait')
  t.ok(Array.isArray(list.last?.result?.tools))
  t.equal(handleRead.status, 200, 'a read-only tool (readOnlyHint) on a handle: a snapshot')
  t.same(handleRead.last?.result?.structuredContent?.items, [])
  // counter_get reads only, but does not say so (no readOnlyHint): it may write, so it takes the lease.
  leaseUnconfirmed(t, unmarked, 'a tool not marked read-only')
  leaseUnconfirmed(t, add, 'a writing call on the session')
  t.equal(counterIn(await callTool(acked.url, session, 'counter_get')), 1, 'nothing was done: the counter is unchanged')
})

t.test('with waitReplicas: a task whose lease is not confirmed → nothing was done', async t => {
  replica.pause()
  let r
  try {
    r = await call(acked.url, 'long_job', { seconds: 0 }, TASKS)
  } finally {
    replica.resume()
  }
  leaseUnconfirmed(t, r, 'a task create')
  t.equal(r.last?.result, undefined, 'no task handed out')
})

t.test('with waitReplicas on the store and lock: false: a task whose record is not confirmed → unconfirmed, not "cannot be created"', async t => {
  const redis = createRedisClient({ sentinels: deployment.sentinels, name: deployment.masterName }, { waitReplicas: 1, waitTimeoutMs: 300 })
  const app = Fastify({ logger: false })
  t.teardown(async () => { await app.close(); await redis.quit().catch(() => {}) })
  // A fail-fast client refuses commands until it is connected.
  if (redis.status !== 'ready') await new Promise(resolve => redis.once('ready', resolve))
  await app.register(mcp, { sessions: { store: new RedisSessionStore({ redis }), lock: false }, requestState: { secret: 'replica-ack-test-secret' } })
  registerDemoTools(app.mcp)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp`
  const created = await call(url, 'long_job', { seconds: 0 }, TASKS)
  t.equal(created.status, 200, `the replica running: a task is created (${created.text.slice(0, 200)})`)
  replica.pause()
  let r
  try {
    r = await call(url, 'long_job', { seconds: 0 }, TASKS)
  } finally {
    replica.resume()
  }
  unconfirmed(t, r, 'a task create whose record is unconfirmed')
})
