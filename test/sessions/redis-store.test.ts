import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { RedisSessionLock, createLockClient } from '../../lib/locks/redis-lock.js'
import { RedisSessionStore, decodeSession } from '../../lib/sessions/redis-store.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { RedisPairing } from '../../lib/state/pairings/redis-pairing.js'
import { pairedCalls } from '../state/fixtures/paired-calls.js'
import { fencedStoreContract, storeContract, type CaseScope } from '../../lib/testing/contracts/index.js'
import { sleep } from '../helpers/time.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
admin.on('error', () => {}) // the fault tests below stop the server under it
t.teardown(() => { admin.disconnect() })
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`

/** A store and a lock on the private server, with one prefix; client and lock closed in teardown. */
async function setup (t: Test): Promise<{ store: RedisSessionStore, lock: RedisSessionLock, prefix: string }> {
  const prefix = newPrefix()
  const client = new Redis(server.url)
  t.teardown(() => { client.disconnect() })
  const store = new RedisSessionStore({ redis: client, prefix })
  const lock = new RedisSessionLock({ redis: server.url, prefix })
  t.teardown(async () => { await lock.close() })
  await lock.ready()
  return { store, lock, prefix }
}

storeContract({
  test: t.test.bind(t),
  name: 'RedisSessionStore',
  make: ({ ttl }, t) => {
    const client = new Redis(server.url)
    t.teardown(() => { client.disconnect() })
    return new RedisSessionStore({ redis: client, ttl, prefix: newPrefix() })
  }
})

t.test('layout: one hash per session at <prefix>{<sid>}:s, JSON text per key, the version in \\0v', async t => {
  const store = new RedisSessionStore({ redis: admin, ttl: 10_000 })
  t.equal(store.prefix, 'mcp:', 'default prefix')
  t.equal(store.ttl, 10_000)
  const id = generateSessionId()
  const key = `mcp:{${id}}:s`
  t.teardown(() => admin.del(key))
  await store.create(id, { cart: [{ sku: 'a' }], level: 'info' })
  t.same(await admin.hgetall(key), { cart: '[{"sku":"a"}]', level: '"info"', '\x00v': '0' })
  const pttl = await admin.pttl(key)
  t.ok(pttl > 0 && pttl <= 10_000, `TTL kept by Redis (${pttl} ms)`)
  await admin.pexpire(key, 5000)
  await store.load(id)
  t.ok(await admin.pttl(key) > 9000, 'load refreshes it')
  await admin.pexpire(key, 5000)
  await store.save(id, { set: { level: 'debug' }, delete: ['cart'] })
  t.ok(await admin.pttl(key) > 9000, 'save refreshes it')
  t.same(await admin.hgetall(key), { level: '"debug"', '\x00v': '1' })
  t.same(await store.gc(), [], 'gc: Redis expires keys itself')
})

t.test('a session is read as one JSON document: any key survives, a value that is not JSON text is caught', async t => {
  const { store, lock, prefix } = await setup(t)
  const fast = pairedCalls(new RedisPairing(store, lock))
  const id = generateSessionId()
  const key = `${prefix}{${id}}:s`
  // Keys the script must quote (quote, backslash, control characters, a slash), and some it need not.
  const odd = ['say "hi"', 'back\\slash', 'line\nbreak', 'bell\x07', 'tab\t', 'a/b', 'é ✓ 😀', '__proto__', '$mcp/version', '']
  const data: Record<string, unknown> = {}
  for (const [i, k] of odd.entries()) Object.defineProperty(data, k, { value: { i, text: `v "${k}"` }, enumerable: true })
  await store.create(id, data as Record<string, never>)
  const loaded = await store.load(id)
  t.same(Object.keys(loaded?.data ?? {}).sort(), [...odd].sort(), 'every key, as it was written')
  for (const [i, k] of odd.entries()) t.same(Object.getOwnPropertyDescriptor(loaded?.data, k)?.value, { i, text: `v "${k}"` }, JSON.stringify(k))
  t.equal(Object.getPrototypeOf(loaded?.data), Object.prototype, 'no prototype pollution')
  const taken = await fast.acquireAndLoad(id)
  t.same(taken?.record, loaded, 'the fast path reads the same record')
  await taken?.lease.release()

  // Many fields and deletions in one save (the script writes them in slices), and a 1 MiB value.
  const many: Record<string, number> = {}
  for (let i = 0; i < 1000; i++) many[`k${i}`] = i
  t.equal(await store.save(id, { set: { ...many, big: 'x'.repeat(2 ** 20) }, delete: [] }), 'ok')
  const afterSet = await store.load(id)
  t.equal(afterSet?.version, 1)
  t.equal(afterSet?.data.k999, 999)
  t.equal((afterSet?.data.big as string).length, 2 ** 20)
  t.equal(await store.save(id, { set: {}, delete: Object.keys(many) }), 'ok')
  const afterDelete = await store.load(id)
  t.equal(afterDelete?.version, 2, 'a save of deletions only bumps the version too')
  t.notOk('k0' in (afterDelete?.data ?? {}))
  t.equal(Object.keys(afterDelete?.data ?? {}).length, odd.length + 1)

  // Written behind the store's back: not JSON, or JSON text only together with its neighbours.
  await admin.hset(key, 'broken', '{not json')
  await t.rejects(store.load(id), { name: 'SessionDataError', sessionId: id })
  await t.rejects(fast.acquireAndLoad(id), { name: 'SessionDataError' })
  t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0, 'the lease was released')
  await admin.hset(key, 'broken', '1,"smuggled":2')
  await t.rejects(store.load(id), { name: 'SessionDataError' }, 'a value that adds a key is caught')
  await admin.hdel(key, 'broken')
  t.same((await store.load(id))?.data['a/b'], { i: 5, text: 'v "a/b"' }, 'repaired, it loads')
})

t.test('a load reply is one string (version, fields, document); a header that is not two integers is not data', async t => {
  t.same(decodeSession('s', '3 1 {"a":1}'), { data: { a: 1 }, version: 3 })
  t.same(decodeSession('s', '1 3 1 {"a":1}', 2), { data: { a: 1 }, version: 3 }, 'after the take-lock+read status')
  t.same(decodeSession('s', '0 0 {}'), { data: {}, version: 0 })
  for (const bad of ['', '3', '3 1', 'x 1 {"a":1}', '3 y {"a":1}', '1.5 1 {"a":1}', '3 2 {"a":1}', '3 1 [1]', '3 1 {"a":1']) {
    t.throws(() => decodeSession('s', bad), { name: 'SessionDataError', sessionId: 's' }, JSON.stringify(bad))
  }
})

t.test('a session read again unchanged is copied from what was decoded: never stale, never shared between readers', async t => {
  const { store, lock, prefix } = await setup(t)
  const other = new RedisSessionStore({ redis: admin, prefix }) // another instance's store
  const fast = pairedCalls(new RedisPairing(store, lock))
  const id = generateSessionId()
  await store.create(id, { cart: { items: ['a'] }, n: 1 })
  for (let i = 0; i < 3; i++) {
    const loaded = await store.load(id)
    t.same(loaded, { data: { cart: { items: ['a'] }, n: 1 }, version: 0 }, `load ${i}`)
    ;((loaded?.data.cart as { items: string[] }).items).push('mutated by a reader')
  }
  for (let i = 0; i < 3; i++) {
    const taken = await fast.acquireAndLoad(id)
    t.same(taken?.record, { data: { cart: { items: ['a'] }, n: 1 }, version: 0 }, `locked read ${i}: what an earlier reader did is not there`)
    ;((taken?.record.data.cart as { items: string[] }).items).push('mutated under the lease')
    await taken?.lease.release()
  }
  t.equal(await other.save(id, { set: { n: 2 }, delete: [] }), 'ok', 'another instance writes')
  t.same(await store.load(id), { data: { cart: { items: ['a'] }, n: 2 }, version: 1 }, 'this instance reads the write')
  const taken = await fast.acquireAndLoad(id)
  t.same(taken?.record, { data: { cart: { items: ['a'] }, n: 2 }, version: 1 }, 'so does the fast path')
  await taken?.lease.release()
  await other.destroy(id)
  t.equal(await store.load(id), null, 'gone for every instance')
  await store.create(id, { n: 1 })
  t.same(await store.load(id), { data: { n: 1 }, version: 0 }, 'created again, with a version it had before')
})

t.test('keys starting with NUL are reserved; bad options are refused', async t => {
  const store = new RedisSessionStore({ redis: admin, prefix: newPrefix() })
  const id = generateSessionId()
  await t.rejects(store.create(id, { '\x00v': 5 }), TypeError)
  await store.create(id, {})
  await t.rejects(store.save(id, { set: { '\x00v': 99 }, delete: [] }), TypeError)
  await t.rejects(store.save(id, { set: {}, delete: ['\x00v'] }), TypeError)
  t.same(await store.load(id), { data: {}, version: 0 })
  await store.destroy(id)
  t.throws(() => new RedisSessionStore({ redis: admin, prefix: '{x}' }), TypeError)
  t.throws(() => new RedisSessionStore({ redis: admin, ttl: 0 }), RangeError)
  t.throws(() => new RedisSessionStore({ redis: {} as Redis }), TypeError)
})

// The fenced save, as a request paired with the Redis lock makes it: two instances of one case share
// its prefix on the private server, each with a client of its own.
fencedStoreContract({
  test: t.test.bind(t),
  name: 'RedisSessionStore + RedisSessionLock fenced save',
  leaseTtl: 200,
  make: (() => {
    const prefixes = new WeakMap<CaseScope, string>()
    return async ({ leaseTtl }, t) => {
      let prefix = prefixes.get(t)
      if (prefix === undefined) prefixes.set(t, prefix = newPrefix())
      const client = new Redis(server.url)
      t.teardown(() => { client.disconnect() })
      const lock = new RedisSessionLock({ redis: server.url, prefix, ttl: leaseTtl })
      await lock.ready()
      return { store: new RedisSessionStore({ redis: client, prefix }), lock }
    }
  })()
})

// ---- fault injection: stops and restarts the private server ----------------------------------

t.test('a store whose Redis is down rejects (never reports a live session as missing), then recovers', async t => {
  const client = createLockClient(server.url)
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  const store = new RedisSessionStore({ redis: client, prefix: newPrefix() })
  const id = generateSessionId()
  await new Promise(resolve => client.once('ready', resolve))
  await store.create(id, { a: 1 })
  await server.stop()
  await sleep(50)
  // A connection error, not any error (a bug in the store would reject too).
  const down = { message: /Connection is closed|Stream isn't writeable|ECONNREFUSED|not connected/ }
  await t.rejects(store.load(id), down)
  await t.rejects(store.exists(id), down)
  await t.rejects(store.save(id, { set: { a: 2 }, delete: [] }), down)
  await server.start()
  await new Promise(resolve => client.once('ready', resolve))
  t.equal(await store.load(id), null, 'the private server keeps nothing across a restart (no persistence)')
  await store.create(id, { a: 3 })
  t.same((await store.load(id))?.data, { a: 3 })
})
