/**
 * The limit backend contract on a real 3-master Redis Cluster: both keys of a (tool, caller)
 * share a hash tag, so each script runs on one slot (a script touching two slots fails with
 * CROSSSLOT), and the callers spread over the masters.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { Cluster } from 'ioredis'
import { RedisLimitBackend } from '../../lib/limits/redis-backend.js'
import { startRedisCluster } from '../helpers/redis-cluster.js'
import { runLimitBackendContract } from './limit-contract.js'
import { until } from '../helpers/time.js'

const cluster = await startRedisCluster(t)
const client = new Cluster(cluster.nodes)
t.teardown(() => { client.disconnect() })

/** Keys under `prefix` on every master. */
async function keysUnder (prefix: string): Promise<string[]> {
  const perNode = await Promise.all(client.nodes('master').map(async node => await node.keys(`${prefix}*`)))
  return perNode.flat()
}

runLimitBackendContract(t, 'RedisLimitBackend on a Cluster', {
  create: (t) => {
    const backend = new RedisLimitBackend({ redis: client, prefix: `test:${randomBytes(4).toString('hex')}:` })
    t.teardown(() => backend.close())
    return backend
  },
  idle: async (t, backend) => {
    await until(async () => (await keysUnder(backend.prefix)).length === 0, { timeout: 15_000, what: 'every limit key expired' })
    t.same(await keysUnder(backend.prefix), [], 'no limit key left on any master')
  }
})

t.test('callers spread over the masters', async t => {
  const prefix = `test:${randomBytes(4).toString('hex')}:`
  const backend = new RedisLimitBackend({ redis: client, prefix })
  const spec = { intervalUs: 5_000_000, burst: 1, concurrency: 1, leaseMs: 5000 }
  for (let i = 0; i < 30; i++) t.match(await backend.acquire(`spread|p:user${i}`, spec, 'c'), { ok: true })
  const perNode = await Promise.all(client.nodes('master').map(async node => (await node.keys(`${prefix}*`)).length))
  t.equal(perNode.reduce((a, b) => a + b, 0), 60)
  t.ok(perNode.filter(n => n > 0).length >= 2, `on several masters: ${perNode.join(', ')}`)
})
