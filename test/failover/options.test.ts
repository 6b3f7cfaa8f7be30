/**
 * The Sentinel and replica-acknowledgement options, checked before anything connects: the
 * sentinel list parser (the demo's MCP_REDIS_SENTINELS), `waitReplicas` / `waitTimeoutMs`, the
 * plugin's `redis` option taking `{ sentinels, name }`, and the refusals (a Cluster, a client
 * scripted already without the setting).
 */
import t from 'tap'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import mcp, { RedisSessionLock, RedisSessionStore, parseSentinels } from '../../lib/index.js'
import { replicaAckOf, requireReplicaAck, isUnconfirmed, isUnconfirmedLease, UnconfirmedLeaseError, UnconfirmedWriteError } from '../../lib/redis/replica-ack.js'
import { isSentinelConnection } from '../../lib/redis/sentinel.js'

t.test('parseSentinels', async t => {
  t.same(parseSentinels('127.0.0.1:26379, h2:26380'), [{ host: '127.0.0.1', port: 26379 }, { host: 'h2', port: 26380 }])
  t.same(parseSentinels('[::1]:26379'), [{ host: '::1', port: 26379 }])
  for (const bad of ['', ',', 'host', 'host:', ':26379', 'host:0', 'host:70000', 'host:abc']) {
    t.throws(() => parseSentinels(bad), RangeError, JSON.stringify(bad))
  }
  const huge = `${'x'.repeat(1 << 20)}:nope`
  let message = ''
  try { parseSentinels(huge) } catch (err) { message = (err as Error).message }
  t.ok(message.length > 0 && message.length < 300, 'a 1 MiB entry is refused without being echoed whole')
})

t.test('replicaAckOf', async t => {
  t.equal(replicaAckOf({}), undefined, 'off by default')
  t.equal(replicaAckOf({ waitReplicas: 0 }), undefined, '0 is off')
  t.same(replicaAckOf({ waitReplicas: 1 }), { replicas: 1, timeoutMs: 200 })
  t.same(replicaAckOf({ waitReplicas: 2, waitTimeoutMs: 50 }), { replicas: 2, timeoutMs: 50 })
  for (const bad of [{ waitReplicas: -1 }, { waitReplicas: 1.5 }, { waitReplicas: Number.NaN }, { waitReplicas: 1, waitTimeoutMs: 0 },
    { waitReplicas: 1, waitTimeoutMs: -5 }, { waitTimeoutMs: 100 }, { waitReplicas: 101 }, { waitReplicas: 1, waitTimeoutMs: 10_001 }]) {
    t.throws(() => replicaAckOf(bad), RangeError, JSON.stringify(bad))
  }
})

t.test('requireReplicaAck refuses a Cluster and a client scripted already', async t => {
  t.throws(() => requireReplicaAck({ isCluster: true }, { replicas: 1, timeoutMs: 100 }), TypeError)
  const client = new Redis({ lazyConnect: true })
  t.teardown(() => { client.disconnect() })
  const store = new RedisSessionStore({ redis: client as never })
  t.ok(store)
  t.throws(() => new RedisSessionLock({ redis: client as never, waitReplicas: 1 }), /before the client is handed/)
  const marked = new Redis({ lazyConnect: true })
  t.teardown(() => { marked.disconnect() })
  const lock = new RedisSessionLock({ redis: marked as never, waitReplicas: 1, waitTimeoutMs: 100 })
  t.ok(new RedisSessionStore({ redis: marked as never, waitReplicas: 1, waitTimeoutMs: 100 }), 'the same setting again is fine')
  t.throws(() => new RedisSessionStore({ redis: marked as never, waitReplicas: 2 }), /another number of replicas/)
  await lock.close()
})

t.test('a RedisSessionStore and a RedisSessionLock whose waitReplicas differ fail the registration, naming sessions.lock', async t => {
  const clients: Redis[] = []
  const client = (): Redis => { const c = new Redis({ lazyConnect: true }); clients.push(c); return c }
  t.teardown(() => { for (const c of clients) c.disconnect() })
  const pairs: Array<[string, () => { store: RedisSessionStore, lock: RedisSessionLock }, boolean]> = [
    ['the store waits, the lock does not', () => ({ store: new RedisSessionStore({ redis: client() as never, waitReplicas: 1 }), lock: new RedisSessionLock({ redis: client() as never }) }), false],
    ['the lock waits, the store does not', () => ({ store: new RedisSessionStore({ redis: client() as never }), lock: new RedisSessionLock({ redis: client() as never, waitReplicas: 1 }) }), false],
    ['another timeout', () => ({
      store: new RedisSessionStore({ redis: client() as never, waitReplicas: 1, waitTimeoutMs: 100 }),
      lock: new RedisSessionLock({ redis: client() as never, waitReplicas: 1 })
    }), false],
    ['the same setting', () => ({
      store: new RedisSessionStore({ redis: client() as never, waitReplicas: 1, waitTimeoutMs: 100 }),
      lock: new RedisSessionLock({ redis: client() as never, waitReplicas: 1, waitTimeoutMs: 100 })
    }), true],
    ['neither waits', () => ({ store: new RedisSessionStore({ redis: client() as never }), lock: new RedisSessionLock({ redis: client() as never }) }), true]
  ]
  for (const [what, make, ok] of pairs) {
    const { store, lock } = make()
    const app = Fastify({ logger: false })
    // Registered, not started: the check runs when the plugin registers (ready() would wait for
    // these lazy clients to connect).
    const ready = (async () => {
      await app.register(mcp, { sessions: { store, lock } })
      await app.after()
    })()
    if (ok) await t.resolves(ready, what)
    else await t.rejects(ready, { code: 'FST_ERR_MCP_INVALID_OPTION', message: /"sessions\.lock".*replica acknowledgement/ }, what)
    await app.close()
    await lock.close()
  }
})

t.test('isUnconfirmed follows the cause chain', async t => {
  const unconfirmed = new UnconfirmedWriteError(0, 1)
  t.ok(isUnconfirmed(unconfirmed))
  t.ok(isUnconfirmed(new Error('lock', { cause: unconfirmed })))
  t.notOk(isUnconfirmed(new Error('other')))
  t.notOk(isUnconfirmed('text'))
  const lease = new UnconfirmedLeaseError(0, 1)
  t.ok(isUnconfirmed(lease), 'an unconfirmed lease is an unconfirmed write')
  t.ok(isUnconfirmedLease(new Error('lock', { cause: lease })))
  t.notOk(isUnconfirmedLease(unconfirmed), 'an unconfirmed save is not an unconfirmed lease')
})

t.test('the plugin takes { sentinels, name } as its redis option, and refuses other objects', async t => {
  const conn = { sentinels: [{ host: '127.0.0.1', port: 1 }], name: 'mymaster', lazyConnect: true, sentinelRetryStrategy: () => null }
  t.ok(isSentinelConnection(conn))
  const app = Fastify({ logger: false })
  await app.register(mcp, { redis: conn })
  await app.ready()
  await app.close()
  const bad = Fastify({ logger: false })
  await t.rejects(async () => {
    await bad.register(mcp, { redis: { sentinels: 'x' } as never })
    await bad.ready()
  }, /Invalid option "redis"/)
})
