/**
 * `StateScope.closeNow()`: the close of a request that changed nothing, without a promise, where
 * that needs no backend call and no wait (no lease, or the memory pairing's lease, released
 * synchronously); `null`, doing nothing, everywhere else, so that `close()` writes, passes on or
 * releases. And `memoryLockNow`, the memory lock's steps without a promise, which it uses.
 */
import t, { type Test } from 'tap'
import { Lease } from '../../lib/locks/lease.js'
import { MemorySessionLock, memoryLockNow } from '../../lib/locks/memory-lock.js'
import type { SessionLease, SessionLock } from '../../lib/locks/session-lock.js'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import { StateBackend, type StateScope } from '../../lib/state/state-scope.js'
import { pairingFor } from '../../lib/state/pairings/choose-pairing.js'

async function setup (t: Test, lock: SessionLock | null = null): Promise<{ store: MemorySessionStore, backend: StateBackend }> {
  const store = new MemorySessionStore()
  t.teardown(async () => { await store.close?.() })
  await store.create('s1', { a: 1 })
  return { store, backend: new StateBackend(pairingFor(store, lock)) }
}

async function open (backend: StateBackend, lock: boolean): Promise<StateScope> {
  const scope = await backend.open('s1', { lock, owner: {} })
  if (scope === null) throw new Error('no scope')
  return scope
}

/**
 * A lock of the app's own handing out bundled leases whose release the test decides (done before
 * it returns or not, failing or not): only the memory pairing releases without a promise.
 */
function leaseLock (sync: boolean, fail: Error | null, released: string[]): SessionLock {
  const release = (): void => {
    released.push('release')
    if (fail !== null) throw fail
  }
  return {
    timeout: 1000,
    acquire: async (id: string) => new Lease(id, sync ? release : async () => { release() }),
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

t.test('another lock\'s lease, even one released before its release returns: closeNow holds on, close() releases', async t => {
  const released: string[] = []
  const { backend } = await setup(t, leaseLock(true, null, released))
  const scope = await open(backend, true)
  t.equal(scope.closeNow(), null, 'only the memory pairing lets a lease go without a promise')
  t.same(await scope.close(), { status: 'unchanged' })
  t.same(released, ['release'])
})

t.test('a release that fails is reported as the close\'s releaseError', async t => {
  const released: string[] = []
  const boom = new Error('release failed')
  const { backend } = await setup(t, leaseLock(true, boom, released))
  const scope = await open(backend, true)
  const closed = await scope.close()
  t.same(closed, { status: 'unchanged', releaseError: boom })
  t.equal((closed as { releaseError: unknown }).releaseError, boom)
  t.same(released, ['release'])
  t.equal(scope.held, false)
})

t.test('memoryLockNow.releaseNow: once, then "not held"; quiet after the lock revoked it (close)', async t => {
  const lock = new MemorySessionLock()
  const first = await lock.acquire('x')
  memoryLockNow.releaseNow(first)
  t.equal(lock.size, 0, 'released before it returned')
  t.throws(() => { memoryLockNow.releaseNow(first) }, { code: 'MCP_SESSION_LOCK_NOT_HELD' })
  await t.rejects(first.release(), { code: 'MCP_SESSION_LOCK_NOT_HELD' }, 'release() agrees')
  const second = memoryLockNow.acquireNow(lock, 'y', {})
  t.ok(second !== null && lock.size === 1, 'a free key granted at once')
  t.equal(memoryLockNow.acquireNow(lock, 'y', {}), null, 'a held key: nothing done')
  await lock.close()
  memoryLockNow.releaseNow(second as SessionLease)
  t.equal(lock.size, 0, 'a revoked lease is released once, by the lock')
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
  const backend = new StateBackend(pairingFor(locking, lock))
  let scope: StateScope | null = null
  scope = await open(backend, true)
  t.equal(scope.closeNow(), null, 'handed on by close()')
  t.same(await scope.close(), { status: 'unchanged' })
  t.same(passed, [false])
  t.same(released, [], 'passed on, not released')
  passOn = false
  scope = await open(backend, true)
  t.same(await scope.close(), { status: 'unchanged' })
  t.same(released, ['release'], 'no taker: released')
})
