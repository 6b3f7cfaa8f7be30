/**
 * Sentinel: the demo configured with MCP_REDIS_SENTINELS + MCP_REDIS_MASTER (store, lock, and the
 * plugin's own client for the bus and event log, all made by the plugin's client factory) serves
 * a state handle and a session through a failover, without a restart:
 *
 * - SENTINEL FAILOVER (the old primary is demoted under the clients: a write reaching it fails
 *   READONLY, and the clients reconnect to the new primary);
 * - the primary killed (SIGKILL): calls fail until the sentinels promote the replica, then
 *   succeed again.
 *
 * Every call is on the same process, so the clients followed the primary; what the handle and
 * the session hold afterwards is what was answered as kept (a controlled failover loses nothing:
 * the replica is in sync before it is promoted).
 *
 * Fencing across a promotion: a lease taken while the replica got nothing is missing on the
 * promoted replica; a second holder takes it there, and the first holder's fenced save is
 * refused (while the second holds the lease, and after it released: the version moved on).
 *
 * A client the plugin made is connected again after ioredis' own `disconnect(true)` cut one of its
 * connection attempts (only its owner's `quit()` or `disconnect()` closes it for good).
 */
import t from 'tap'
import type { AddressInfo } from 'node:net'
import { buildDemo } from '../../examples/server.js'
import { RedisSessionLock, RedisSessionStore, createRedisClient, type RedisClientLike } from '../../lib/index.js'
import { callTool, initialize, modernPost, readReply, type Reply } from '../helpers/http-client.js'
import { startSentinelDeployment } from '../helpers/redis-sentinel.js'

t.setTimeout(180_000)

const deployment = await startSentinelDeployment(t, { downAfterMs: 1000 })
const app = await buildDemo({
  logger: false,
  env: {
    MCP_STORE: 'redis',
    MCP_LOCK: 'redis',
    MCP_REDIS_SENTINELS: deployment.sentinelList,
    MCP_REDIS_MASTER: deployment.masterName,
    MCP_STATE_SECRET: 'sentinel-failover-test-secret'
  }
})
await app.listen({ port: 0, host: '127.0.0.1' })
t.teardown(async () => { await app.close() })
const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp`

async function call (name: string, args: Record<string, unknown>): Promise<Reply> {
  return await readReply(await modernPost(url, 'tools/call', { name, arguments: args }))
}

/** Retries a call until it succeeds (at most `ms`); the failures before it and the seconds it took. */
async function untilOk (what: () => Promise<Reply>, ms = 30_000): Promise<{ reply: Reply, failed: number, seconds: number }> {
  const started = performance.now()
  let failed = 0
  for (;;) {
    const reply = await what().catch(() => undefined)
    if (reply !== undefined && reply.status === 200 && reply.last?.result !== undefined && reply.last.result.isError !== true) {
      return { reply, failed, seconds: (performance.now() - started) / 1000 }
    }
    failed++
    if (performance.now() - started > ms) throw new Error(`no success within ${ms} ms: ${reply?.status} ${reply?.text}`)
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

const created = await untilOk(async () => await call('basket_create', {}))
const basket = created.reply.last?.result.structuredContent.basket as string
const session = await initialize(url)
const kept: string[] = []
let counter = 0

async function addBoth (item: string): Promise<{ failed: number, seconds: number }> {
  const added = await untilOk(async () => await call('basket_add', { basket, item }))
  kept.push(item)
  const counted = await untilOk(async () => await callTool(url, session, 'counter_add', { amount: 1 }))
  counter = counted.reply.last?.result.structuredContent.counter
  return { failed: added.failed + counted.failed, seconds: Math.max(added.seconds, counted.seconds) }
}

await addBoth('before')

t.test('SENTINEL FAILOVER: the same process serves the handle and the session on the new primary', async t => {
  const old = await deployment.primaryPort()
  const promoted = await deployment.failover()
  t.not(promoted, old, 'the sentinels promoted the replica')
  const blip = await addBoth('after-failover')
  t.comment(`after SENTINEL FAILOVER: ${blip.failed} failed calls, ${blip.seconds.toFixed(1)} s until success`)
  const items = (await untilOk(async () => await call('basket_get', { basket }))).reply.last?.result.structuredContent.items
  t.same(items, kept, 'every item answered as kept is there, once')
  t.equal(counter, 2, 'the session counter counted both calls')
})

t.test('the primary killed: calls succeed again once the replica is promoted', async t => {
  await deployment.awaitSettled()
  const { primary } = await deployment.roles()
  await primary.kill()
  const blip = await addBoth('after-kill')
  t.comment(`after the primary was killed: ${blip.failed} failed calls, ${blip.seconds.toFixed(1)} s until success`)
  // The client may learn of the promotion from one sentinel before the one asked here has it.
  t.not(await deployment.awaitPromotion(primary.port, 10_000), primary.port, 'another server is primary')
  // A read right after may still meet the end of the client's switch to the new primary: retried.
  const items = (await untilOk(async () => await call('basket_get', { basket }))).reply.last?.result.structuredContent.items
  t.same(items, kept, 'every item answered as kept is there, once')
  t.equal(counter, 3)
  // The old primary comes back as a replica of the new one (the sentinels turn it).
  await primary.start()
})

t.test('fencing across a promotion: a lease lost in the failover cannot write over the new holder', async t => {
  // Two "processes": each its own store and lock clients, made from the Sentinel connection.
  const connection = { sentinels: deployment.sentinels, name: deployment.masterName }
  const make = (): { store: RedisSessionStore, lock: RedisSessionLock, client: RedisClientLike } => {
    const client = createRedisClient(connection)
    return { client, store: new RedisSessionStore({ redis: client, prefix: 'fence:' }), lock: new RedisSessionLock({ redis: connection, ttl: 3000, timeout: 10_000, prefix: 'fence:' }) }
  }
  const a = make()
  const b = make()
  t.teardown(async () => {
    for (const p of [a, b]) { await p.lock.close(); await p.client.quit().catch(() => p.client.disconnect()) }
  })
  await deployment.awaitSettled()
  await until(async () => { await a.store.create('s', { n: 0 }); return true })
  await deployment.awaitSettled() // the session is on the replica too
  await a.lock.ready()
  await b.lock.ready()

  // A takes the lease and reads while the replica gets nothing: the promoted replica lacks the lease.
  const { primary, replica } = await deployment.roles()
  replica.pause()
  await deployment.dropReplicaLinks(primary)
  const leaseA = await a.lock.acquire('s')
  const readA = await a.store.load('s')
  t.type(readA?.version, 'number')
  await primary.kill()
  replica.resume()
  await deployment.awaitPromotion(primary.port)

  // B takes the lease on the promoted primary (nobody holds it there) and saves.
  const leaseB = await until(async () => await b.lock.acquire('s', { timeout: 0 }))
  // B's store client may reach the new primary a moment after its lock client: retried like the lease.
  const readB = await until(async () => await b.store.load('s'))
  t.same(readB?.data, { n: 0 })
  t.equal(await until(async () => await b.store.save('s', { set: { n: 1 }, delete: [] }, { fence: leaseB.fence, version: readB?.version })), 'ok', 'the new holder saves')
  // The old holder wakes up and saves under its lost lease: refused while B holds it ...
  t.equal(await until(async () => await a.store.save('s', { set: { n: 99 }, delete: [] }, { fence: leaseA.fence, version: readA?.version })),
    'fenced', 'the stale holder is refused while the new holder holds the lease')
  await leaseB.release()
  // ... and after B let go: the state moved past the version it read.
  t.equal(await a.store.save('s', { set: { n: 99 }, delete: [] }, { fence: leaseA.fence, version: readA?.version }), 'fenced',
    'the stale holder is refused after the new holder released (the version moved on)')
  t.same((await b.store.load('s'))?.data, { n: 1 }, 'what the new holder saved stands')
  await leaseA.release().catch(() => {})
  await primary.start()
})

t.test('a Sentinel client is connected again after ioredis cut its own connection attempt with disconnect(true): a reconnect, not a close', async t => {
  const client = createRedisClient({ sentinels: deployment.sentinels, name: deployment.masterName })
  let ownerClosed = false
  t.teardown(async () => { ownerClosed = true; await client.quit().catch(() => client.disconnect()) })
  await until(async () => await client.exists('revive:none'))
  // ioredis calls disconnect(true) itself on a READONLY reply or a node that is not the primary;
  // one that cuts the next attempt while it asks the sentinels ends the client.
  const ended = new Promise(resolve => client.once('end', resolve))
  client.once('connecting', () => { client.disconnect(true) })
  client.disconnect(true)
  await ended
  t.equal(client.status, 'end', 'the cut attempt ended the client')
  t.equal(await until(async () => await client.exists('revive:none')), 0, 'the client was connected again')
  t.notOk(ownerClosed)
})

/** Retries `fn` (a client reconnecting after a promotion fails fast meanwhile) for up to 30 s. */
async function until<T> (fn: () => Promise<T>): Promise<T> {
  const deadline = performance.now() + 30_000
  for (;;) {
    try {
      return await fn()
    } catch (err) {
      if (performance.now() > deadline) throw err
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  }
}
