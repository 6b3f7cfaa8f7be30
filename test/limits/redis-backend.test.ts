import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { LimitBackendTimeoutError, RedisLimitBackend, limitKeys } from '../../lib/limits/redis-backend.js'
import { LOCK_CLIENT_OPTIONS } from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { runLimitBackendContract } from './limit-contract.js'
import { until } from '../helpers/time.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => { admin.disconnect() })
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`

/**
 * A backend with its own fail-fast client (from the URL), or on `client` (disconnected in
 * teardown), connected, closed in teardown.
 */
async function newBackend (t: Test, options: { prefix?: string, timeout?: number, client?: Redis } = {}): Promise<RedisLimitBackend> {
  const { client, ...rest } = options
  if (client !== undefined) t.teardown(() => { client.disconnect() })
  const backend = new RedisLimitBackend({ redis: client ?? server.url, ...rest })
  t.teardown(() => backend.close())
  await backend.ready()
  return backend
}

async function keysUnder (prefix: string): Promise<string[]> {
  return await admin.keys(`${prefix}*`)
}

runLimitBackendContract(t, 'RedisLimitBackend', {
  // A prefix per backend: idle() looks at this backend's keys only.
  create: async (t) => await newBackend(t, { prefix: newPrefix() }),
  idle: async (t, backend) => {
    await until(async () => (await keysUnder(backend.prefix)).length === 0, { timeout: 10_000, what: 'every limit key expired' })
    t.same(await keysUnder(backend.prefix), [], 'no limit key left in Redis')
  }
})

t.test('keys: <prefix>{<tool>|<subject>}:b and :c, one hash tag, both expiring', async t => {
  const prefix = newPrefix()
  const backend = await newBackend(t, { prefix })
  const key = 'search|p:alice}{odd'
  const { bucket, leases } = limitKeys(prefix, key)
  t.equal(bucket, `${prefix}{search|p:alice}{odd}:b`)
  t.equal(leases, `${prefix}{search|p:alice}{odd}:c`)
  // One hash tag (`{search|p:alice}`: up to the first `}`), so one Cluster slot: the
  // contract also runs on a real Cluster (redis-cluster.test.ts), where a script touching two
  // slots would fail with CROSSSLOT.
  const spec = { intervalUs: 1_000_000, burst: 3, concurrency: 2, leaseMs: 5000 }
  t.match(await backend.acquire(key, spec, 'call-1'), { ok: true })
  t.equal(await admin.type(bucket), 'string')
  t.equal(await admin.type(leases), 'zset')
  const bucketTtl = await admin.pttl(bucket)
  t.ok(bucketTtl > 0 && bucketTtl <= 1000, `the bucket expires when full again: one token taken, ${bucketTtl} ms`)
  const leaseTtl = await admin.pttl(leases)
  t.ok(leaseTtl > 4000 && leaseTtl <= 5000, `the lease set expires a lease lifetime after its newest lease (${leaseTtl} ms)`)
  t.same(await admin.zrange(leases, '0', '-1'), ['call-1'])
  await backend.release(key, 'call-1')
  t.equal(await admin.exists(leases), 0, 'the last release deletes the set')
  t.equal(new RedisLimitBackend({ redis: admin }).prefix, 'mcp:', 'default prefix')
  t.throws(() => new RedisLimitBackend({ redis: admin, prefix: 'a{b' }), TypeError)
  t.throws(() => new RedisLimitBackend({ redis: admin, timeout: -1 }), RangeError)
})

t.test('a flood of distinct anonymous callers: every key has a TTL, and all are gone after expiry', async t => {
  const prefix = newPrefix()
  // 3000 checks at once on one connection: on a loaded machine the last ones wait longer than the
  // 500 ms command timeout of the backend's own fail-fast client. What is tested here is expiry,
  // so this backend's client (the fail-fast settings otherwise) and its check wait up to 10 s.
  const patient = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS, commandTimeout: 10_000 })
  const backend = await newBackend(t, { prefix, timeout: 10_000, client: patient })
  // Lifetimes long enough for every key to be there when counted, even on a loaded machine.
  const spec = { intervalUs: 2_000_000, burst: 2, concurrency: 3, leaseMs: 3000 }
  const n = 3000
  const decisions = await Promise.all(Array.from({ length: n }, async (_, i) =>
    await backend.acquire(`search|a:${10 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}.1`, spec, `c${i}`)))
  t.equal(decisions.filter(d => d.ok).length, n)
  const keys = await keysUnder(prefix)
  t.equal(keys.length, 2 * n, 'a bucket and a lease set per caller')
  const ttls = await Promise.all(keys.map(async k => await admin.pttl(k)))
  t.equal(ttls.filter(ms => ms <= 0).length, 0, 'no key without an expiry')
  t.ok(Math.max(...ttls) <= 3000, 'none outlives a lease lifetime')
  // Nobody releases (a crashed instance): everything still expires.
  await until(async () => (await keysUnder(prefix)).length === 0, { timeout: 15_000, what: 'the flood to expire' })
  t.pass('no key left')
})

t.test('a check Redis does not answer in time rejects; a lease it took late is given back', async t => {
  const prefix = newPrefix()
  // An injected client with an offline queue and retries: only the backend's timeout bounds it.
  const backend = await newBackend(t, { prefix, timeout: 200, client: new Redis(server.url) })
  const spec = { intervalUs: 0, burst: 0, concurrency: 5, leaseMs: 60_000 }
  t.match(await backend.acquire('slow|p:a', spec, 'before'), { ok: true })
  server.pause()
  let resumed = false
  t.teardown(() => { if (!resumed) server.resume() })
  const started = performance.now()
  const err = await backend.acquire('slow|p:a', spec, 'late').then(() => null, (e: unknown) => e)
  const elapsed = performance.now() - started
  t.type(err, LimitBackendTimeoutError)
  t.ok(elapsed >= 190 && elapsed < 5000, `rejected after the timeout (${Math.round(elapsed)} ms)`)
  server.resume()
  resumed = true
  // The paused server runs the queued script once thawed; the late lease is then released.
  const { leases } = limitKeys(prefix, 'slow|p:a')
  await until(async () => (await admin.zrange(leases, '0', '-1')).join() === 'before', { timeout: 5000, what: 'the late lease to be released' })
  t.same(await admin.zrange(leases, '0', '-1'), ['before'], 'only the lease answered in time is held')
  await backend.release('slow|p:a', 'before')
})

t.test('the scripts survive SCRIPT FLUSH (EVALSHA falls back to EVAL)', async t => {
  const backend = await newBackend(t, { prefix: newPrefix() })
  const spec = { intervalUs: 1000, burst: 1, concurrency: 1, leaseMs: 1000 }
  t.match(await backend.acquire('f|p:a', spec, 'one'), { ok: true })
  await admin.script('FLUSH')
  t.equal(await backend.renew('f|p:a', 'one', 1000), true)
  await backend.release('f|p:a', 'one')
  t.match(await backend.acquire('f|p:b', spec, 'two'), { ok: true })
})
