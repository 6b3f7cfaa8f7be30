/**
 * The state scope (lib/state/state-scope.ts) against a fake store and a fake lock that write every
 * call into one journal (fixtures/journal.ts), so that the order across store and lock is visible:
 * open with and without the lock, unknown ids (no lock taken), a lease released on every failure
 * path, close (unchanged, changed and fenced by the lease, gone, fenced, failed, twice), lost
 * leases, suspend/resume, destroy. Run once with the bundled `Lease` and once with a plain lease
 * that only has an AbortSignal, since the scope watches the two differently. The fast path and
 * the cancellation: state-scope-fast.test.ts.
 */
import t from 'tap'
import { SessionLockTimeoutError } from '../../lib/locks/errors.js'
import type { AcquireOptions } from '../../lib/locks/session-lock.js'
import type { SaveGuard, SessionChanges } from '../../lib/sessions/session-store.js'
import { StateBackend } from '../../lib/state/state-scope.js'
import { type Call, FakeStore, fixture, isHeld, lose, open } from './fixtures/journal.js'
import { pairingFor } from '../../lib/state/pairings/choose-pairing.js'

t.test('open without the lock reads the state and nothing else', async t => {
  const f = fixture()
  f.store.put('s1', { a: 1 }, 4)
  const scope = await open(f, 's1', { lock: false })
  t.same(f.journal, [['load', 's1']], 'no exists, no acquire')
  t.equal(scope.held, false)
  t.equal(scope.locking, false)
  t.equal(scope.handle.get('a'), 1)
  t.equal(scope.handle.version, 4)
  t.same(await scope.close(), { status: 'unchanged' })
  t.same(f.journal, [['load', 's1']], 'closing an unlocked, unchanged scope calls nothing')

  t.equal(await f.backend.open('nope', { lock: false }), null, 'unknown id')
  t.same(f.journal.slice(1), [['load', 'nope']])

  // A backend without a lock ignores `lock: true`.
  const journal: Call[] = []
  const store = new FakeStore(journal)
  store.put('s1', {})
  const unlocked = new StateBackend(pairingFor(store, null))
  t.notOk(unlocked.pairing.oneCall)
  const s = await unlocked.open('s1', { lock: true })
  t.same(journal, [['load', 's1']])
  t.equal(s?.held, false)
  t.equal(s?.locking, false, 'no lock configured: not a locking scope')
})

for (const kind of ['Lease', 'plain'] as const) {
  t.test(`with ${kind === 'Lease' ? 'the bundled Lease' : 'a plain lease (AbortSignal only)'}`, async t => {
    t.test('open with the lock: exists, then acquire with owner and signal, then load', async t => {
      const f = fixture(kind)
      f.store.put('s1', { a: 1 }, 2)
      const owner = {}
      const signal = new AbortController().signal
      const scope = await open(f, 's1', { lock: true, owner, signal })
      t.same(f.ops(), ['exists', 'acquire', 'load'])
      const options = f.journal[1][2] as AcquireOptions
      t.equal(f.journal[1][1], 's1')
      t.equal(options.owner, owner, 'the owner is passed through')
      t.equal(options.signal, signal, 'the signal is passed through')
      t.equal(scope.held, true)
      t.equal(scope.locking, true)
      t.equal(scope.lost, false)
      t.equal(scope.handle.get('a'), 1)
      t.equal(f.lock.leases.length, 1)
      t.ok(isHeld(f.lock.leases[0]))
    })

    t.test('an unknown id resolves null and never reaches the lock', async t => {
      const f = fixture(kind)
      t.equal(await f.backend.open('nope', { lock: true }), null)
      t.same(f.journal, [['exists', 'nope']], 'no acquire: an unknown id must not create a lock key or file')
      t.equal(f.lock.leases.length, 0)
    })

    t.test('a state that ends between exists and load: the lease is released, null', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      f.store.onLoad = async () => null
      t.equal(await f.backend.open('s1', { lock: true }), null)
      t.same(f.ops(), ['exists', 'acquire', 'load', 'release'])
      t.notOk(isHeld(f.lock.leases[0]))
    })

    t.test('a load that throws: the lease is released and the error rethrown', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const boom = new Error('store down')
      f.store.onLoad = async () => { throw boom }
      await t.rejects(f.backend.open('s1', { lock: true }), boom)
      t.same(f.ops(), ['exists', 'acquire', 'load', 'release'])
      t.notOk(isHeld(f.lock.leases[0]))
    })

    t.test('close of an unchanged handle releases and reports unchanged', async t => {
      const f = fixture(kind)
      f.store.put('s1', { a: 1 })
      const scope = await open(f, 's1', { lock: true })
      const before = f.journal.length
      t.same(await scope.close(), { status: 'unchanged' })
      t.same(f.journal.slice(before), [['release', 's1']], 'no save')
      t.equal(scope.held, false)
    })

    t.test('close of a changed handle saves exactly the changed keys, fenced by the lease, then releases', async t => {
      const f = fixture(kind)
      f.store.put('s1', { a: 1, b: 2, c: 3 }, 7)
      const scope = await open(f, 's1', { lock: true })
      const lease = f.lock.leases[0]
      scope.handle.set('a', 10)
      scope.handle.delete('b')
      scope.handle.set('d', { x: [1] })
      const before = f.journal.length
      t.same(await scope.close(), { status: 'ok' })
      t.same(f.ops(before), ['save', 'release'], 'saved before the lease is released')
      const [, id, changes, guard] = f.journal[before] as [string, string, SessionChanges, SaveGuard]
      t.equal(id, 's1')
      t.same(changes, { set: { a: 10, d: { x: [1] } }, delete: ['b'] }, 'c is not written')
      t.equal(guard.version, 7, 'the version read')
      t.equal(guard.fence, lease.fence, "the lease's own fence")
      t.equal(scope.handle.dirty, false, 'marked saved')
      t.equal(scope.handle.version, 8)
      t.same(f.store.read('s1'), { data: { a: 10, c: 3, d: { x: [1] } }, version: 8 })
      t.notOk(isHeld(lease))
    })

    for (const result of ['gone', 'fenced'] as const) {
      t.test(`a save answered "${result}" is reported as such, and the handle is not marked saved`, async t => {
        const f = fixture(kind)
        f.store.put('s1', { a: 1 }, 3)
        const scope = await open(f, 's1', { lock: true })
        scope.handle.set('a', 2)
        f.store.saveResult = result
        const before = f.journal.length
        t.same(await scope.close(), { status: result })
        t.same(f.ops(before), ['save', 'release'])
        t.equal(scope.handle.dirty, true, 'the changes are still unsaved')
        t.equal(scope.handle.version, 3, 'the version did not move')
        t.same(scope.handle.changes(), { set: { a: 2 }, delete: [] })
      })
    }

    t.test('a save that throws is reported failed with the error, and the lease is still released', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const scope = await open(f, 's1', { lock: true })
      scope.handle.set('a', 1)
      const boom = new Error('store down')
      f.store.saveResult = boom
      const before = f.journal.length
      const closed = await scope.close()
      t.equal(closed.status, 'failed')
      t.equal((closed as { error: unknown }).error, boom)
      t.same(f.ops(before), ['save', 'release'])
      t.equal(scope.handle.dirty, true)
    })

    t.test('a second close does nothing', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const scope = await open(f, 's1', { lock: true })
      scope.handle.set('a', 1)
      t.same(await scope.close(), { status: 'ok' })
      const before = f.journal.length
      scope.handle.set('a', 2)
      t.same(await scope.close(), { status: 'unchanged' }, 'even with new changes: the scope is closed')
      t.same(f.journal.slice(before), [], 'no store or lock call')
    })

    t.test('onLost fires when the held lease is lost, and lost turns true', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const scope = await open(f, 's1', { lock: true })
      let fired = 0
      scope.onLost(() => { fired++ })
      t.equal(fired, 0)
      lose(f.lock.leases[0])
      t.equal(fired, 1)
      t.equal(scope.lost, true)
      // Registered after the loss: called at once.
      let late = 0
      scope.onLost(() => { late++ })
      t.equal(late, 1)
      // The scope still releases what it holds: the lock does not do it for a lost lease.
      const before = f.journal.length
      t.same(await scope.close(), { status: 'unchanged' })
      t.same(f.ops(before), ['release'])
    })

    t.test('a lease the scope no longer holds does not count as lost', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const scope = await open(f, 's1', { lock: true })
      let fired = 0
      scope.onLost(() => { fired++ })
      await scope.close()
      lose(f.lock.leases[0])
      t.equal(fired, 0)
      t.equal(scope.lost, false)
    })

    t.test('suspend saves and releases; resume takes the lock back and reloads, keeping unsaved changes on top', async t => {
      const f = fixture(kind)
      f.store.put('s1', { a: 0, keep: 'x' }, 1)
      const owner = {}
      const signal = new AbortController().signal
      const scope = await open(f, 's1', { lock: true, owner, signal })
      scope.handle.set('a', 1)
      let before = f.journal.length
      t.same(await scope.suspend(), { status: 'ok' })
      t.same(f.ops(before), ['save', 'release'])
      t.equal(scope.held, false)
      t.same((f.journal[before][2] as SessionChanges).set, { a: 1 })

      // While waiting for the client: someone else writes the state, and this work changes a key.
      f.store.write('s1', { set: { b: 2 }, delete: ['keep'] })
      scope.handle.set('c', 3)

      before = f.journal.length
      await scope.resume()
      t.same(f.ops(before), ['exists', 'acquire', 'load'])
      const options = f.journal[before + 1][2] as AcquireOptions
      t.equal(options.owner, owner, 'the same owner')
      t.equal(options.signal, signal, 'the same signal')
      t.equal(scope.held, true)
      t.same({ a: scope.handle.get('a'), b: scope.handle.get('b'), c: scope.handle.get('c'), keep: scope.handle.has('keep') },
        { a: 1, b: 2, c: 3, keep: false }, 'the newer stored state, with this work\'s change on top')
      t.equal(scope.handle.version, 3, 'the version re-read')

      before = f.journal.length
      t.same(await scope.close(), { status: 'ok' })
      t.same(f.ops(before), ['save', 'release'])
      const [, , changes, guard] = f.journal[before] as [string, string, SessionChanges, SaveGuard]
      t.same(changes, { set: { c: 3 }, delete: [] }, 'only what is not saved yet')
      t.equal(guard.version, 3)
      t.equal(guard.fence, f.lock.leases[1].fence, 'fenced by the new lease')
      t.notOk(isHeld(f.lock.leases[1]))
    })

    t.test('changes a failed suspend could not save are kept on top after resume', async t => {
      const f = fixture(kind)
      f.store.put('s1', { a: 0 }, 1)
      const scope = await open(f, 's1', { lock: true })
      scope.handle.set('a', 1)
      f.store.saveResult = new Error('store down')
      t.equal((await scope.suspend()).status, 'failed')
      f.store.saveResult = 'ok'
      f.store.write('s1', { set: { b: 2 }, delete: [] })
      await scope.resume()
      t.equal(scope.handle.get('a'), 1)
      t.equal(scope.handle.get('b'), 2)
      const before = f.journal.length
      await scope.close()
      t.same((f.journal[before][2] as SessionChanges).set, { a: 1 }, 'written on the next close')
    })

    t.test('after resume, only the new lease counts: losing the old one is ignored', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const scope = await open(f, 's1', { lock: true })
      let fired = 0
      scope.onLost(() => { fired++ })
      await scope.suspend()
      await scope.resume()
      lose(f.lock.leases[0])
      t.equal(fired, 0, 'the first lease is not held any more')
      t.equal(scope.lost, false)
      lose(f.lock.leases[1])
      t.equal(fired, 1)
      t.equal(scope.lost, true)
      await scope.close()
    })

    t.test('resume rejects when the state ended during the wait, holding nothing', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const scope = await open(f, 's1', { lock: true })
      await scope.suspend()
      f.store.records.delete('s1')
      const before = f.journal.length
      await t.rejects(scope.resume(), /ended/)
      t.same(f.ops(before), ['exists'], 'no lock taken for a state that is gone')
      t.equal(scope.held, false)
      t.equal(f.lock.leases.length, 1)
    })

    t.test('destroy ends the state under the lease, then releases', async t => {
      const f = fixture(kind)
      f.store.put('s1', { a: 1 })
      const scope = await open(f, 's1', { lock: true })
      scope.handle.set('a', 2)
      const before = f.journal.length
      t.equal(await scope.destroy(), true)
      t.same(f.journal.slice(before), [['destroy', 's1'], ['release', 's1']])
      t.equal(scope.held, false)
      t.equal(f.store.records.has('s1'), false)
      const after = f.journal.length
      t.same(await scope.close(), { status: 'unchanged' }, 'a destroyed state is not written back')
      t.same(f.journal.slice(after), [])
    })

    t.test('a destroy that throws still releases, and rethrows', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const scope = await open(f, 's1', { lock: true })
      const boom = new Error('store down')
      f.store.destroyError = boom
      const before = f.journal.length
      await t.rejects(scope.destroy(), boom)
      t.same(f.ops(before), ['destroy', 'release'])
    })

    t.test('an aborted signal or a failing lock: the error propagates and nothing is loaded', async t => {
      const f = fixture(kind)
      f.store.put('s1', {})
      const ac = new AbortController()
      const reason = new Error('client went away')
      ac.abort(reason)
      await t.rejects(f.backend.open('s1', { lock: true, signal: ac.signal }), reason)
      t.same(f.ops(), ['exists', 'acquire'])

      const timeout = new SessionLockTimeoutError('s1', 1000)
      f.lock.failWith = timeout
      const before = f.journal.length
      await t.rejects(f.backend.open('s1', { lock: true }), timeout)
      t.same(f.ops(before), ['exists', 'acquire'])
      t.equal(f.lock.leases.length, 0)
    })
  })
}

for (const kind of ['Lease', 'plain'] as const) {
  t.test(`a ${kind} lease lost while the state was being read counts as lost at once`, async t => {
  // The scope starts watching after the load: a Lease tells a late watcher (whenLost); for a
  // plain lease the scope must look at the signal first, since a listener added to an already
  // aborted signal never hears of it.
    const f = fixture(kind)
    f.store.put('s1', {})
    f.store.onLoad = async (id) => {
      lose(f.lock.leases[0])
      return f.store.read(id)
    }
    const scope = await open(f, 's1', { lock: true })
    t.equal(scope.lost, true)
    let fired = 0
    scope.onLost(() => { fired++ })
    t.equal(fired, 1)
    await scope.close()
  })
}

t.test('resume of a scope opened without the lock re-reads the state and takes no lock', async t => {
  const f = fixture()
  f.store.put('s1', { a: 1 })
  const scope = await open(f, 's1', { lock: false })
  scope.handle.set('mine', 1)
  f.store.write('s1', { set: { a: 2 }, delete: [] })
  const before = f.journal.length
  await scope.resume()
  t.same(f.journal.slice(before).map(e => e[0]), ['load'], 'a load, no acquire')
  t.equal(scope.handle.get('a'), 2, 'what others wrote meanwhile')
  t.equal(scope.handle.get('mine'), 1, 'with this work\'s change on top')
  t.equal(scope.held, false)
})

t.test('destroy of a scope opened without the lock calls only the store', async t => {
  const f = fixture()
  f.store.put('s1', {})
  const scope = await open(f, 's1', { lock: false })
  const before = f.journal.length
  t.equal(await scope.destroy(), true)
  t.same(f.journal.slice(before), [['destroy', 's1']])
})

t.test('a changed handle opened without the lock is saved unfenced', async t => {
  const f = fixture()
  f.store.put('s1', {}, 5)
  const scope = await open(f, 's1', { lock: false })
  scope.handle.set('a', 1)
  t.same(await scope.close(), { status: 'ok' })
  t.same(f.ops(1), ['save'], 'nothing to release')
  const guard = f.journal[1][3] as SaveGuard
  t.equal(guard.version, 5)
  t.equal(guard.fence, undefined)
})

t.test('close() answers with a promise whatever happens: a throw on its way is a rejection', async t => {
  const f = fixture()
  f.store.put('s1', {})
  const scope = await open(f, 's1', { lock: false })
  const boom = new Error('boom')
  // close() is not async (it returns #write's promise as it is): its own guard keeps the contract.
  scope.closeNow = () => { throw boom }
  let answered: Promise<unknown> | undefined
  t.doesNotThrow(() => { answered = scope.close() }, 'no synchronous throw')
  await t.rejects(answered as Promise<unknown>, boom)
})
