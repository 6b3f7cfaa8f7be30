import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { SessionLockTimeoutError } from '../../lib/locks/errors.js'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import { MAX_PASS_ON, RedisSessionLock, createLockClient } from '../../lib/locks/redis-lock.js'
import type { SessionLease } from '../../lib/locks/session-lock.js'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import { RedisSessionStore } from '../../lib/sessions/redis-store.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { isLockingStore } from '../../lib/sessions/session-store.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { runSessionStoreContract } from './store-contract.js'
import { sleep } from '../helpers/time.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
admin.on('error', () => {}) // the fault tests below stop the server under it
t.teardown(() => { admin.disconnect() })
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`

/** Blocks the event loop, as a GC pause or a stalled process would: no timer (renewal) can run. */
function freeze (ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

/** A store and a lock on the private server, with one prefix; clients closed in teardown. */
async function setup (t: Test, options: { ttl?: number, lockTtl?: number } = {}):
Promise<{ store: RedisSessionStore, lock: RedisSessionLock, other: RedisSessionLock, prefix: string }> {
  const prefix = newPrefix()
  const client = new Redis(server.url)
  t.teardown(() => { client.disconnect() })
  const store = new RedisSessionStore({ redis: client, ttl: options.ttl, prefix })
  const lock = new RedisSessionLock({ redis: server.url, prefix, ttl: options.lockTtl })
  const other = new RedisSessionLock({ redis: server.url, prefix, ttl: options.lockTtl }) // another instance
  t.teardown(async () => { await lock.close(); await other.close() })
  await Promise.all([lock.ready(), other.ready()])
  return { store, lock, other, prefix }
}

/** Commands clients sent while `fn` ran (see commandsSent). */
const roundTrips = async <T>(fn: () => Promise<T>): Promise<{ value: T, commands: string[] }> => await commandsSent(admin, fn)

runSessionStoreContract(t, 'RedisSessionStore', (t, { ttl }) => {
  const client = new Redis(server.url)
  t.teardown(() => { client.disconnect() })
  return new RedisSessionStore({ redis: client, ttl, prefix: newPrefix() })
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

t.test('fenced save', async t => {
  t.test('under a live lease: written, even if an unlocked writer changed the session meanwhile', async t => {
    const { store, lock } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { n: 0 })
    const lease = await lock.acquire(id)
    const read = await store.load(id)
    await store.save(id, { set: { side: 1 }, delete: [] }) // no fence: last writer wins
    t.equal(await store.save(id, { set: { n: 1 }, delete: [] }, { version: read?.version, fence: lease.fence }), 'ok')
    await lease.release()
    t.same((await store.load(id))?.data, { n: 1, side: 1 })
  })

  t.test('a paused holder whose lease expired cannot overwrite what the next holder saved', async t => {
    const { store, lock, other } = await setup(t, { lockTtl: 100 })
    const id = generateSessionId()
    await store.create(id, { owner: 'nobody' })
    const a = await lock.acquire(id)
    const readByA = await store.load(id)
    freeze(250) // A stalls past its lease: no renewal runs, Redis expires the lease
    const b = await other.acquire(id, { timeout: 1000 })
    const readByB = await store.load(id)
    t.equal(await store.save(id, { set: { owner: 'B' }, delete: [] }, { version: readByB?.version, fence: b.fence }), 'ok')
    await b.release()
    t.equal(await store.save(id, { set: { owner: 'A' }, delete: [] }, { version: readByA?.version, fence: a.fence }), 'fenced')
    t.same(await store.load(id), { data: { owner: 'B' }, version: 1 }, "B's state survives")
    await sleep(50)
    t.equal(a.signal.aborted, true, "A's signal says its lease was lost")
    await a.release()
  })

  t.test('lease expired while someone else holds it (not yet written): fenced', async t => {
    const { store, lock, other } = await setup(t, { lockTtl: 100 })
    const id = generateSessionId()
    await store.create(id, {})
    const a = await lock.acquire(id)
    const read = await store.load(id)
    freeze(250)
    const b = await other.acquire(id, { timeout: 1000 })
    t.equal(await store.save(id, { set: { x: 'A' }, delete: [] }, { version: read?.version, fence: a.fence }), 'fenced')
    await b.release()
    await a.release()
  })

  t.test('lease expired, nobody took it, nobody wrote: the save is still safe and goes through', async t => {
    const { store, lock } = await setup(t, { lockTtl: 100 })
    const id = generateSessionId()
    await store.create(id, {})
    const a = await lock.acquire(id)
    const read = await store.load(id)
    freeze(250)
    t.equal(await store.save(id, { set: { x: 'A' }, delete: [] }, { version: read?.version, fence: a.fence }), 'ok')
    t.equal(await store.save(id, { set: { x: 'A2' }, delete: [] }, { fence: a.fence }), 'fenced',
      'without the version read, a lost lease cannot prove anything')
    await a.release()
  })

  t.test('lease expired, nobody holds it, but an unlocked writer wrote: fenced', async t => {
    const { store, lock } = await setup(t, { lockTtl: 100 })
    const id = generateSessionId()
    await store.create(id, {})
    const a = await lock.acquire(id)
    const read = await store.load(id)
    freeze(250)
    await store.save(id, { set: { x: 'unlocked' }, delete: [] })
    t.equal(await store.save(id, { set: { x: 'A' }, delete: [] }, { version: read?.version, fence: a.fence }), 'fenced')
    t.same((await store.load(id))?.data, { x: 'unlocked' })
    await a.release()
  })

  t.test('a destroyed session is gone, fenced or not', async t => {
    const { store, lock } = await setup(t)
    const id = generateSessionId()
    await store.create(id, {})
    const lease = await lock.acquire(id)
    const read = await store.load(id)
    await store.destroy(id)
    t.equal(await store.save(id, { set: { x: 1 }, delete: [] }, { version: read?.version, fence: lease.fence }), 'gone')
    t.equal(await store.exists(id), false, 'not re-created')
    await lease.release()
  })
})

t.test('fast path: acquireAndLoad and saveAndRelease', async t => {
  t.test('detected only for a Redis lock', async t => {
    const { store, lock } = await setup(t)
    t.equal(isLockingStore(store, lock), true)
    t.equal(isLockingStore(store, new MemorySessionLock()), false)
    t.equal(isLockingStore(store, null), false)
    t.equal(isLockingStore(new MemorySessionStore(), lock), false)
  })

  t.test('one round trip each; the lease is taken with the read and released with the write', async t => {
    const { store, lock, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { n: 0 })
    // Warm up: the first call of a script may be EVALSHA + EVAL (NOSCRIPT).
    const warm = await store.acquireAndLoad(id, lock)
    await store.saveAndRelease(id, { set: {}, delete: [] }, { version: warm?.record.version }, warm?.lease as SessionLease)

    const acquire = await roundTrips(async () => await store.acquireAndLoad(id, lock))
    const taken = acquire.value
    t.same(acquire.commands, ['evalsha'], 'acquireAndLoad: one command')
    t.same(taken?.record, { data: { n: 0 }, version: 1 })
    t.equal(await admin.get(`${prefix}{${id}}:lock`), taken?.lease.fence?.token, 'lease held')

    const save = await roundTrips(async () =>
      await store.saveAndRelease(id, { set: { n: 1 }, delete: [] }, { version: taken?.record.version }, taken?.lease as SessionLease))
    const result = save.value
    t.same(save.commands, ['evalsha'], 'saveAndRelease: one command')
    t.equal(result, 'ok')
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0, 'released')
    t.same(await store.load(id), { data: { n: 1 }, version: 2 })
    await t.rejects(taken?.lease.release() as Promise<void>, { message: /not held/ }, 'released already')
    await t.rejects(store.saveAndRelease(id, { set: {}, delete: [] }, {}, taken?.lease as SessionLease), { message: /not held/ })
    t.equal(lock.size, 0)
    t.equal(lock.held, 0)
  })

  t.test('a missing session: null, and nothing held', async t => {
    const { store, lock, prefix } = await setup(t)
    const id = generateSessionId()
    t.equal(await store.acquireAndLoad(id, lock), null)
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
    t.equal(lock.size, 0)
  })

  t.test('waits like acquire(): behind a holder, with its timeout and owner rules', async t => {
    const { store, lock, other } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { n: 0 })
    const held = await other.acquire(id)
    await t.rejects(store.acquireAndLoad(id, lock, { timeout: 50 }), SessionLockTimeoutError)
    const waiting = store.acquireAndLoad(id, lock, { timeout: 5000 })
    await sleep(50)
    await held.release()
    const taken = await waiting
    t.ok(taken)
    const owner = {}
    await taken?.lease.release()
    const mine = await store.acquireAndLoad(id, lock, { owner })
    await t.rejects(store.acquireAndLoad(id, lock, { owner }), { message: /already held/ })
    await mine?.lease.release()
    await t.rejects(store.acquireAndLoad(id, new MemorySessionLock()), TypeError)
  })

  t.test('its lease is renewed while held, and released by lease.release() too', async t => {
    const { store, lock, prefix } = await setup(t, { lockTtl: 150 })
    const id = generateSessionId()
    await store.create(id, {})
    const taken = await store.acquireAndLoad(id, lock)
    await sleep(450)
    t.equal(taken?.lease.signal.aborted, false)
    t.equal(await admin.get(`${prefix}{${id}}:lock`), taken?.lease.fence?.token)
    await taken?.lease.release()
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
  })

  t.test('a paused holder: saveAndRelease is fenced and leaves the next holder alone', async t => {
    const { store, lock, other, prefix } = await setup(t, { lockTtl: 100 })
    const id = generateSessionId()
    await store.create(id, { owner: 'nobody' })
    const a = await store.acquireAndLoad(id, lock)
    freeze(250)
    const b = await store.acquireAndLoad(id, other, { timeout: 1000 })
    t.equal(await store.saveAndRelease(id, { set: { owner: 'B' }, delete: [] }, { version: b?.record.version }, b?.lease as SessionLease), 'ok')
    const c = await other.acquire(id) // the next holder, who has not written yet
    t.equal(await store.saveAndRelease(id, { set: { owner: 'A' }, delete: [] }, { version: a?.record.version }, a?.lease as SessionLease), 'fenced')
    t.equal(await admin.get(`${prefix}{${id}}:lock`), c.fence?.token, "the next holder's lease survives")
    t.same((await store.load(id))?.data, { owner: 'B' })
    await c.release()
    t.equal(lock.size + other.size, 0)
  })

  t.test('a session destroyed under the lease: gone, and the lease is released', async t => {
    const { store, lock, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, {})
    const taken = await store.acquireAndLoad(id, lock)
    await store.destroy(id)
    t.equal(await store.saveAndRelease(id, { set: { x: 1 }, delete: [] }, { version: 0 }, taken?.lease as SessionLease), 'gone')
    t.equal(await store.exists(id), false)
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
  })

  t.test('a lease of another lock kind is refused', async t => {
    const { store } = await setup(t)
    const lease = await new MemorySessionLock().acquire(generateSessionId())
    await t.rejects(store.saveAndRelease(lease.id, { set: {}, delete: [] }, {}, lease), TypeError)
  })
})

t.test('passOn: an unchanged session and its lease go to the next waiter of this process without a round trip', async t => {
  t.test('hands over the token and a fresh copy of the session; no command is sent', async t => {
    const { store, lock, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { cart: ['a'] })
    const first = await store.acquireAndLoad(id, lock)
    if (first === null) throw new Error('no session')
    const waiting = store.acquireAndLoad(id, lock)
    await sleep(10)
    // The first holder mutates what it read without set(): that must not reach the next one.
    ;(first.record.data.cart as string[]).push('unsaved')
    const { value: next, commands } = await roundTrips(async () => {
      t.equal(store.passOn(id, first.lease), true, 'passed on')
      return await waiting
    })
    t.same(commands, [], 'no Redis command for the handoff')
    t.equal(next?.lease.fence?.token, first.lease.fence?.token, 'the same lease token')
    t.same(next?.record, { data: { cart: ['a'] }, version: 0 }, 'the session as stored, not the first holder\'s mutated copy')
    t.not(next?.record.data, first.record.data)
    await t.rejects(first.lease.release(), { code: 'MCP_SESSION_LOCK_NOT_HELD' }, 'the first lease has ended')
    t.equal(await admin.get(`${prefix}{${id}}:lock`), first.lease.fence?.token, 'still held in Redis')
    t.equal(lock.held, 1)
    // The next holder saves and releases as usual, fenced by the same token.
    t.equal(await store.saveAndRelease(id, { set: { cart: ['a', 'b'] }, delete: [] }, { version: 0 }, next!.lease), 'ok')
    t.same((await store.load(id))?.data, { cart: ['a', 'b'] })
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
    t.equal(lock.held, 0)
    t.equal(lock.size, 0)
  })

  t.test('refused, holding on, without a waiter, for a lost lease, a lease it did not read, or after MAX_PASS_ON passes', async t => {
    const { store, lock, other, prefix } = await setup(t, { lockTtl: 300 })
    const id = generateSessionId()
    await store.create(id, { n: 1 })
    const alone = await store.acquireAndLoad(id, lock)
    t.equal(store.passOn(id, alone!.lease), false, 'nobody waits')
    await alone!.lease.release()

    const plain = await lock.acquire(id)
    const behind = store.acquireAndLoad(id, lock)
    await sleep(10)
    t.equal(store.passOn(id, plain), false, 'a lease taken without reading the session')
    await plain.release()
    const taken = await behind

    // Lost: another instance took the lease after it expired (the renewal could not run).
    const waiter = store.acquireAndLoad(id, lock)
    freeze(350)
    const stolen = await other.acquire(id, { timeout: 0 })
    await sleep(20)
    t.equal((taken!.lease as unknown as { lost: boolean }).lost, true)
    t.equal(store.passOn(id, taken!.lease), false, 'a lost lease is not passed on')
    await taken!.lease.release().catch(() => {})
    await stolen.release()
    const after = await waiter
    t.ok(after !== null, 'the waiter took it afresh')

    // A chain: MAX_PASS_ON passes, then the lease goes back through Redis.
    let holder = after!
    let passes = 0
    for (;;) {
      const next = store.acquireAndLoad(id, lock)
      await sleep(1)
      if (!store.passOn(id, holder.lease)) {
        await holder.lease.release()
        holder = (await next)!
        break
      }
      passes++
      holder = (await next)!
    }
    t.equal(passes, MAX_PASS_ON, `passed on ${MAX_PASS_ON} times in a row, then released`)
    t.not(holder.lease.fence?.token, after!.lease.fence?.token, 'the next lease is a fresh one')
    const again = store.acquireAndLoad(id, lock)
    await sleep(1)
    t.equal(store.passOn(id, holder.lease), true, 'and a fresh lease may be passed on again')
    await (await again)!.lease.release()
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
  })

  t.test('a lease passed on keeps being renewed: a chain longer than the ttl keeps it', async t => {
    const { store, lock, prefix } = await setup(t, { lockTtl: 300 })
    const id = generateSessionId()
    await store.create(id, {})
    let holder = (await store.acquireAndLoad(id, lock))!
    const token = holder.lease.fence?.token
    // 8 holders of 120 ms each: 960 ms, over three ttls, all on the first token.
    for (let i = 0; i < 8; i++) {
      const next = store.acquireAndLoad(id, lock)
      await sleep(120)
      t.equal(store.passOn(id, holder.lease), true, `pass ${i + 1}`)
      holder = (await next)!
      t.equal(holder.lease.fence?.token, token)
    }
    t.equal((holder.lease as unknown as { lost: boolean }).lost, false, 'never lost')
    t.equal(await admin.get(`${prefix}{${id}}:lock`), token, 'still ours in Redis')
    t.ok(await admin.pttl(`${prefix}{${id}}:lock`) > 0)
    await holder.lease.release()
  })

  t.test('a waiter of another store, or a lock that closes meanwhile, takes the lease afresh or not at all', async t => {
    const { store, lock, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { a: 1 })
    const otherClient = new Redis(server.url)
    t.teardown(() => { otherClient.disconnect() })
    const foreign = new RedisSessionStore({ redis: otherClient, prefix })
    const first = await store.acquireAndLoad(id, lock)
    const waiting = foreign.acquireAndLoad(id, lock)
    await sleep(10)
    t.equal(store.passOn(id, first!.lease), true)
    const got = await waiting
    t.not(got?.lease.fence?.token, first!.lease.fence?.token, 'another store\'s waiter took a fresh lease')
    t.same(got?.record.data, { a: 1 })
    const last = store.acquireAndLoad(id, lock)
    await sleep(10)
    t.equal(foreign.passOn(id, got!.lease), true)
    const refused = t.rejects(last, { code: 'MCP_SESSION_LOCK_CLOSED' }, 'closed before the next holder ran')
    await lock.close()
    await refused
    await sleep(50)
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0, 'and the lease was released in Redis')
  })
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
  await t.rejects(store.load(id))
  await t.rejects(store.exists(id))
  await t.rejects(store.save(id, { set: { a: 2 }, delete: [] }))
  await server.start()
  await new Promise(resolve => client.once('ready', resolve))
  t.equal(await store.load(id), null, 'the private server keeps nothing across a restart (no persistence)')
  await store.create(id, { a: 3 })
  t.same((await store.load(id))?.data, { a: 3 })
})
