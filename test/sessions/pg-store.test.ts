import t, { type Test } from 'tap'
import type pg from 'pg'
import { PgSessionLock } from '../../lib/locks/pg-lock.js'
import type { SessionLease } from '../../lib/locks/session-lock.js'
import { PgSessionStore } from '../../lib/sessions/pg-store.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { pairingFor } from '../../lib/state/pairings/choose-pairing.js'
import { pairedCalls, type PairedCalls } from '../state/fixtures/paired-calls.js'
import { createTestDatabase, watchQueries } from '../helpers/postgres.js'
import { fencedStoreContract, storeContract, type CaseScope } from '../../lib/testing/contracts/index.js'

const db = await createTestDatabase(t)
let n = 0

storeContract({
  test: t.test.bind(t),
  name: 'PgSessionStore',
  make: ({ ttl }, t) => {
    const pool = db.pool({ max: 4 })
    return new PgSessionStore({ pool, ttl, prefix: `t${n++}_` })
  }
})

/** Blocks the event loop, as a GC pause or a stalled process would: no timer (renewal) can run. */
function freeze (ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

/** A pool whose queries are counted (each is one round trip: pg sends a query's messages in one write). */
function countingPool (): { pool: pg.Pool, sent: () => number } {
  let sent = 0
  const pool = watchQueries(db.pool({ max: 4 }), () => { sent++ })
  return { pool, sent: () => sent }
}

/** The fast-path calls of a store and a lock, through their pairing (one per pair, kept: it holds the lease engine's waiters). */
const PAIRS = new WeakMap<PgSessionStore, WeakMap<PgSessionLock, PairedCalls>>()
function paired (store: PgSessionStore, lock: PgSessionLock): PairedCalls {
  let byLock = PAIRS.get(store)
  if (byLock === undefined) PAIRS.set(store, byLock = new WeakMap())
  let calls = byLock.get(lock)
  if (calls === undefined) byLock.set(lock, calls = pairedCalls(pairingFor(store, lock)))
  return calls
}

async function setup (t: Test, options: { lockTtl?: number } = {}): Promise<{ store: PgSessionStore, lock: PgSessionLock, other: PgSessionLock }> {
  const prefix = `f${n++}_`
  const pool = db.pool({ max: 4 })
  const store = new PgSessionStore({ pool, prefix })
  const lock = new PgSessionLock({ pool, prefix, ttl: options.lockTtl })
  const other = new PgSessionLock({ pool: db.pool({ max: 2 }), prefix, ttl: options.lockTtl })
  t.teardown(async () => { await lock.close(); await other.close() })
  await Promise.all([lock.ready(), other.ready()])
  return { store, lock, other }
}

t.test('layout: one row per record, each key as [position, JSON text], the version, the expiry', async t => {
  const store = new PgSessionStore({ pool: db.admin, ttl: 10_000, prefix: 'layout_' })
  t.equal(store.prefix, 'layout_')
  const id = generateSessionId()
  await store.create(id, { cart: [{ sku: 'a' }], level: 'info', nul: 'a\u0000b' })
  const row = async (): Promise<Record<string, unknown>> => (await db.admin.query(
    'SELECT data, version::int, ttl_ms, extract(epoch from expires_at - clock_timestamp()) * 1000 AS left_ms FROM layout_state WHERE id = $1', [id])).rows[0]
  t.same((await row()).data, { cart: [1, '[{"sku":"a"}]'], level: [2, '"info"'], nul: [3, '"a\\u0000b"'] })
  t.same((await store.load(id))?.data, { cart: [{ sku: 'a' }], level: 'info', nul: 'a\u0000b' }, 'a NUL character survives (jsonb alone refuses it)')
  await db.admin.query("UPDATE layout_state SET expires_at = clock_timestamp() + interval '5 s'")
  await store.load(id)
  t.ok(Number((await row()).left_ms) > 9000, 'load refreshes the expiry')
  t.equal(await store.save(id, { set: { level: 'debug', added: 1 }, delete: ['cart'] }), 'ok')
  t.same((await row()).data, { level: [2, '"debug"'], nul: [3, '"a\\u0000b"'], added: [5, '1'] }, 'only the changed keys; a key keeps its place')
  t.equal((await row()).version, 1)
  t.same(Object.keys((await store.load(id))?.data ?? {}), ['level', 'nul', 'added'])
})

t.test('a read without the lock writes nothing while the record was refreshed less than an interval ago (least(1 s, ttl/10))', async t => {
  const store = new PgSessionStore({ pool: db.admin, ttl: 3_600_000, prefix: 'reads_' })
  const id = generateSessionId()
  await store.create(id, { items: ['tea'] })
  await store.save(id, { set: { items: ['tea', 'milk'] }, delete: [] })
  // A row's xmin is the transaction that wrote its current version: an UPDATE changes it.
  const row = async (): Promise<{ xmin: string, left: number }> => {
    const r = (await db.admin.query('SELECT xmin::text AS xmin, extract(epoch from expires_at - clock_timestamp()) * 1000 AS left FROM reads_state WHERE id = $1', [id])).rows[0]
    return { xmin: r.xmin, left: Number(r.left) }
  }
  const setLeft = async (ms: number): Promise<void> => {
    await db.admin.query('UPDATE reads_state SET expires_at = clock_timestamp() + $2::float8 * interval \'1 millisecond\' WHERE id = $1', [id, ms])
  }
  // Pushed a moment ago (as far as any clock can tell, however slow this machine is): no write.
  await setLeft(3_600_000 + 60_000)
  const pushed = (await row()).xmin
  for (let i = 0; i < 50; i++) t.same((await store.load(id))?.data, { items: ['tea', 'milk'] }, `read ${i}`)
  t.equal((await row()).xmin, pushed, '50 reads: the row was not written (no commit, no dead tuple)')
  // Pushed more than the interval (1 s of a 1 h ttl) ago: the next read pushes it.
  await setLeft(3_600_000 - 5_000)
  const aged = (await row()).xmin
  t.same((await store.load(id))?.data, { items: ['tea', 'milk'] })
  const refreshed = await row()
  t.not(refreshed.xmin, aged, 'refreshed by the read')
  t.ok(refreshed.left > 3_600_000 - 2_000, 'its idle TTL starts again')
  t.equal(await store.load(generateSessionId()), null, 'a missing record reads as null')
})

t.test('a value that is not JSON text is caught as SessionDataError; a 1 MiB value and 1,000 keys round-trip', async t => {
  const { store, lock } = await setup(t)
  const id = generateSessionId()
  const many: Record<string, number> = {}
  for (let i = 0; i < 1000; i++) many[`k${i}`] = i
  await store.create(id, {})
  t.equal(await store.save(id, { set: { ...many, big: 'x'.repeat(2 ** 20) }, delete: [] }), 'ok')
  const loaded = await store.load(id)
  t.equal(loaded?.data.k999, 999)
  t.equal((loaded?.data.big as string).length, 2 ** 20)
  await db.admin.query(`UPDATE ${store.prefix}state SET data = data || '{"broken": [5000, "{not json"]}'::jsonb WHERE id = $1`, [id])
  await t.rejects(store.load(id), { name: 'SessionDataError', sessionId: id })
  await t.rejects(paired(store, lock).acquireAndLoad(id), { name: 'SessionDataError' })
  t.same((await db.admin.query(`SELECT * FROM ${store.prefix}leases`)).rows, [], 'the lease was released')
})

t.test('bad options are refused', async t => {
  t.throws(() => new PgSessionStore({ pool: db.admin, prefix: 'A' }), TypeError)
  t.throws(() => new PgSessionStore({ pool: db.admin, ttl: 0 }), RangeError)
  t.throws(() => new PgSessionStore({ pool: {} as never }), TypeError)
})

t.test('with the PostgreSQL lock a locked request is 2 round trips: take+load, save+release', async t => {
  const { pool, sent } = countingPool()
  const store = new PgSessionStore({ pool, prefix: 'rt_' })
  const lock = new PgSessionLock({ pool, prefix: 'rt_' })
  t.teardown(() => lock.close())
  const id = generateSessionId()
  await store.create(id, { n: 0 })
  const access = pairedCalls(pairingFor(store, lock))
  t.ok(access.pairing.oneCall, 'the state layer pairs them')
  for (let i = 1; i <= 3; i++) {
    const before = sent()
    const taken = await access?.acquireAndLoad(id)
    t.equal(sent() - before, 1, `request ${i}: one call takes the lease and reads`)
    const n = taken?.record.data.n as number
    t.equal(await access?.saveAndRelease(id, { set: { n: n + 1 }, delete: [] }, { version: taken?.record.version }, taken?.lease as SessionLease), 'ok')
    t.equal(sent() - before, 2, `request ${i}: one more saves and releases`)
  }
  t.same((await store.load(id))?.data, { n: 3 })
  t.same((await db.admin.query('SELECT * FROM rt_leases')).rows, [], 'released')
  t.notOk(pairingFor(store, new PgSessionLock({ pool, prefix: 'other_' })).oneCall, 'not with a lock of another prefix')
  t.equal(await access?.acquireAndLoad(generateSessionId()), null, 'no record: null, nothing held')
  t.equal(lock.size, 0)
})

// The fenced save, as a request paired with the PostgreSQL lock makes it with plain store calls:
// the instances of one case share a prefix, each on a pool of its own.
fencedStoreContract({
  test: t.test.bind(t),
  name: 'PgSessionStore + PgSessionLock fenced save',
  leaseTtl: 200,
  make: (() => {
    const prefixes = new WeakMap<CaseScope, string>()
    return async ({ leaseTtl }, t) => {
      let prefix = prefixes.get(t)
      if (prefix === undefined) prefixes.set(t, prefix = `f${n++}_`)
      const pool = db.pool({ max: 4 })
      t.teardown(async () => { await pool.end() })
      const lock = new PgSessionLock({ pool, prefix, ttl: leaseTtl })
      await lock.ready()
      return { store: new PgSessionStore({ pool, prefix }), lock }
    }
  })()
})

// The same rules through the paired calls (take+load, save+release in one call each): what the
// plugin does with this store and lock.
t.test('fenced save through the paired calls', async t => {
  t.test('a paused holder is fenced, and its lease row is not freed', async t => {
    const { store, lock, other } = await setup(t, { lockTtl: 100 })
    const id = generateSessionId()
    await store.create(id, { owner: 'nobody' })
    const a = await paired(store, lock).acquireAndLoad(id)
    freeze(250)
    const b = await paired(store, other).acquireAndLoad(id, { timeout: 1000 })
    t.equal(await paired(store, lock).saveAndRelease(id, { set: { owner: 'A' }, delete: [] }, { version: a?.record.version }, a?.lease as SessionLease), 'fenced')
    t.equal(await other.tryAcquire(id), null, "B's lease is still held")
    t.equal(await paired(store, other).saveAndRelease(id, { set: { owner: 'B' }, delete: [] }, { version: b?.record.version }, b?.lease as SessionLease), 'ok')
    t.same(await store.load(id), { data: { owner: 'B' }, version: 1 })
  })

  t.test('a destroyed session is gone, not re-created, and the lease row released all the same', async t => {
    const { store, lock } = await setup(t)
    const id = generateSessionId()
    await store.create(id, {})
    const taken = await paired(store, lock).acquireAndLoad(id)
    await store.destroy(id)
    t.equal(await paired(store, lock).saveAndRelease(id, { set: { x: 1 }, delete: [] }, { version: taken?.record.version }, taken?.lease as SessionLease), 'gone')
    t.equal(await store.exists(id), false)
    t.same((await db.admin.query(`SELECT * FROM ${store.prefix}leases`)).rows, [], 'released all the same')
  })
})

t.test('concurrent locked increments through two instances keep every update', async t => {
  const { store, lock, other } = await setup(t)
  const store2 = new PgSessionStore({ pool: other.pool, prefix: store.prefix })
  const id = generateSessionId()
  await store.create(id, { n: 0 })
  await Promise.all(Array.from({ length: 40 }, async (_, i) => {
    const [s, l] = i % 2 === 0 ? [store, lock] : [store2, other]
    const taken = await paired(s, l).acquireAndLoad(id, { timeout: 20_000 })
    const n = taken?.record.data.n as number
    t.equal(await paired(s, l).saveAndRelease(id, { set: { n: n + 1 }, delete: [] }, { version: taken?.record.version }, taken?.lease as SessionLease), 'ok')
  }))
  t.same((await store.load(id))?.data, { n: 40 })
})

t.test('pass-on: an unchanged record and its lease go to the next waiter of this process without a round trip', async t => {
  const { pool, sent } = countingPool()
  const store = new PgSessionStore({ pool, prefix: 'pass_' })
  const lock = new PgSessionLock({ pool, prefix: 'pass_' })
  t.teardown(() => lock.close())
  const access = pairedCalls(pairingFor(store, lock))
  const id = generateSessionId()
  await store.create(id, { cart: { items: ['a'] } })
  const first = await access?.acquireAndLoad(id)
  ;((first?.record.data.cart as { items: string[] }).items).push('mutated, never saved')
  const next = access?.acquireAndLoad(id) // queued behind the first, in this process
  await new Promise(resolve => setTimeout(resolve, 20))
  const before = sent()
  t.equal(access?.passOn(id, first?.lease as SessionLease), true, 'passed on to the waiter')
  const second = await next
  t.equal(sent() - before, 0, 'no query for the hand-over')
  t.same(second?.record, { data: { cart: { items: ['a'] } }, version: 0 }, 'its own copy, without what the first mutated')
  t.equal(second?.lease.fence?.token, first?.lease.fence?.token, 'the same lease row')
  t.equal(access?.passOn(id, second?.lease as SessionLease), false, 'nobody waits: not passed on')
  await second?.lease.release()
  t.same((await db.admin.query('SELECT * FROM pass_leases')).rows, [], 'released once, by the last holder')
  await t.rejects((first?.lease as SessionLease).release(), { code: 'MCP_SESSION_LOCK_NOT_HELD' }, 'the first holder has let go')
  // A chain of passes goes back through the database after PG_MAX_PASS_ON.
  let lease = (await access?.acquireAndLoad(id))?.lease as SessionLease
  const passed: boolean[] = []
  for (let i = 0; i < 20; i++) {
    const waiting = access?.acquireAndLoad(id)
    await new Promise(resolve => setTimeout(resolve, 5))
    const on = access?.passOn(id, lease) === true
    passed.push(on)
    if (!on) await lease.release()
    lease = (await waiting)?.lease as SessionLease
  }
  await lease.release()
  t.same(passed.map((on, i) => on ? -1 : i).filter(i => i >= 0), [16], 'after 16 passes in a row the lease goes back through the database once')
})
