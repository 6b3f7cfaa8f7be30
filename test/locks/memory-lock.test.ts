import t from 'tap'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { runSessionLockContract } from './lock-contract.js'

runSessionLockContract(t, 'MemorySessionLock', {
  create: (t, { timeout }) => {
    const lock = new MemorySessionLock({ timeout })
    t.teardown(() => lock.close())
    return lock
  },
  idle: (t, lock) => {
    t.equal(lock.size, 0, 'no session held')
    t.equal(lock.pending, 0, 'no waiter left')
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
