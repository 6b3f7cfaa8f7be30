import assert from 'node:assert/strict'
import t from 'tap'
import { Lease } from '../../lib/locks/lease.js'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { lockContract } from '../../lib/testing/contracts/index.js'
import { collected } from '../helpers/gc.js'

lockContract({
  test: t.test.bind(t),
  name: 'MemorySessionLock',
  make: ({ timeout }, t) => {
    const lock = new MemorySessionLock({ timeout })
    t.teardown(() => lock.close())
    return lock
  },
  idle: (lock) => {
    assert.equal(lock.size, 0, 'no session held')
    assert.equal(lock.pending, 0, 'no waiter left')
  },
  sharedBackend: false
})

t.test('two instances are independent (one process each)', async t => {
  const one = new MemorySessionLock()
  const two = new MemorySessionLock()
  const id = generateSessionId()
  const a = await one.acquire(id)
  const b = await two.acquire(id, { timeout: 0 })
  await a.release()
  await b.release()
  t.equal(one.size + two.size, 0)
})

t.test('the map returns to empty after a burst with timeouts and aborts', async t => {
  const lock = new MemorySessionLock({ timeout: 5000 })
  t.teardown(() => lock.close())
  const ids = Array.from({ length: 10 }, () => generateSessionId())
  const controller = new AbortController()
  const outcomes = await Promise.allSettled(Array.from({ length: 300 }, async (_, i) => {
    const id = ids[i % ids.length] as string
    const lease = await lock.acquire(id, {
      timeout: i % 7 === 0 ? 1 : 5000,
      signal: i % 11 === 0 ? controller.signal : undefined
    })
    if (i === 50) controller.abort(new Error('aborted'))
    await new Promise(resolve => setImmediate(resolve))
    await lease.release()
  }))
  t.ok(outcomes.some(o => o.status === 'fulfilled'))
  t.ok(outcomes.some(o => o.status === 'rejected'), 'some waiters timed out or were aborted')
  t.equal(lock.size, 0)
  t.equal(lock.pending, 0)
})

t.test('a released lease lets go of its holder: a lock\'s set of leases may keep the lease after the request', async t => {
  // Without it, a table V8 rebuilt (and left holding the lease) keeps the whole request alive
  // through young-generation collections (bench/NOTES.md; bench/gc.ts).
  const lock = new MemorySessionLock()
  t.teardown(() => lock.close())
  const lease = await lock.acquire(generateSessionId()) as Lease
  let holder: { request: string } | undefined = { request: 'x'.repeat(100) }
  const ref = new WeakRef(holder)
  lease.whenLost(((h: object) => () => { t.fail(`lost: ${String(h)}`) })(holder))
  holder = undefined
  t.notOk(await collected(ref), 'held: the lease keeps its holder\'s callback')
  await lease.release()
  t.ok(await collected(ref), 'released: the holder can be collected while the lease is still referenced')
  t.notOk(lease.held)
})
