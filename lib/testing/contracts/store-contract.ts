/**
 * The session store contract (`SessionStore`, `lib/sessions/session-store.ts`): what the plugin
 * relies on of any store, bundled or an app's own. Each case is one rule; the ones that matter most
 * are what keeps an update from being lost or a client from being told something the store did not
 * keep (docs/your-own-engine.md):
 * - a save never re-creates a destroyed or expired record (`gone`), else a deleted session comes
 *   back to life with half its keys;
 * - a save writes only the changed keys, else two requests that changed different keys overwrite
 *   each other (the last one wins the whole record);
 * - every load is the caller's own copy, and what a caller passes in is copied, else a handler's
 *   unsaved mutation leaks into the next request (told ≠ kept).
 *
 *   import { test } from 'node:test'
 *   import { storeContract } from 'fastify-mcp-http/testing/contracts'
 *   storeContract({ test, make: ({ ttl }) => new MyStore({ ttl }) })
 */
import assert from 'node:assert/strict'
import { generateSessionId } from '../../sessions/session-id.js'
import type { JsonValue, SessionStore } from '../../sessions/session-store.js'
import { registerCases, sleep, type CaseScope, type ContractCase, type TestFunction } from './runner.js'

/** Options of {@link storeContract}. */
export interface StoreContractOptions<S extends SessionStore = SessionStore> {
  /** The runner's `test(name, fn)` (`node:test`'s `test`, tap's `t.test.bind(t)`). */
  test: TestFunction
  /** Builds a fresh, empty store whose idle TTL is `ttl` ms (one or more per case). */
  make: (options: { ttl: number }, scope: CaseScope) => S | Promise<S>
  /** Cleans up one store `make` built, when its case ends (default: `store.close?.()`). */
  cleanup?: (store: S) => unknown
  /** The prefix of the case names (default `store`): `<name>: <rule>`. */
  name?: string
}

interface StoreCase {
  make: (ttl?: number) => Promise<SessionStore>
}

/** A TTL long enough that nothing expires during a case. */
const LONG = 60_000

const cases: Array<ContractCase<StoreCase>> = []
const it = (name: string, run: ContractCase<StoreCase>['run']): void => { cases.push({ name, run }) }
const assertNot = (value: unknown, message?: string): void => { assert.ok(!(value as boolean), message) }

it('reports its ttl', async ({ make }) => {
  const store = await make(12_345)
  assert.equal(store.ttl, 12_345)
})

it('create then load round-trips every kind of JSON value, at version 0', async ({ make }) => {
  const store = await make()
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
  assert.ok(record, 'loaded')
  assert.equal(record?.version, 0)
  assert.deepEqual(record?.data, data)
  assert.equal(Object.getPrototypeOf(record?.data), Object.prototype, 'no prototype pollution')
  assert.deepEqual(Object.getOwnPropertyDescriptor(record?.data, '__proto__')?.value, { evil: true })
})

it('create with no keys makes an empty session that exists', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  await store.create(id, {})
  assert.deepEqual(await store.load(id), { data: {}, version: 0 })
  assert.equal(await store.exists(id), true)
})

it('create rejects an id that is taken', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  await store.create(id, { a: 1 })
  await assert.rejects(store.create(id, { a: 2 }))
  assert.deepEqual((await store.load(id))?.data, { a: 1 }, 'the first session is untouched')
})

it('load of an unknown session is null', async ({ make }) => {
  const store = await make()
  assert.equal(await store.load(generateSessionId()), null)
})

it('the caller owns what it passes in and what it gets back', async ({ make }) => {
  const store = await make()
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
  assert.deepEqual(second?.data, { cart: [{ sku: 'a' }], value: { n: 1 } })
})

it('every load, however many, gives fresh objects equal to what was stored', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  const data: Record<string, JsonValue> = { list: [1, { two: [2] }], nested: { a: { b: 'c' } }, n: 1 }
  Object.defineProperty(data.nested as object, '__proto__', { value: { evil: [true] }, enumerable: true })
  const want = JSON.stringify(data)
  await store.create(id, data)
  for (let i = 0; i < 4; i++) {
    const record = await store.load(id)
    assert.equal(JSON.stringify(record?.data), want, `load ${i}`)
    const nested = record?.data.nested as Record<string, JsonValue>
    assert.equal(Object.getPrototypeOf(nested), Object.prototype, `load ${i}: no prototype pollution`)
    assert.ok(Object.hasOwn(nested, '__proto__'), `load ${i}: "__proto__" is an own key`)
    // Mutated every way a handler could: none of it may reach the next load.
    ;((record?.data.list as JsonValue[])[1] as { two: JsonValue[] }).two.push(3)
    ;(nested.a as Record<string, JsonValue>).b = 'changed'
    // eslint-disable-next-line no-proto -- an own key named __proto__ (parsed JSON), not the prototype
    ;((nested.__proto__ as Record<string, JsonValue>).evil as JsonValue[]).push(false)
    ;(record?.data.list as JsonValue[]).length = 0
    delete record?.data.n
  }
  await store.save(id, { set: { n: 2 }, delete: [] })
  for (let i = 0; i < 3; i++) assert.deepEqual((await store.load(id))?.data.n, 2, `load ${i} after a save`)
})

it('save writes only the changed keys and bumps the version', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  await store.create(id, { a: 1, b: 2 })
  assert.equal(await store.save(id, { set: { a: 10 }, delete: [] }), 'ok')
  assert.deepEqual(await store.load(id), { data: { a: 10, b: 2 }, version: 1 })
  assert.equal(await store.save(id, { set: { c: [3] }, delete: ['b', 'never-there'] }), 'ok')
  assert.deepEqual(await store.load(id), { data: { a: 10, c: [3] }, version: 2 })
  assert.equal(await store.save(id, { set: {}, delete: [] }), 'ok')
  assert.equal((await store.load(id))?.version, 3, 'an empty save still counts as a write')
})

it('two requests that change different keys both keep their change', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  await store.create(id, { base: true })
  await Promise.all([store.load(id), store.load(id)])
  const results = await Promise.all([
    store.save(id, { set: { fromA: 'a' }, delete: [] }),
    store.save(id, { set: { fromB: 'b' }, delete: [] }),
    store.save(id, { set: { fromC: 'c' }, delete: ['base'] })
  ])
  assert.deepEqual(results, ['ok', 'ok', 'ok'])
  assert.deepEqual(await store.load(id), { data: { fromA: 'a', fromB: 'b', fromC: 'c' }, version: 3 })
})

it('without a fence, guard.version does not block a save (last writer wins per key)', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  await store.create(id, { k: 'first' })
  await store.save(id, { set: { k: 'second' }, delete: [] })
  assert.equal(await store.save(id, { set: { k: 'stale' }, delete: [] }, { version: 0 }), 'ok')
  assert.deepEqual((await store.load(id))?.data, { k: 'stale' })
})

it('save of an unknown session is gone and creates nothing', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  assert.equal(await store.save(id, { set: { a: 1 }, delete: [] }), 'gone')
  assert.equal(await store.load(id), null)
  assert.equal(await store.exists(id), false)
})

it('save after destroy is gone and never brings the session back', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  await store.create(id, { a: 1 })
  const read = await store.load(id)
  assert.equal(await store.destroy(id), true)
  assert.equal(await store.save(id, { set: { a: 2 }, delete: [] }, { version: read?.version }), 'gone')
  assert.equal(await store.load(id), null)
  assert.equal(await store.exists(id), false)
})

it('destroy resolves whether the session existed', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  await store.create(id, {})
  assert.equal(await store.destroy(id), true)
  assert.equal(await store.destroy(id), false)
  assert.equal(await store.destroy(generateSessionId()), false)
})

it('exists tells live from unknown sessions', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  assert.equal(await store.exists(id), false)
  await store.create(id, {})
  assert.equal(await store.exists(id), true)
})

it('load and save refresh the idle TTL; exists does not', async ({ make }) => {
  const store = await make(500)
  const kept = generateSessionId()
  const watched = generateSessionId()
  await store.create(kept, { n: 0 })
  await store.create(watched, { n: 0 })
  for (let i = 1; i <= 3; i++) {
    await sleep(300)
    assert.ok(await store.load(kept), `kept alive by load ${i}`)
    assert.equal(await store.exists(watched), i === 1, `exists ${i} does not refresh`)
  }
  await sleep(300)
  assert.equal(await store.save(kept, { set: { n: 1 }, delete: [] }), 'ok', 'still alive')
  await sleep(300)
  assert.ok(await store.load(kept), 'kept alive by the save')
  assert.equal(await store.load(watched), null, 'the unrefreshed session expired')
})

it('an expired session is gone for every operation, and its id can be reused', async ({ make }) => {
  const store = await make(200)
  const id = generateSessionId()
  await store.create(id, { a: 1 })
  await sleep(350)
  assert.equal(await store.exists(id), false)
  assert.equal(await store.load(id), null)
  assert.equal(await store.save(id, { set: { a: 2 }, delete: [] }), 'gone')
  assert.equal(await store.destroy(id), false)
  await store.create(id, { b: 1 })
  assert.deepEqual(await store.load(id), { data: { b: 1 }, version: 0 })
})

it('a record with a TTL of its own lives and expires by it, refreshed by use', async ({ make }) => {
  const store = await make(600)
  const short = generateSessionId()
  const long = generateSessionId()
  const plain = generateSessionId()
  await store.create(short, { a: 1 }, { ttl: 250 })
  await store.create(long, { b: 1 }, { ttl: 5000 })
  await store.create(plain, { c: 1 })
  await sleep(400)
  assert.equal(await store.exists(short), false, 'shorter than the store\'s: expired')
  assert.equal(await store.load(short), null)
  assert.equal(await store.save(short, { set: { a: 2 }, delete: [] }), 'gone')
  assert.ok(await store.load(long), 'longer one: alive (and refreshed)')
  assert.ok(await store.load(plain), 'the store\'s ttl still applies to the rest')
  await sleep(450)
  assert.equal(await store.save(long, { set: { b: 2 }, delete: [] }), 'ok', 'past the store\'s ttl, alive by its own')
  assert.deepEqual((await store.load(long))?.data, { b: 2 })
  await sleep(700)
  assert.equal(await store.exists(plain), false, 'expired by the store\'s ttl')
  assert.equal(await store.exists(long), true, 'still alive by its own, refreshed by the load')
  const removed = await store.gc()
  assertNot(removed.includes(long), 'gc keeps it')
  await store.destroy(long)
})

it('a record created with unusedTtl expires by it until its first load or save, then by the ttl', async ({ make }) => {
  const store = await make(5000)
  const never = generateSessionId()
  const loaded = generateSessionId()
  const saved = generateSessionId()
  for (const id of [never, loaded, saved]) await store.create(id, { a: 1 }, { unusedTtl: 300 })
  assert.ok(await store.load(loaded), 'loaded once: used')
  assert.equal(await store.save(saved, { set: { a: 2 }, delete: [] }), 'ok', 'saved once: used')
  await sleep(600)
  assert.equal(await store.exists(never), false, 'never used: expired by unusedTtl')
  assert.equal(await store.load(never), null)
  assert.equal(await store.exists(loaded), true, 'used: alive by the store\'s ttl')
  assert.equal(await store.exists(saved), true)
  await store.gc()
  assert.equal(await store.exists(loaded), true, 'gc keeps the used ones')
})

it('gc resolves to the ids it removed and keeps live sessions', async ({ make }) => {
  const store = await make(250)
  const old = generateSessionId()
  const live = generateSessionId()
  await store.create(old, {})
  await sleep(350)
  await store.create(live, { still: 'here' })
  const removed = await store.gc()
  assert.ok(Array.isArray(removed))
  assert.ok(removed.every(id => id === old), 'only the expired session may be reported')
  assert.deepEqual((await store.load(live))?.data, { still: 'here' })
  assert.equal(await store.load(old), null)
})

it('a value JSON cannot carry is refused and nothing is written', async ({ make }) => {
  const store = await make()
  const id = generateSessionId()
  await store.create(id, { a: 1 })
  await assert.rejects(store.save(id, { set: { a: 2, b: undefined as unknown as JsonValue }, delete: [] }), TypeError)
  assert.deepEqual(await store.load(id), { data: { a: 1 }, version: 0 })
  await assert.rejects(store.create(generateSessionId(), { f: (() => {}) as unknown as JsonValue }), TypeError)
})

it('close may be called twice', async ({ make }) => {
  const store = await make()
  await store.close?.()
  await store.close?.()
  assert.ok(true)
})

/** The names of the store contract's cases, in order. */
export const storeContractCases: readonly string[] = cases.map(c => c.name)

/** Registers the store contract's cases with the runner, each against fresh stores from `make`. */
export function storeContract<S extends SessionStore> (options: StoreContractOptions<S>): void {
  const cleanup = options.cleanup ?? (async (store: S) => { await store.close?.() })
  registerCases(options.test, options.name ?? 'store', cases, scope => ({
    make: async (ttl = LONG) => {
      const store = await options.make({ ttl }, scope)
      scope.teardown(async () => { await cleanup(store) })
      return store
    }
  }))
}
