/**
 * `StateBackend.openNow()`: the open of a scope without a promise where that needs no wait (the
 * memory store, with no lock or the memory lock's key free); `undefined`, doing nothing,
 * everywhere else, so that `open()` waits in the lock's queue, or refuses, as before. And
 * `MemorySessionLock.acquireNow()`, which it uses: never ahead of a waiter.
 */
import t, { type Test } from 'tap'
import { FileSessionLock } from '../../lib/locks/file-lock.js'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import type { SessionLock } from '../../lib/locks/session-lock.js'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import type { SessionStore } from '../../lib/sessions/session-store.js'
import { StateBackend, type StateScope } from '../../lib/state/state-scope.js'
import { pairingFor } from '../../lib/state/pairings/choose-pairing.js'

async function setup (t: Test, lock: SessionLock | null, store: SessionStore = new MemorySessionStore()): Promise<StateBackend> {
  t.teardown(async () => { await store.close?.(); await lock?.close?.() })
  await store.create('s1', { a: [1] })
  return new StateBackend(pairingFor(store, lock))
}

function opened (scope: StateScope | null | undefined): StateScope {
  if (scope === null || scope === undefined) throw new Error(`no scope: ${String(scope)}`)
  return scope
}

t.test('memory store without a lock: the scope at once, null for an unknown id, each with its own copy', async t => {
  const backend = await setup(t, null)
  const scope = opened(backend.openNow('s1', { lock: true, owner: {} }))
  t.equal(scope.held, false)
  ;(scope.handle.get('a') as number[]).push(2)
  t.same(opened(backend.openNow('s1', { lock: false })).handle.get('a'), [1], 'an unsaved change is not seen')
  t.equal(backend.openNow('nope', { lock: false }), null)
})

t.test('memory lock: a free key is taken at once; a held one, or one whose request was given up, waits in open()', async t => {
  const lock = new MemorySessionLock({ timeout: 1000 })
  const backend = await setup(t, lock)
  const first = opened(backend.openNow('s1', { lock: true, owner: {} }))
  t.equal(first.held, true, 'the lease is held')
  t.equal(lock.size, 1)
  t.equal(backend.openNow('s1', { lock: true, owner: {} }), undefined, 'held: nothing taken')
  // Queued behind the holder: the key never looks free to openNow until the queue is through.
  const order: string[] = []
  const second = backend.open('s1', { lock: true, owner: {} }).then(s => { order.push('second'); return opened(s) })
  await new Promise(resolve => setImmediate(resolve))
  t.equal(lock.pending, 1)
  t.equal(first.closeNow()?.status, 'unchanged')
  t.equal(backend.openNow('s1', { lock: true, owner: {} }), undefined, 'handed to the waiter, not taken')
  const s2 = await second
  t.same(order, ['second'])
  t.equal(s2.held, true)
  await s2.close()
  t.equal(lock.size, 0, 'free again')
  const aborted = new AbortController()
  aborted.abort(new Error('gone'))
  t.equal(backend.openNow('s1', { lock: true, signal: aborted.signal }), undefined, 'an aborted request is left to open() to refuse')
  await t.rejects(backend.open('s1', { lock: true, signal: aborted.signal }), { message: 'gone' })
  t.equal(lock.size, 0)
})

t.test('memory lock: an unknown id is null and leaves the key free; the owner holding the key already is left to open()', async t => {
  const lock = new MemorySessionLock({ timeout: 1000 })
  const backend = await setup(t, lock)
  t.equal(backend.openNow('nope', { lock: true, owner: {} }), null)
  t.equal(lock.size, 0)
  const owner = {}
  const scope = opened(backend.openNow('s1', { lock: true, owner }))
  t.equal(backend.openNow('s1', { lock: true, owner }), undefined)
  await t.rejects(backend.open('s1', { lock: true, owner }), /already/i)
  await scope.close()
  await lock.close()
  t.equal(backend.openNow('s1', { lock: true, owner: {} }), undefined, 'a closed lock is left to open() to refuse')
})

t.test('other backends: undefined, nothing done', async t => {
  const dir = t.testdir()
  const fileLock = new FileSessionLock({ dir })
  t.equal((await setup(t, fileLock)).openNow('s1', { lock: true, owner: {} }), undefined, 'a lock that is not the memory lock')
  t.equal((await setup(t, fileLock)).openNow('s1', { lock: false }), undefined, 'nor without taking it')
  const other: SessionStore = new MemorySessionStore()
  const wrapped: SessionStore = {
    ttl: other.ttl,
    create: other.create.bind(other),
    load: other.load.bind(other),
    save: other.save.bind(other),
    destroy: other.destroy.bind(other),
    exists: other.exists.bind(other),
    gc: other.gc.bind(other)
  }
  t.equal((await setup(t, null, wrapped)).openNow('s1', { lock: false }), undefined, 'a store that is not the memory store')
})

t.test('a memory store or lock whose load() or acquire() a subclass overrides: asked through it, never around it', async t => {
  class CountingStore extends MemorySessionStore {
    loads = 0
    override async load (id: string): ReturnType<MemorySessionStore['load']> { this.loads++; return await super.load(id) }
  }
  const store = new CountingStore()
  const backend = await setup(t, null, store)
  t.equal(backend.openNow('s1', { lock: false }), undefined, 'a store overriding load')
  await (await backend.open('s1', { lock: false }))?.close()
  t.equal(store.loads, 1, 'its load() ran')
  class CountingLock extends MemorySessionLock {
    acquires = 0
    override async acquire (...args: Parameters<MemorySessionLock['acquire']>): ReturnType<MemorySessionLock['acquire']> { this.acquires++; return await super.acquire(...args) }
  }
  const lock = new CountingLock({ timeout: 1000 })
  const locked = await setup(t, lock)
  t.equal(locked.openNow('s1', { lock: true, owner: {} }), undefined, 'a lock overriding acquire')
  await (await locked.open('s1', { lock: true, owner: {} }))?.close()
  t.equal(lock.acquires, 1, 'its acquire() ran')
})
