/**
 * `StateScope.closeNow()`: the close of a request that changed nothing, without a promise, where
 * that needs no backend call and no wait (no lease, a lease passed on, or the memory lock's lease,
 * released synchronously); `null`, doing nothing, everywhere else, so that `close()` writes, or
 * waits for the release, as before. And `Lease.releaseNow()`, which it uses.
 */
import t, { type Test } from 'tap'
import { Lease } from '../../lib/locks/lease.js'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import type { SessionLease, SessionLock } from '../../lib/locks/session-lock.js'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import { StateBackend, type StateScope } from '../../lib/state/state-scope.js'

async function setup (t: Test, lock: SessionLock | null = null): Promise<{ store: MemorySessionStore, backend: StateBackend }> {
  const store = new MemorySessionStore()
  t.teardown(async () => { await store.close?.() })
  await store.create('s1', { a: 1 })
  return { store, backend: new StateBackend(store, lock) }
}

async function open (backend: StateBackend, lock: boolean): Promise<StateScope> {
  const scope = await backend.open('s1', { lock, owner: {} })
  if (scope === null) throw new Error('no scope')
  return scope
}

/** A lock handing out bundled leases whose release the test decides (synchronous or not, failing or not). */
function leaseLock (sync: boolean, fail: Error | null, released: string[]): SessionLock {
  const release = (): void => {
    released.push('release')
    if (fail !== null) throw fail
  }
  return {
    timeout: 1000,
    acquire: async (id: string) => new Lease(id, sync ? release : async () => { release() }, undefined, sync),
    tryAcquire: async () => null
  }
}

t.test('without a lock: an unchanged scope closes at once, and a second close does nothing', async t => {
  const { backend } = await setup(t)
  const scope = await open(backend, false)
  t.same(scope.closeNow(), { status: 'unchanged' })
  t.same(scope.closeNow(), { status: 'unchanged' })
  scope.handle.set('a', 2)
  t.same(await scope.close(), { status: 'unchanged' }, 'closed: later changes are not written')
})

t.test('a changed scope is not closed by closeNow: close() saves it', async t => {
  const { store, backend } = await setup(t)
  const scope = await open(backend, false)
  scope.handle.set('a', 2)
  t.equal(scope.closeNow(), null)
  t.same(await scope.close(), { status: 'ok' }, 'the save answers, not closeNow')
  t.same((await store.load('s1'))?.data, { a: 2 })
})

t.test('the memory lock: an unchanged close releases the lease synchronously', async t => {
  const lock = new MemorySessionLock({ timeout: 2000 })
  t.teardown(() => lock.close())
  const { backend } = await setup(t, lock)
  const scope = await open(backend, true)
  t.equal(lock.size, 1)
  t.same(scope.closeNow(), { status: 'unchanged' })
  t.equal(scope.held, false)
  t.equal(lock.size, 0, 'released before closeNow returned')
  const next = await open(backend, true)
  t.ok(next.held, 'the next request takes the lock')
  scope.handle.set('a', 3)
  t.same(scope.closeNow(), { status: 'unchanged' }, 'a second close does nothing')
  t.same(await next.close(), { status: 'unchanged' })
  t.equal(lock.size, 0)
})

t.test('the memory lock: a changed scope is saved by close(), under the lease', async t => {
  const lock = new MemorySessionLock({ timeout: 2000 })
  t.teardown(() => lock.close())
  const { store, backend } = await setup(t, lock)
  const scope = await open(backend, true)
  scope.handle.set('a', 5)
  t.equal(scope.closeNow(), null)
  t.ok(scope.held, 'still held: nothing was released')
  t.same(await scope.close(), { status: 'ok' })
  t.equal(lock.size, 0)
  t.same((await store.load('s1'))?.data, { a: 5 })
})

t.test('a lease released asynchronously: closeNow holds on, close() releases', async t => {
  const released: string[] = []
  const { backend } = await setup(t, leaseLock(false, null, released))
  const scope = await open(backend, true)
  t.equal(scope.closeNow(), null)
  t.ok(scope.held)
  t.same(released, [])
  t.same(await scope.close(), { status: 'unchanged' })
  t.same(released, ['release'])
})

t.test('a synchronous release that fails is reported as the close\'s releaseError', async t => {
  const released: string[] = []
  const boom = new Error('release failed')
  const { backend } = await setup(t, leaseLock(true, boom, released))
  const scope = await open(backend, true)
  const closed = scope.closeNow()
  t.same(closed, { status: 'unchanged', releaseError: boom })
  t.equal((closed as { releaseError: unknown }).releaseError, boom)
  t.same(released, ['release'])
  t.equal(scope.held, false)
})

t.test('Lease.releaseNow: once, then "not held"; quiet after a revoke; refused for an asynchronous release', async t => {
  const calls: string[] = []
  const lease = new Lease('x', () => { calls.push('release') }, undefined, true)
  t.ok(lease.releasesNow)
  lease.releaseNow()
  t.same(calls, ['release'])
  t.throws(() => { lease.releaseNow() }, { code: 'MCP_SESSION_LOCK_NOT_HELD' })
  await t.rejects(lease.release(), { code: 'MCP_SESSION_LOCK_NOT_HELD' }, 'release() agrees')

  const revoked = new Lease('y', () => { calls.push('revoke') }, undefined, true)
  await revoked.revoke(new Error('closing'))
  revoked.releaseNow()
  t.same(calls, ['release', 'revoke'], 'a revoked lease is released once, by the lock')

  const later = new Lease('z', async () => { calls.push('async') })
  t.notOk(later.releasesNow)
  t.throws(() => { later.releaseNow() })
  t.ok(later.held, 'still held')
})

t.test('a combined store that passes the lease on: closeNow hands it over and does not release it', async t => {
  const released: string[] = []
  const lock = leaseLock(true, null, released)
  const store = new MemorySessionStore()
  t.teardown(async () => { await store.close?.() })
  await store.create('s1', { a: 1 })
  let passOn = true
  const passed: boolean[] = []
  const locking = Object.assign(store, {
    canLockWith: (l: SessionLock) => l === lock,
    acquireAndLoad: async (id: string) => {
      const record = await store.load(id)
      return record === null ? null : { lease: await lock.acquire(id), record }
    },
    saveAndRelease: async () => 'ok' as const,
    passOn: (_id: string, lease: SessionLease) => {
      // The scope no longer holds it by then: nothing it does to the lease can reach this request.
      passed.push(scope?.held === true)
      return passOn && (lease as Lease).held
    }
  })
  const backend = new StateBackend(locking, lock)
  let scope: StateScope | null = null
  scope = await open(backend, true)
  t.same(scope.closeNow(), { status: 'unchanged' })
  t.same(passed, [false])
  t.same(released, [], 'passed on, not released')
  passOn = false
  scope = await open(backend, true)
  t.same(scope.closeNow(), { status: 'unchanged' })
  t.same(released, ['release'], 'no taker: released at once')
})
