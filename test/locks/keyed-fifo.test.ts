import t from 'tap'
import { KeyedFifo } from '../../lib/locks/keyed-fifo.js'
import { checkTimeout, delay, fullJitter } from '../../lib/locks/wait.js'
import { collected } from '../helpers/gc.js'

const timeoutError = (): Error => new Error('timed out')
const tick = async (): Promise<void> => await new Promise(resolve => setImmediate(resolve))

t.test('grants in arrival order, hands off directly, and forgets a key once free', async t => {
  const fifo = new KeyedFifo()
  const order: number[] = []
  const first = await fifo.acquire('k', { timeout: 1000, onTimeout: timeoutError })
  const waiters = [1, 2, 3].map(async n => {
    const release = await fifo.acquire('k', { timeout: 1000, onTimeout: timeoutError })
    order.push(n)
    await tick()
    release()
  })
  t.equal(fifo.tryAcquire('k'), null, 'a newcomer cannot jump the queue')
  t.equal(fifo.waiting, 3)
  first()
  first() // releasing twice is harmless here: the lease above it reports "not held"
  await Promise.all(waiters)
  t.same(order, [1, 2, 3])
  t.equal(fifo.size, 0)
})

t.test('a waiter that timed out or was aborted never runs, and leaves no trace', async t => {
  const fifo = new KeyedFifo()
  const holder = fifo.tryAcquire('k', {}) as () => void
  let ran = false
  const timedOut = fifo.acquire('k', { timeout: 20, onTimeout: timeoutError }).then(() => { ran = true })
  const controller = new AbortController()
  const aborted = fifo.acquire('k', { timeout: 10_000, signal: controller.signal, onTimeout: timeoutError }).then(() => { ran = true })
  controller.abort(new Error('stop'))
  await t.rejects(aborted, { message: 'stop' })
  await t.rejects(timedOut, { message: 'timed out' })
  t.equal(fifo.waiting, 0)
  holder()
  await tick()
  t.equal(ran, false)
  t.equal(fifo.size, 0)
})

t.test('timeout 0 takes only a free slot; Infinity waits without a timer', async t => {
  const fifo = new KeyedFifo()
  const release = await fifo.acquire('k', { timeout: 0, onTimeout: timeoutError })
  await t.rejects(fifo.acquire('k', { timeout: 0, onTimeout: timeoutError }), { message: 'timed out' })
  const forever = fifo.acquire('k', { timeout: Infinity, onTimeout: timeoutError })
  release()
  ;(await forever)()
  t.equal(fifo.size, 0)
})

t.test('grantNow: a free slot without a promise; null, changing nothing, when held or the signal has aborted', async t => {
  const fifo = new KeyedFifo()
  const owner = {}
  const release = fifo.grantNow('k', { owner })
  t.type(release, 'function', 'granted at once')
  t.ok(fifo.isHeldBy('k', owner))
  t.equal(fifo.grantNow('k', {}), null, 'held: not granted')
  t.equal(fifo.waiting, 0, 'and not queued')
  release?.()
  t.equal(fifo.size, 0)
  const gone = new AbortController()
  gone.abort(new Error('gone'))
  t.equal(fifo.grantNow('k', { signal: gone.signal }), null, 'an aborted signal: not granted')
  t.equal(fifo.size, 0, 'and nothing taken')
  await t.rejects(fifo.acquire('k', { timeout: 1000, signal: gone.signal, onTimeout: timeoutError }), { message: 'gone' }, 'acquire() refuses it')
})

t.test('owners: isHeldBy follows the hand-off', async t => {
  const fifo = new KeyedFifo()
  const a = {}
  const b = {}
  const releaseA = await fifo.acquire('k', { timeout: 100, owner: a, onTimeout: timeoutError })
  t.ok(fifo.isHeldBy('k', a))
  t.notOk(fifo.isHeldBy('k', b))
  t.notOk(fifo.isHeldBy('k', undefined), 'no owner, no match')
  const waitingB = fifo.acquire('k', { timeout: 100, owner: b, onTimeout: timeoutError })
  releaseA()
  const releaseB = await waitingB
  t.ok(fifo.isHeldBy('k', b))
  t.notOk(fifo.isHeldBy('k', a))
  releaseB()
})

t.test('rejectAll rejects the waiters and keeps the holders', async t => {
  const fifo = new KeyedFifo()
  const release = fifo.tryAcquire('k') as () => void
  const waiting = [fifo.acquire('k', { timeout: 1000, onTimeout: timeoutError }), fifo.acquire('k', { timeout: 1000, onTimeout: timeoutError })]
  const closed = new Error('closed')
  fifo.rejectAll(closed)
  for (const w of waiting) await t.rejects(w, closed)
  t.equal(fifo.size, 1)
  release()
  t.equal(fifo.size, 0)
})

t.test('the map returns to empty after a burst of 1000 over 20 keys, with timeouts', async t => {
  const fifo = new KeyedFifo()
  const results = await Promise.allSettled(Array.from({ length: 1000 }, async (_, i) => {
    const release = await fifo.acquire(`k${i % 20}`, { timeout: i % 5 === 0 ? 1 : 10_000, onTimeout: timeoutError })
    await tick()
    release()
  }))
  t.ok(results.some(r => r.status === 'rejected'))
  t.equal(fifo.size, 0)
  t.equal(fifo.waiting, 0)
})

t.test('a released slot lets go of its owner, though its release function is still referenced', async t => {
  // The key's entry may outlive the release in a table V8 rebuilt (see Lease.claim()): with the
  // owner (a request) in it, it would keep the request alive through young-generation collections.
  const fifo = new KeyedFifo()
  let owner: object | undefined = { request: 'x'.repeat(100) }
  const ref = new WeakRef(owner)
  const release = fifo.tryAcquire('k', owner)
  owner = undefined
  t.notOk(await collected(ref), 'held: the slot keeps its owner (isHeldBy reads it)')
  release?.()
  t.ok(await collected(ref), 'released: the owner can be collected')
  t.equal(typeof release, 'function')
  t.equal(fifo.size, 0)
})

t.test('helpers', async t => {
  t.equal(checkTimeout(0), 0)
  t.equal(checkTimeout(Infinity), Infinity)
  t.throws(() => checkTimeout(-1), new RangeError('timeout must be greater than or equal to 0.'))
  t.throws(() => checkTimeout(Number.NaN, 'ttl'), new RangeError('ttl must be greater than or equal to 0.'))
  for (let n = 0; n < 20; n++) {
    const d = fullJitter(n, 5, 50)
    if (d < 0 || d >= Math.min(50, 5 * 2 ** n)) t.fail(`jitter ${d} out of range at attempt ${n}`)
  }
  const controller = new AbortController()
  const waiting = delay(10_000, undefined, controller.signal)
  controller.abort(new Error('woken'))
  await t.rejects(waiting, { message: 'woken' })
  await t.rejects(delay(10, AbortSignal.abort(new Error('early'))), { message: 'early' })
  await t.resolves(delay(1))
})
