/**
 * Replica acknowledgement (MCP_REDIS_WAIT_REPLICAS / MCP_REDIS_WAIT_TIMEOUT_MS, the store's and
 * the lock's `waitReplicas`): with the only replica paused (SIGSTOP), nothing is answered as kept.
 *
 * - a call on a state handle: the lease is not confirmed, the handler never runs (its item is
 *   absent), the client gets 503 + Retry-After + "could not be confirmed";
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
import { modernPost, readReply, type Reply } from '../helpers/http-client.js'
import { initializeBody, headers } from '../helpers/wire.js'
import { startSentinelDeployment } from '../helpers/redis-sentinel.js'

t.setTimeout(120_000)

const UNCONFIRMED = 'The change could not be confirmed by enough replicas: it may or may not have been kept; retry later.'
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

async function call (url: string, name: string, args: Record<string, unknown>): Promise<Reply & { retryAfter: string | null }> {
  const res = await modernPost(url, 'tools/call', { name, arguments: args })
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

t.test('with waitReplicas: a paused replica → 503 unconfirmed, nothing reported as kept', async t => {
  const basket = await basketOf(acked.url)
  t.equal((await call(acked.url, 'basket_add', { basket, item: 'first' })).status, 200, 'acknowledged while the replica runs')
  replica.pause()
  try {
    unconfirmed(t, await call(acked.url, 'basket_add', { basket, item: 'never' }), 'a call on a handle')
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
    unconfirmed(t, await call(defaulted.url, 'basket_add', { basket, item: 'never' }), 'a call on a handle under the default lock')
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
