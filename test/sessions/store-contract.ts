/**
 * The session store contract, run against every store (memory, file, Redis). A store-specific test
 * file calls `runSessionStoreContract(t, name, factory)`; the factory builds a fresh store (with the
 * TTL asked for) and registers its own cleanup with `t.teardown`.
 */
import type { Test } from 'tap'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import type { JsonValue, SessionStore } from '../../lib/sessions/session-store.js'
import { sleep } from '../helpers/time.js'

export type StoreFactory = (t: Test, options: { ttl: number }) => SessionStore | Promise<SessionStore>

/** A TTL long enough that nothing expires during a test. */
const LONG = 60_000

export function runSessionStoreContract (t: Test, name: string, factory: StoreFactory): void {
  const make = async (t: Test, ttl = LONG): Promise<SessionStore> => await factory(t, { ttl })

  t.test(`${name}: store contract`, async t => {
    t.test('reports its ttl', async t => {
      const store = await make(t, 12_345)
      t.equal(store.ttl, 12_345)
    })

    t.test('create then load round-trips every kind of JSON value, at version 0', async t => {
      const store = await make(t)
      const id = generateSessionId()
      const data: Record<string, JsonValue> = {
        text: 'héllo ✓ "quoted"\n',
        empty: '',
        int: 42,
        float: -1.5,
        yes: true,
        no: false,
        nothing: null,
        list: [1, 'two', [3], { four: 4 }],
        nested: { a: { b: { c: [null, true] } } }
      }
      // A key named like a prototype accessor must stay a plain key.
      Object.defineProperty(data, '__proto__', { value: { evil: true }, enumerable: true })
      await store.create(id, data)
      const record = await store.load(id)
      t.ok(record, 'loaded')
      t.equal(record?.version, 0)
      t.same(record?.data, data)
      t.equal(Object.getPrototypeOf(record?.data), Object.prototype, 'no prototype pollution')
      t.same(Object.getOwnPropertyDescriptor(record?.data, '__proto__')?.value, { evil: true })
    })

    t.test('create with no keys makes an empty session that exists', async t => {
      const store = await make(t)
      const id = generateSessionId()
      await store.create(id, {})
      t.same(await store.load(id), { data: {}, version: 0 })
      t.equal(await store.exists(id), true)
    })

    t.test('create rejects an id that is taken', async t => {
      const store = await make(t)
      const id = generateSessionId()
      await store.create(id, { a: 1 })
      await t.rejects(store.create(id, { a: 2 }))
      t.same((await store.load(id))?.data, { a: 1 }, 'the first session is untouched')
    })

    t.test('load of an unknown session is null', async t => {
      const store = await make(t)
      t.equal(await store.load(generateSessionId()), null)
    })

    t.test('the caller owns what it passes in and what it gets back', async t => {
      const store = await make(t)
      const id = generateSessionId()
      const cart = [{ sku: 'a' }]
      await store.create(id, { cart })
      cart.push({ sku: 'mutated after create' })
      const first = await store.load(id)
      ;(first?.data.cart as JsonValue[]).push({ sku: 'mutated after load' })
      const value = { n: 1 }
      await store.save(id, { set: { value }, delete: [] })
      value.n = 2
      const second = await store.load(id)
      t.same(second?.data, { cart: [{ sku: 'a' }], value: { n: 1 } })
    })

    t.test('every load, however many, gives fresh objects equal to what was stored', async t => {
      const store = await make(t)
      const id = generateSessionId()
      const data: Record<string, JsonValue> = { list: [1, { two: [2] }], nested: { a: { b: 'c' } }, n: 1 }
      Object.defineProperty(data.nested as object, '__proto__', { value: { evil: [true] }, enumerable: true })
      const want = JSON.stringify(data)
      await store.create(id, data)
      for (let i = 0; i < 4; i++) {
        const record = await store.load(id)
        t.equal(JSON.stringify(record?.data), want, `load ${i}`)
        const nested = record?.data.nested as Record<string, JsonValue>
        t.equal(Object.getPrototypeOf(nested), Object.prototype, `load ${i}: no prototype pollution`)
        t.ok(Object.hasOwn(nested, '__proto__'), `load ${i}: "__proto__" is an own key`)
        // Mutated every way a handler could: none of it may reach the next load.
        ;((record?.data.list as JsonValue[])[1] as { two: JsonValue[] }).two.push(3)
        ;(nested.a as Record<string, JsonValue>).b = 'changed'
        // eslint-disable-next-line no-proto -- an own key named __proto__ (parsed JSON), not the prototype
        ;((nested.__proto__ as Record<string, JsonValue>).evil as JsonValue[]).push(false)
        ;(record?.data.list as JsonValue[]).length = 0
        delete record?.data.n
      }
      await store.save(id, { set: { n: 2 }, delete: [] })
      for (let i = 0; i < 3; i++) t.same((await store.load(id))?.data.n, 2, `load ${i} after a save`)
    })

    t.test('save writes only the changed keys and bumps the version', async t => {
      const store = await make(t)
      const id = generateSessionId()
      await store.create(id, { a: 1, b: 2 })
      t.equal(await store.save(id, { set: { a: 10 }, delete: [] }), 'ok')
      t.same(await store.load(id), { data: { a: 10, b: 2 }, version: 1 })
      t.equal(await store.save(id, { set: { c: [3] }, delete: ['b', 'never-there'] }), 'ok')
      t.same(await store.load(id), { data: { a: 10, c: [3] }, version: 2 })
      t.equal(await store.save(id, { set: {}, delete: [] }), 'ok')
      t.equal((await store.load(id))?.version, 3, 'an empty save still counts as a write')
    })

    t.test('two requests that change different keys both keep their change', async t => {
      const store = await make(t)
      const id = generateSessionId()
      await store.create(id, { base: true })
      await Promise.all([store.load(id), store.load(id)])
      const results = await Promise.all([
        store.save(id, { set: { fromA: 'a' }, delete: [] }),
        store.save(id, { set: { fromB: 'b' }, delete: [] }),
        store.save(id, { set: { fromC: 'c' }, delete: ['base'] })
      ])
      t.same(results, ['ok', 'ok', 'ok'])
      t.same(await store.load(id), { data: { fromA: 'a', fromB: 'b', fromC: 'c' }, version: 3 })
    })

    t.test('without a fence, guard.version does not block a save (last writer wins per key)', async t => {
      const store = await make(t)
      const id = generateSessionId()
      await store.create(id, { k: 'first' })
      await store.save(id, { set: { k: 'second' }, delete: [] })
      t.equal(await store.save(id, { set: { k: 'stale' }, delete: [] }, { version: 0 }), 'ok')
      t.same((await store.load(id))?.data, { k: 'stale' })
    })

    t.test('save of an unknown session is gone and creates nothing', async t => {
      const store = await make(t)
      const id = generateSessionId()
      t.equal(await store.save(id, { set: { a: 1 }, delete: [] }), 'gone')
      t.equal(await store.load(id), null)
      t.equal(await store.exists(id), false)
    })

    t.test('save after destroy is gone and never brings the session back', async t => {
      const store = await make(t)
      const id = generateSessionId()
      await store.create(id, { a: 1 })
      const read = await store.load(id)
      t.equal(await store.destroy(id), true)
      t.equal(await store.save(id, { set: { a: 2 }, delete: [] }, { version: read?.version }), 'gone')
      t.equal(await store.load(id), null)
      t.equal(await store.exists(id), false)
    })

    t.test('destroy resolves whether the session existed', async t => {
      const store = await make(t)
      const id = generateSessionId()
      await store.create(id, {})
      t.equal(await store.destroy(id), true)
      t.equal(await store.destroy(id), false)
      t.equal(await store.destroy(generateSessionId()), false)
    })

    t.test('exists tells live from unknown sessions', async t => {
      const store = await make(t)
      const id = generateSessionId()
      t.equal(await store.exists(id), false)
      await store.create(id, {})
      t.equal(await store.exists(id), true)
    })

    t.test('load and save refresh the idle TTL; exists does not', async t => {
      const store = await make(t, 500)
      const kept = generateSessionId()
      const watched = generateSessionId()
      await store.create(kept, { n: 0 })
      await store.create(watched, { n: 0 })
      for (let i = 1; i <= 3; i++) {
        await sleep(300)
        t.ok(await store.load(kept), `kept alive by load ${i}`)
        t.equal(await store.exists(watched), i === 1, `exists ${i} does not refresh`)
      }
      await sleep(300)
      t.equal(await store.save(kept, { set: { n: 1 }, delete: [] }), 'ok', 'still alive')
      await sleep(300)
      t.ok(await store.load(kept), 'kept alive by the save')
      t.equal(await store.load(watched), null, 'the unrefreshed session expired')
    })

    t.test('an expired session is gone for every operation, and its id can be reused', async t => {
      const store = await make(t, 200)
      const id = generateSessionId()
      await store.create(id, { a: 1 })
      await sleep(350)
      t.equal(await store.exists(id), false)
      t.equal(await store.load(id), null)
      t.equal(await store.save(id, { set: { a: 2 }, delete: [] }), 'gone')
      t.equal(await store.destroy(id), false)
      await store.create(id, { b: 1 })
      t.same(await store.load(id), { data: { b: 1 }, version: 0 })
    })

    t.test('a record with a TTL of its own lives and expires by it, refreshed by use', async t => {
      const store = await make(t, 600)
      const short = generateSessionId()
      const long = generateSessionId()
      const plain = generateSessionId()
      await store.create(short, { a: 1 }, { ttl: 250 })
      await store.create(long, { b: 1 }, { ttl: 5000 })
      await store.create(plain, { c: 1 })
      await sleep(400)
      t.equal(await store.exists(short), false, 'shorter than the store\'s: expired')
      t.equal(await store.load(short), null)
      t.equal(await store.save(short, { set: { a: 2 }, delete: [] }), 'gone')
      t.ok(await store.load(long), 'longer one: alive (and refreshed)')
      t.ok(await store.load(plain), 'the store\'s ttl still applies to the rest')
      await sleep(450)
      t.equal(await store.save(long, { set: { b: 2 }, delete: [] }), 'ok', 'past the store\'s ttl, alive by its own')
      t.same((await store.load(long))?.data, { b: 2 })
      await sleep(700)
      t.equal(await store.exists(plain), false, 'expired by the store\'s ttl')
      t.equal(await store.exists(long), true, 'still alive by its own, refreshed by the load')
      const removed = await store.gc()
      t.notOk(removed.includes(long), 'gc keeps it')
      await store.destroy(long)
    })

    t.test('a record created with unusedTtl expires by it until its first load or save, then by the ttl', async t => {
      const store = await make(t, 5000)
      const never = generateSessionId()
      const loaded = generateSessionId()
      const saved = generateSessionId()
      for (const id of [never, loaded, saved]) await store.create(id, { a: 1 }, { unusedTtl: 300 })
      t.ok(await store.load(loaded), 'loaded once: used')
      t.equal(await store.save(saved, { set: { a: 2 }, delete: [] }), 'ok', 'saved once: used')
      await sleep(600)
      t.equal(await store.exists(never), false, 'never used: expired by unusedTtl')
      t.equal(await store.load(never), null)
      t.equal(await store.exists(loaded), true, 'used: alive by the store\'s ttl')
      t.equal(await store.exists(saved), true)
      await store.gc()
      t.equal(await store.exists(loaded), true, 'gc keeps the used ones')
    })

    t.test('gc resolves to the ids it removed and keeps live sessions', async t => {
      const store = await make(t, 250)
      const old = generateSessionId()
      const live = generateSessionId()
      await store.create(old, {})
      await sleep(350)
      await store.create(live, { still: 'here' })
      const removed = await store.gc()
      t.ok(Array.isArray(removed))
      t.ok(removed.every(id => id === old), 'only the expired session may be reported')
      t.same((await store.load(live))?.data, { still: 'here' })
      t.equal(await store.load(old), null)
    })

    t.test('a value JSON cannot carry is refused and nothing is written', async t => {
      const store = await make(t)
      const id = generateSessionId()
      await store.create(id, { a: 1 })
      await t.rejects(store.save(id, { set: { a: 2, b: undefined as unknown as JsonValue }, delete: [] }), TypeError)
      t.same(await store.load(id), { data: { a: 1 }, version: 0 })
      await t.rejects(store.create(generateSessionId(), { f: (() => {}) as unknown as JsonValue }), TypeError)
    })

    t.test('close may be called twice', async t => {
      const store = await make(t)
      await store.close?.()
      await store.close?.()
      t.pass()
    })
  })
}
