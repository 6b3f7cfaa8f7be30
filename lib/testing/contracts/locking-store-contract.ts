/**
 * The fast-path contract (`LockingSessionStore`, `lib/sessions/session-store.ts`): a store that
 * takes its lock's lease and reads the record in one backend call (`acquireAndLoad`), and saves
 * the changed keys fenced by that lease and releases it in another (`saveAndRelease`). The plugin
 * takes this path whenever `store.canLockWith(lock)`; what it relies on (docs/your-own-engine.md):
 * - one holder per key: a second `acquireAndLoad` waits for the first's `saveAndRelease`, and then
 *   reads what it wrote (else two requests read the same version and one update is lost);
 * - the fence: a holder whose lease expired while it stalled, and whose key another holder took,
 *   gets `fenced` and writes nothing (else it writes over the next holder's work: a lost update,
 *   and the next holder's client was told its change was kept);
 * - a record destroyed under the lease is `gone`, never re-created;
 * - each read is the holder's own copy, and the lease ends with `saveAndRelease` whatever it finds.
 *
 *   lockingStoreContract({ test, leaseTtl: 200, make: ({ leaseTtl }, scope) => ({ store, lock }) })
 */
import assert from 'node:assert/strict'
import { SessionLockTimeoutError } from '../../locks/errors.js'
import type { SessionLock } from '../../locks/session-lock.js'
import { generateSessionId } from '../../sessions/session-id.js'
import { isLockingStore, type LockedSession, type LockingSessionStore } from '../../sessions/session-store.js'
import { freeze, registerCases, rejection, settlesWithin, sleep, type CaseScope, type ContractCase, type TestFunction } from './runner.js'

/** One instance of the engine: a store and the lock it runs the fast path with. */
export interface LockingPair<S extends LockingSessionStore = LockingSessionStore, L extends SessionLock = SessionLock> {
  store: S
  lock: L
}

/** Options of {@link lockingStoreContract}. */
export interface LockingStoreContractOptions<S extends LockingSessionStore = LockingSessionStore, L extends SessionLock = SessionLock> {
  /** The runner's `test(name, fn)` (`node:test`'s `test`, tap's `t.test.bind(t)`). */
  test: TestFunction
  /**
   * Builds one instance: a store and its lock. The instances one case builds (the same `scope`)
   * share their backend, like the processes of one deployment. `leaseTtl` is set for the
   * stale-holder case only: the lock's leases then expire after so many ms unless renewed.
   */
  make: (options: { leaseTtl?: number }, scope: CaseScope) => LockingPair<S, L> | Promise<LockingPair<S, L>>
  /** Cleans up one instance `make` built, when its case ends (default: `lock.close?.()`, `store.close?.()`). */
  cleanup?: (pair: LockingPair<S, L>) => unknown
  /**
   * A lease TTL in ms short enough for a case (200 is fine): the stale-holder case stalls a holder
   * past it. Without it that case is not run (a lock whose leases never expire has no stale holder).
   */
  leaseTtl?: number
  /** The prefix of the case names (default `fast path`): `<name>: <rule>`. */
  name?: string
}

interface FastCase {
  make: (leaseTtl?: number) => Promise<LockingPair>
  leaseTtl: number
}

const cases: Array<ContractCase<FastCase> & { expiring: boolean }> = []
const it = (name: string, run: ContractCase<FastCase>['run']): void => { cases.push({ name, run, expiring: false }) }
const expiring = (name: string, run: ContractCase<FastCase>['run']): void => { cases.push({ name, run, expiring: true }) }

function held (taken: LockedSession | null): LockedSession {
  assert.ok(taken !== null, 'acquireAndLoad resolved null for a record that exists')
  return taken
}

it('the store runs the fast path with its lock (canLockWith)', async ({ make }) => {
  const { store, lock } = await make()
  assert.ok(isLockingStore(store, lock), 'canLockWith(lock) must be true, or the plugin never takes the fast path')
})

it('acquireAndLoad of an unknown record resolves null, holding nothing', async ({ make }) => {
  const { store, lock } = await make()
  const id = generateSessionId()
  assert.equal(await store.acquireAndLoad(id, lock), null)
  const lease = await lock.tryAcquire(id)
  assert.ok(lease, 'the key was left free')
  await lease.release()
})

it('acquireAndLoad reads under the lease; a second one waits for saveAndRelease, then reads what it wrote', async ({ make }) => {
  const { store, lock } = await make()
  const id = generateSessionId()
  await store.create(id, { n: 1, old: true })
  const first = held(await store.acquireAndLoad(id, lock))
  assert.deepEqual(first.record, { data: { n: 1, old: true }, version: 0 })
  assert.equal(first.lease.id, id)
  assert.equal(first.lease.signal.aborted, false)
  const second = store.acquireAndLoad(id, lock, { timeout: 10_000 })
  assert.equal(await settlesWithin(second, 50), false, 'a second holder waits while the first holds the key')
  assert.equal(await store.saveAndRelease(id, { set: { n: 2 }, delete: ['old'] }, { version: first.record.version }, first.lease), 'ok')
  const next = held(await second)
  assert.deepEqual(next.record, { data: { n: 2 }, version: 1 }, 'the next holder reads the write: only the changed keys, the version bumped')
  await next.lease.release()
  const err = await rejection(first.lease.release())
  assert.equal((err as { code?: string } | null)?.code, 'MCP_SESSION_LOCK_NOT_HELD', 'saveAndRelease ended the lease: releasing it again is "not held"')
})

it('a record destroyed under the lease: saveAndRelease is gone, re-creates nothing, and releases', async ({ make }) => {
  const { store, lock } = await make()
  const id = generateSessionId()
  await store.create(id, { n: 1 })
  const taken = held(await store.acquireAndLoad(id, lock))
  assert.equal(await store.destroy(id), true)
  assert.equal(await store.saveAndRelease(id, { set: { n: 2 }, delete: [] }, { version: taken.record.version }, taken.lease), 'gone')
  assert.equal(await store.load(id), null, 'not re-created')
  assert.equal(await store.exists(id), false)
  const again = await lock.tryAcquire(id)
  assert.ok(again, 'the lease ended with the save')
  await again.release()
})

it("each read is the holder's own copy: what it mutated and never saved is not seen next", async ({ make }) => {
  const { store, lock } = await make()
  const id = generateSessionId()
  await store.create(id, { cart: { items: ['a'] } })
  const first = held(await store.acquireAndLoad(id, lock))
  ;((first.record.data.cart as { items: string[] }).items).push('mutated, never saved')
  const next = store.acquireAndLoad(id, lock, { timeout: 10_000 })
  await sleep(20)
  if (store.passOn?.(id, first.lease) !== true) await first.lease.release()
  const second = held(await next)
  assert.deepEqual(second.record, { data: { cart: { items: ['a'] } }, version: 0 })
  await second.lease.release()
})

it('a waiter that gives up leaves the queue: its signal, or its timeout', async ({ make }) => {
  const { store, lock } = await make()
  const id = generateSessionId()
  await store.create(id, {})
  const first = held(await store.acquireAndLoad(id, lock))
  const gone = new AbortController()
  const aborted = store.acquireAndLoad(id, lock, { signal: gone.signal, timeout: 10_000 })
  await sleep(20)
  gone.abort(new Error('client left'))
  await assert.rejects(aborted, { message: 'client left' })
  await assert.rejects(store.acquireAndLoad(id, lock, { timeout: 30 }), SessionLockTimeoutError)
  await first.lease.release()
  const next = held(await store.acquireAndLoad(id, lock, { timeout: 1000 }))
  await next.lease.release()
})

it('parallel updates through two instances: every one kept', async ({ make }) => {
  const one = await make()
  const two = await make()
  const id = generateSessionId()
  await one.store.create(id, { n: 0 })
  const results = await Promise.all(Array.from({ length: 30 }, async (_, i) => {
    const { store, lock } = i % 2 === 0 ? one : two
    const taken = held(await store.acquireAndLoad(id, lock, { timeout: 30_000 }))
    const n = taken.record.data.n as number
    return await store.saveAndRelease(id, { set: { n: n + 1 }, delete: [] }, { version: taken.record.version }, taken.lease)
  }))
  assert.deepEqual(results, Array(30).fill('ok'))
  assert.deepEqual((await one.store.load(id))?.data, { n: 30 }, 'no update lost')
})

it('passOn, where offered: nobody waits → false; a waiter of this process gets the lease and its own copy', async ({ make }) => {
  const { store, lock } = await make()
  if (store.passOn === undefined) return
  const id = generateSessionId()
  await store.create(id, { list: [1] })
  const first = held(await store.acquireAndLoad(id, lock))
  assert.equal(store.passOn(id, first.lease), false, 'nobody waits: not passed on, still held')
  ;(first.record.data.list as number[]).push(2)
  const next = store.acquireAndLoad(id, lock, { timeout: 10_000 })
  await sleep(20)
  if (!store.passOn(id, first.lease)) await first.lease.release()
  const second = held(await next)
  assert.deepEqual(second.record, { data: { list: [1] }, version: 0 }, 'its own copy')
  await second.lease.release()
  const again = await lock.tryAcquire(id)
  assert.ok(again, 'free once the last holder let go')
  await again.release()
})

expiring("a stale holder's save is refused (fenced): the next holder's work survives", async ({ make, leaseTtl }) => {
  const a = await make(leaseTtl)
  const b = await make(leaseTtl)
  const id = generateSessionId()
  await a.store.create(id, { owner: 'nobody' })
  const stale = held(await a.store.acquireAndLoad(id, a.lock))
  freeze(leaseTtl * 3) // A stalls (a GC pause): no renewal runs, its lease expires in the backend
  const next = held(await b.store.acquireAndLoad(id, b.lock, { timeout: 10_000 }))
  assert.equal(await a.store.saveAndRelease(id, { set: { owner: 'A' }, delete: [] }, { version: stale.record.version }, stale.lease), 'fenced',
    'a holder whose lease another took must not write')
  assert.equal(await b.lock.tryAcquire(id), null, "the stale holder's release did not free the next holder's lease")
  assert.equal(await b.store.saveAndRelease(id, { set: { owner: 'B' }, delete: [] }, { version: next.record.version }, next.lease), 'ok')
  assert.deepEqual(await a.store.load(id), { data: { owner: 'B' }, version: 1 }, "B's state survives")
})

/** The names of the fast-path contract's cases, in order (the stale-holder one included). */
export const lockingStoreContractCases: readonly string[] = cases.map(c => c.name)

/** Registers the fast-path contract's cases with the runner, each against fresh instances from `make`. */
export function lockingStoreContract<S extends LockingSessionStore, L extends SessionLock> (options: LockingStoreContractOptions<S, L>): void {
  const cleanup = options.cleanup ?? (async ({ store, lock }: LockingPair<S, L>) => { await lock.close?.(); await store.close?.() })
  const applies = cases.filter(c => !c.expiring || options.leaseTtl !== undefined)
  registerCases(options.test, options.name ?? 'fast path', applies, scope => ({
    make: async (leaseTtl) => {
      const pair = await options.make(leaseTtl === undefined ? {} : { leaseTtl }, scope)
      scope.teardown(async () => { await cleanup(pair) })
      return pair
    },
    leaseTtl: options.leaseTtl ?? 0
  }))
}
