/**
 * The state scope's fast path: a custom store implementing `LockingSessionStore`, which
 * `pairingFor()` pairs through `LockingStorePairing` (against the journal fakes of fixtures/journal.ts);
 * and a request's cancellation whose signal is made only for a lock that needs it.
 */
import t from 'tap'
import type { AcquireOptions, SessionLease, SessionLock } from '../../lib/locks/session-lock.js'
import type { SaveGuard, SessionChanges } from '../../lib/sessions/session-store.js'
import { StateBackend } from '../../lib/state/state-scope.js'
import { type Call, FakeLock, FakeLockingStore, FakeStore, fixture, isHeld, lockingFixture, open } from './fixtures/journal.js'
import { pairingFor } from '../../lib/state/pairings/choose-pairing.js'
import { LockingStorePairing } from '../../lib/state/pairings/locking-store-pairing.js'

t.test('fast path: a store implementing LockingSessionStore for the lock', async t => {
  t.test('paired through LockingStorePairing only for the lock the store can work with', async t => {
    const f = lockingFixture()
    t.ok(f.backend.pairing instanceof LockingStorePairing)
    const journal: Call[] = []
    const other = new FakeLock(journal, 'Lease')
    const store = new FakeLockingStore(journal, f.lock)
    store.put('s1', {})
    const backend = new StateBackend(pairingFor(store, other))
    t.notOk(backend.pairing.oneCall, 'canLockWith(other) is false')
    await backend.open('s1', { lock: true })
    t.same(journal.map(c => c[0]), ['exists', 'acquire', 'load'], 'the plain path')
  })

  t.test('a locking store without passOn: an unchanged close releases', async t => {
    const f = lockingFixture()
    Object.defineProperty(f.store, 'passOn', { value: undefined })
    f.store.put('s1', {})
    const scope = await open(f, 's1', { lock: true })
    t.same(await scope.close(), { status: 'unchanged' })
    t.same(f.ops(), ['acquireAndLoad', 'release'])
  })

  for (const kind of ['Lease', 'plain'] as const) {
    t.test(`with ${kind === 'Lease' ? 'the bundled Lease' : 'a plain lease'}`, async t => {
      t.test('open uses acquireAndLoad only, with the lock, owner and signal', async t => {
        const f = lockingFixture(kind)
        f.store.put('s1', { a: 1 })
        const owner = {}
        const signal = new AbortController().signal
        const scope = await open(f, 's1', { lock: true, owner, signal })
        t.same(f.ops(), ['acquireAndLoad'])
        const [, id, lock, options] = f.journal[0] as [string, string, SessionLock, AcquireOptions]
        t.equal(id, 's1')
        t.equal(lock, f.lock)
        t.equal(options.owner, owner)
        t.equal(options.signal, signal)
        t.equal(scope.held, true)
        t.equal(scope.handle.get('a'), 1)

        t.equal(await f.backend.open('nope', { lock: true }), null, 'unknown id')
        t.same(f.ops(1), ['acquireAndLoad'])

        const plain = await open(f, 's1', { lock: false })
        t.same(f.ops(2), ['load'], 'without the lock: a plain load')
        t.equal(plain.held, false)
      })

      t.test('close of a changed handle: saveAndRelease ends the lease; no second release', async t => {
        const f = lockingFixture(kind)
        f.store.put('s1', { a: 1, b: 2 }, 9)
        const scope = await open(f, 's1', { lock: true })
        const lease = f.lock.leases[0]
        scope.handle.set('a', 5)
        t.same(await scope.close(), { status: 'ok' })
        t.same(f.ops(1), ['saveAndRelease'], 'no plain save, no second release')
        const [, id, changes, guard, passed] = f.journal[1] as [string, string, SessionChanges, SaveGuard, SessionLease]
        t.equal(id, 's1')
        t.same(changes, { set: { a: 5 }, delete: [] })
        t.equal(guard.version, 9)
        t.equal(guard.fence, lease.fence)
        t.equal(passed, lease)
        t.equal(scope.handle.dirty, false)
      })

      t.test('a saveAndRelease that throws is reported failed', async t => {
        const f = lockingFixture(kind)
        f.store.put('s1', {})
        const scope = await open(f, 's1', { lock: true })
        scope.handle.set('a', 1)
        const boom = new Error('backend down')
        f.store.saveAndReleaseError = boom
        const closed = await scope.close()
        t.equal(closed.status, 'failed')
        t.equal((closed as { error: unknown }).error, boom)
        t.notOk(isHeld(f.lock.leases[0]))
      })

      t.test('close of an unchanged handle tries passOn, and releases only when it returns false', async t => {
        const f = lockingFixture(kind)
        f.store.put('s1', {})
        const first = await open(f, 's1', { lock: true })
        t.same(await first.close(), { status: 'unchanged' })
        t.same(f.ops(1), ['passOn', 'release'])
        t.equal(f.journal[1][2], f.lock.leases[0], 'the scope\'s lease is offered')

        f.store.passOnResult = true
        const second = await open(f, 's1', { lock: true })
        const before = f.journal.length
        t.same(await second.close(), { status: 'unchanged' })
        t.same(f.ops(before), ['passOn'], 'passed on: not released')
        t.ok(isHeld(f.lock.leases[1]), 'the next request holds it now')
        t.equal(second.held, false, 'but not this scope')
      })

      t.test('suspend and resume go through the combined calls', async t => {
        const f = lockingFixture(kind)
        f.store.put('s1', {}, 1)
        const scope = await open(f, 's1', { lock: true })
        scope.handle.set('a', 1)
        t.same(await scope.suspend(), { status: 'ok' })
        f.store.write('s1', { set: { b: 2 }, delete: [] })
        await scope.resume()
        t.same(f.ops(1), ['saveAndRelease', 'acquireAndLoad'])
        t.equal(scope.handle.get('b'), 2)
        t.equal(scope.held, true)
        f.store.records.delete('s1')
        await scope.suspend()
        await t.rejects(scope.resume(), /ended/, 'acquireAndLoad found nothing')
      })

      t.test('a changed handle opened without the lock is saved with a plain save', async t => {
        const f = lockingFixture(kind)
        f.store.put('s1', {})
        const scope = await open(f, 's1', { lock: false })
        scope.handle.set('a', 1)
        t.same(await scope.close(), { status: 'ok' })
        t.same(f.ops(), ['load', 'save'])
      })
    })
  }
})

t.test('a cancellation whose signal is made on demand (an AbortSource): made only for a lock that needs it', async t => {
  /** A request's cancellation: counts the signals it was asked for. */
  class Source {
    asked = 0
    readonly #controller = new AbortController()
    get aborted (): boolean { return this.#controller.signal.aborted }
    get reason (): unknown { return this.#controller.signal.reason }
    get signal (): AbortSignal { this.asked++; return this.#controller.signal }
  }
  t.test('a lock of the app, and a locking store of the app, get the real signal', async t => {
    for (const f of [fixture(), lockingFixture()]) {
      f.store.put('s1', {})
      const source = new Source()
      const scope = await open(f, 's1', { lock: true, signal: source })
      const options = f.journal.find(c => c[0] === 'acquire' || c[0] === 'acquireAndLoad')?.at(-1) as AcquireOptions
      t.ok(options.signal instanceof AbortSignal, 'an AbortSignal')
      t.equal(source.asked, 1)
      await scope.close()
    }
  })
  t.test('the bundled locks ask for it only when they have to wait', async t => {
    const { MemorySessionLock } = await import('../../lib/locks/memory-lock.js')
    const store = new FakeStore([])
    store.put('s1', {})
    const lock = new MemorySessionLock()
    const backend = new StateBackend(pairingFor(store, lock))
    const first = new Source()
    const holder = await backend.open('s1', { lock: true, signal: first })
    t.equal(first.asked, 0, 'uncontended: no signal made')
    const second = new Source()
    const waiting = backend.open('s1', { lock: true, signal: second })
    await new Promise(resolve => setImmediate(resolve))
    t.equal(second.asked, 1, 'queued: the signal is made, to leave the queue when it aborts')
    await holder?.close()
    await (await waiting)?.close()
  })
})
