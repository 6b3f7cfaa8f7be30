/**
 * The fenced save contract (`SaveGuard`, `lib/sessions/session-store.ts`): what a store paired with
 * a lock whose leases expire unless renewed (Redis, PostgreSQL, an app's own) does with the lease's
 * `fence` and the version read, in a plain `save(id, changes, { version, fence })` — the path every
 * pairing that is not a fast path takes. What the plugin relies on (docs/your-own-engine.md):
 * - under a live lease the save goes through, whatever an unlocked writer did meanwhile (else a
 *   holder is told 503 for work nobody else could have touched);
 * - a holder that stalled past its lease is `fenced` once the key is another's, or once the record
 *   changed since it read it, and writes nothing (else it writes over the next holder's work: a
 *   lost update, and the next holder's client was told its change was kept); when nobody took the
 *   key and nobody wrote, the version it read proves the save safe, and without that version
 *   nothing does;
 * - a destroyed record is `gone`, fence or not, and never re-created.
 *
 *   fencedStoreContract({ test, leaseTtl: 200, make: ({ leaseTtl }, scope) => ({ store, lock }) })
 */
import assert from 'node:assert/strict'
import type { SessionLease, SessionLock } from '../../locks/session-lock.js'
import { generateSessionId } from '../../sessions/session-id.js'
import type { SessionStore } from '../../sessions/session-store.js'
import { abortedWithin, freeze, registerCases, type CaseScope, type ContractCase, type TestFunction } from './runner.js'

/** One instance of the engine: a store and the lock whose leases fence its saves. */
export interface FencingPair<S extends SessionStore = SessionStore, L extends SessionLock = SessionLock> {
  store: S
  lock: L
}

/** Options of {@link fencedStoreContract}. */
export interface FencedStoreContractOptions<S extends SessionStore = SessionStore, L extends SessionLock = SessionLock> {
  /** The runner's `test(name, fn)` (`node:test`'s `test`, tap's `t.test.bind(t)`). */
  test: TestFunction
  /**
   * Builds one instance: a store and its lock. The instances one case builds (the same `scope`)
   * share their backend, like the processes of one deployment. `leaseTtl` is set for the
   * stale-holder cases only: the lock's leases then expire after so many ms unless renewed.
   */
  make: (options: { leaseTtl?: number }, scope: CaseScope) => FencingPair<S, L> | Promise<FencingPair<S, L>>
  /** Cleans up one instance `make` built, when its case ends (default: `lock.close?.()`, `store.close?.()`). */
  cleanup?: (pair: FencingPair<S, L>) => unknown
  /**
   * A lease TTL in ms short enough for a case (200 is fine): the stale-holder cases stall a holder
   * past it. Without it those cases are not run (a lock whose leases never expire has no stale
   * holder, and a store paired with it need not check a fence).
   */
  leaseTtl?: number
  /** The prefix of the case names (default `fenced save`): `<name>: <rule>`. */
  name?: string
}

interface FencedCase {
  make: (leaseTtl?: number) => Promise<FencingPair>
  leaseTtl: number
}

const cases: Array<ContractCase<FencedCase> & { expiring: boolean }> = []
const it = (name: string, run: ContractCase<FencedCase>['run']): void => { cases.push({ name, run, expiring: false }) }
const expiring = (name: string, run: ContractCase<FencedCase>['run']): void => { cases.push({ name, run, expiring: true }) }

/** A lease and the version read under it, as a request holds them. */
async function takeAndRead ({ store, lock }: FencingPair, id: string, timeout?: number): Promise<{ lease: SessionLease, version: number | undefined }> {
  const lease = await lock.acquire(id, timeout === undefined ? {} : { timeout })
  const record = await store.load(id)
  assert.ok(record !== null, 'the record exists')
  return { lease, version: record.version }
}

/** A record holding `data` whose reader stalled past its lease (no renewal ran); nobody has taken the key yet. */
async function stalledHolder (pair: FencingPair, leaseTtl: number, data: Record<string, string>): Promise<{ id: string, a: { lease: SessionLease, version: number | undefined } }> {
  const id = generateSessionId()
  await pair.store.create(id, data)
  const a = await takeAndRead(pair, id)
  freeze(leaseTtl * 3)
  return { id, a }
}

it('under a live lease the save goes through, even after an unlocked writer changed the record', async ({ make }) => {
  const { store, lock } = await make()
  const id = generateSessionId()
  await store.create(id, { n: 0 })
  const a = await takeAndRead({ store, lock }, id)
  assert.equal(await store.save(id, { set: { side: 1 }, delete: [] }), 'ok', 'no fence: last writer wins per key')
  assert.equal(await store.save(id, { set: { n: 1 }, delete: [] }, { version: a.version, fence: a.lease.fence }), 'ok',
    'the lease is still ours: the version read does not matter')
  await a.lease.release()
  assert.deepEqual(await store.load(id), { data: { n: 1, side: 1 }, version: 2 })
})

it('a record destroyed under a live lease is gone, fenced or not, and not re-created', async ({ make }) => {
  const { store, lock } = await make()
  const id = generateSessionId()
  await store.create(id, { n: 0 })
  const a = await takeAndRead({ store, lock }, id)
  assert.equal(await store.destroy(id), true)
  assert.equal(await store.save(id, { set: { n: 1 }, delete: [] }, { version: a.version, fence: a.lease.fence }), 'gone')
  assert.equal(await store.load(id), null, 'not re-created')
  assert.equal(await store.exists(id), false)
  await a.lease.release()
})

expiring('a paused holder whose lease expired cannot overwrite what the next holder saved', async ({ make, leaseTtl }) => {
  const one = await make(leaseTtl)
  const two = await make(leaseTtl)
  // A stalls (a GC pause): no renewal runs, its lease expires in the backend.
  const { id, a } = await stalledHolder(one, leaseTtl, { owner: 'nobody' })
  const b = await takeAndRead(two, id, leaseTtl * 50)
  assert.equal(await two.store.save(id, { set: { owner: 'B' }, delete: [] }, { version: b.version, fence: b.lease.fence }), 'ok')
  await b.lease.release()
  assert.equal(await one.store.save(id, { set: { owner: 'A' }, delete: [] }, { version: a.version, fence: a.lease.fence }), 'fenced',
    'a holder whose lease another took and wrote under must not write')
  assert.deepEqual(await one.store.load(id), { data: { owner: 'B' }, version: 1 }, "B's state survives")
  await abortedWithin(a.lease.signal, leaseTtl * 50, "A's signal never said its lease was lost")
  await a.lease.release().catch(() => {}) // lost: "not held", or nothing to do
})

expiring('lease expired while someone else holds it (not yet written): fenced', async ({ make, leaseTtl }) => {
  const one = await make(leaseTtl)
  const two = await make(leaseTtl)
  const { id, a } = await stalledHolder(one, leaseTtl, { x: 'first' })
  const b = await takeAndRead(two, id, leaseTtl * 50)
  assert.equal(await one.store.save(id, { set: { x: 'A' }, delete: [] }, { version: a.version, fence: a.lease.fence }), 'fenced',
    'the record is at the version A read, but the key is B\'s: B is about to write')
  assert.deepEqual(await two.store.load(id), { data: { x: 'first' }, version: 0 }, 'nothing written')
  await b.lease.release()
  await a.lease.release().catch(() => {})
})

expiring('lease expired, nobody took it, nobody wrote: the save goes through', async ({ make, leaseTtl }) => {
  const { store, lock } = await make(leaseTtl)
  const { id, a } = await stalledHolder({ store, lock }, leaseTtl, {})
  assert.equal(await store.save(id, { set: { x: 'A' }, delete: [] }, { version: a.version, fence: a.lease.fence }), 'ok',
    'the version read proves nobody wrote since: the save is safe')
  assert.deepEqual((await store.load(id))?.data, { x: 'A' })
  await a.lease.release().catch(() => {})
})

expiring('lease expired, nobody took it: without the version read the save is fenced', async ({ make, leaseTtl }) => {
  const { store, lock } = await make(leaseTtl)
  const { id, a } = await stalledHolder({ store, lock }, leaseTtl, { x: 'first' })
  assert.equal(await store.save(id, { set: { x: 'A' }, delete: [] }, { fence: a.lease.fence }), 'fenced',
    'a lost lease with no version read cannot prove that nobody wrote since')
  assert.deepEqual(await store.load(id), { data: { x: 'first' }, version: 0 }, 'nothing written')
  await a.lease.release().catch(() => {})
})

expiring('lease expired, nobody holds it, but an unlocked writer wrote: fenced', async ({ make, leaseTtl }) => {
  const { store, lock } = await make(leaseTtl)
  const { id, a } = await stalledHolder({ store, lock }, leaseTtl, {})
  assert.equal(await store.save(id, { set: { x: 'unlocked' }, delete: [] }), 'ok')
  assert.equal(await store.save(id, { set: { x: 'A' }, delete: [] }, { version: a.version, fence: a.lease.fence }), 'fenced')
  assert.deepEqual((await store.load(id))?.data, { x: 'unlocked' }, "the unlocked writer's change survives")
  await a.lease.release().catch(() => {})
})

/** The names of the fenced save contract's cases, in order (the stale-holder ones included). */
export const fencedStoreContractCases: readonly string[] = cases.map(c => c.name)

/** Registers the fenced save contract's cases with the runner, each against fresh instances from `make`. */
export function fencedStoreContract<S extends SessionStore, L extends SessionLock> (options: FencedStoreContractOptions<S, L>): void {
  const cleanup = options.cleanup ?? (async ({ store, lock }: FencingPair<S, L>) => { await lock.close?.(); await store.close?.() })
  const applies = cases.filter(c => !c.expiring || options.leaseTtl !== undefined)
  registerCases(options.test, options.name ?? 'fenced save', applies, scope => ({
    make: async (leaseTtl) => {
      const pair = await options.make(leaseTtl === undefined ? {} : { leaseTtl }, scope)
      scope.teardown(async () => { await cleanup(pair) })
      return pair
    },
    leaseTtl: options.leaseTtl ?? 0
  }))
}
