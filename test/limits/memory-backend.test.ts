import t from 'tap'
import { MemoryLimitBackend } from '../../lib/limits/memory-backend.js'
import { runLimitBackendContract } from './limit-contract.js'
import { sleep, until } from '../helpers/time.js'

runLimitBackendContract(t, 'MemoryLimitBackend', {
  create: (t) => {
    const backend = new MemoryLimitBackend()
    t.teardown(() => backend.close())
    return backend
  },
  idle: async (t, backend) => {
    await until(() => { backend.sweep(); return backend.size === 0 }, { timeout: 5000, what: 'no entry left' })
    t.equal(backend.size, 0, 'no entry left after the sweep')
  }
})

t.test('a flood of distinct callers never holds more than `max` entries', async t => {
  const backend = new MemoryLimitBackend({ max: 100, sweepInterval: 0 })
  t.teardown(() => backend.close())
  const spec = { intervalUs: 60_000_000, burst: 1, concurrency: 0, leaseMs: 1000 }
  let allowed = 0
  let largest = 0
  for (let i = 0; i < 5000; i++) {
    if ((await backend.acquire(`flood|a:10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, spec, 'x')).ok) allowed++
    largest = Math.max(largest, backend.size)
  }
  t.equal(allowed, 5000, 'every new caller starts with a full bucket')
  t.equal(largest, 100, 'never more than max entries')
  t.equal(backend.size, 100, 'full, not beyond')
  const recent = 'flood|a:10.0.19.135' // the 5000th
  t.match(await backend.acquire(recent, spec, 'x'), { ok: false, limit: 'rate' }, 'the most recent callers are kept')
  t.match(await backend.acquire('flood|a:10.0.0.0', spec, 'x'), { ok: true }, 'the least recently used were evicted (a full bucket again)')
})

t.test('idle entries at the front are dropped lazily, without a sweep', async t => {
  const backend = new MemoryLimitBackend({ sweepInterval: 0 })
  t.teardown(() => backend.close())
  const short = { intervalUs: 20_000, burst: 1, concurrency: 0, leaseMs: 1000 }
  const long = { intervalUs: 60_000_000, burst: 1, concurrency: 0, leaseMs: 1000 }
  for (let i = 0; i < 50; i++) await backend.acquire(`a|a:${i}`, short, 'x')
  t.ok(backend.size <= 50)
  await sleep(100) // every short bucket full again: idle
  for (let i = 0; i < 50; i++) await backend.acquire(`b|a:${i}`, long, 'x')
  // Each new key drops up to 2 idle entries from the front: the old ones are gone; the new ones
  // (a minute from full) stay.
  t.equal(backend.size, 50, 'only the new entries are left')
})

t.test('the sweep timer removes idle entries on its own', async t => {
  const backend = new MemoryLimitBackend({ sweepInterval: 50 })
  t.teardown(() => backend.close())
  const spec = { intervalUs: 10_000, burst: 1, concurrency: 2, leaseMs: 100 }
  for (let i = 0; i < 20; i++) await backend.acquire(`s|a:${i}`, spec, `c${i}`)
  await until(() => backend.size === 0, { timeout: 5000, what: 'the sweep' })
  t.equal(backend.size, 0)
})

t.test('options are checked', async t => {
  t.throws(() => new MemoryLimitBackend({ max: 0 }), RangeError)
  t.throws(() => new MemoryLimitBackend({ sweepInterval: -1 }), RangeError)
})
