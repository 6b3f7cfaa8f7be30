/**
 * The Redis pairing (state/pairings/redis-pairing.ts): take-lock+read and save+release in one script
 * each, and the lease passed on to the next waiter of this process without a round trip. Against
 * a private redis-server.
 */
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { SessionLockTimeoutError } from '../../lib/locks/errors.js'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import { MAX_PASS_ON } from '../../lib/locks/backend-leases.js'
import { RedisSessionLock } from '../../lib/locks/redis-lock.js'
import type { RedisLease } from '../../lib/locks/redis-lease.js'
import type { SessionLease } from '../../lib/locks/session-lock.js'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import { RedisSessionStore } from '../../lib/sessions/redis-store.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { pairingFor } from '../../lib/state/pairings/choose-pairing.js'
import { RedisPairing } from '../../lib/state/pairings/redis-pairing.js'
import { pairedCalls, type PairedCalls } from './fixtures/paired-calls.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => { admin.disconnect() })
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`
const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

/** Blocks the event loop, as a GC pause or a stalled process would: no timer (renewal) can run. */
function freeze (ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

const roundTrips = async <T>(fn: () => Promise<T>): Promise<{ value: T, commands: string[] }> => await commandsSent(admin, fn)

interface Setup {
  store: RedisSessionStore
  lock: RedisSessionLock
  /** Another instance's lock on the same server. */
  other: RedisSessionLock
  fast: PairedCalls
  fastOther: PairedCalls
  prefix: string
}

/** A store and two locks on the private server, with one prefix; clients closed in teardown. */
async function setup (t: Test, options: { ttl?: number, lockTtl?: number } = {}): Promise<Setup> {
  const prefix = newPrefix()
  const client = new Redis(server.url)
  t.teardown(() => { client.disconnect() })
  const store = new RedisSessionStore({ redis: client, ttl: options.ttl, prefix })
  const lock = new RedisSessionLock({ redis: server.url, prefix, ttl: options.lockTtl })
  const other = new RedisSessionLock({ redis: server.url, prefix, ttl: options.lockTtl })
  t.teardown(async () => { await lock.close(); await other.close() })
  await Promise.all([lock.ready(), other.ready()])
  return { store, lock, other, prefix, fast: pairedCalls(new RedisPairing(store, lock)), fastOther: pairedCalls(new RedisPairing(store, other)) }
}

t.test('fast path: acquireAndLoad and saveAndRelease', async t => {
  t.test('picked only for a Redis store with a Redis lock', async t => {
    const { store, lock } = await setup(t)
    t.ok(pairingFor(store, lock) instanceof RedisPairing)
    t.notOk(pairingFor(store, new MemorySessionLock()).oneCall)
    t.notOk(pairingFor(store, null).oneCall)
    t.notOk(pairingFor(new MemorySessionStore(), lock).oneCall)
  })

  t.test('one round trip each; the lease is taken with the read and released with the write', async t => {
    const { store, lock, fast, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { n: 0 })
    // Warm up: the first call of a script may be EVALSHA + EVAL (NOSCRIPT).
    const warm = await fast.acquireAndLoad(id)
    await fast.saveAndRelease(id, { set: {}, delete: [] }, { version: warm?.record.version }, warm?.lease as SessionLease)

    const acquire = await roundTrips(async () => await fast.acquireAndLoad(id))
    const taken = acquire.value
    t.same(acquire.commands, ['evalsha'], 'acquireAndLoad: one command')
    t.same(taken?.record, { data: { n: 0 }, version: 1 })
    t.equal(await admin.get(`${prefix}{${id}}:lock`), taken?.lease.fence?.token, 'lease held')

    const save = await roundTrips(async () =>
      await fast.saveAndRelease(id, { set: { n: 1 }, delete: [] }, { version: taken?.record.version }, taken?.lease as SessionLease))
    const result = save.value
    t.same(save.commands, ['evalsha'], 'saveAndRelease: one command')
    t.equal(result, 'ok')
    t.equal((taken?.lease as RedisLease).read, undefined, 'what was read under the lease is let go with it (see Lease.claim())')
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0, 'released')
    t.same(await store.load(id), { data: { n: 1 }, version: 2 })
    await t.rejects(taken?.lease.release() as Promise<void>, { message: /not held/ }, 'released already')
    await t.rejects(fast.saveAndRelease(id, { set: {}, delete: [] }, {}, taken?.lease as SessionLease), { message: /not held/ })
    t.equal(lock.size, 0)
    t.equal(lock.held, 0)
  })

  t.test('a missing session: null, and nothing held', async t => {
    const { lock, fast, prefix } = await setup(t)
    const id = generateSessionId()
    t.equal(await fast.acquireAndLoad(id), null)
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
    t.equal(lock.size, 0)
  })

  t.test('waits like acquire(): behind a holder, with its timeout and owner rules', async t => {
    const { store, fast, other } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { n: 0 })
    const held = await other.acquire(id)
    await t.rejects(fast.acquireAndLoad(id, { timeout: 50 }), SessionLockTimeoutError)
    const waiting = fast.acquireAndLoad(id, { timeout: 5000 })
    await sleep(50)
    await held.release()
    const taken = await waiting
    t.ok(taken)
    const owner = {}
    await taken?.lease.release()
    const mine = await fast.acquireAndLoad(id, { owner })
    await t.rejects(fast.acquireAndLoad(id, { owner }), { message: /already held/ })
    await mine?.lease.release()
  })

  t.test('its lease is renewed while held, and released by lease.release() too', async t => {
    const { store, fast, prefix } = await setup(t, { lockTtl: 150 })
    const id = generateSessionId()
    await store.create(id, {})
    const taken = await fast.acquireAndLoad(id)
    await sleep(450)
    t.equal(taken?.lease.signal.aborted, false)
    t.equal(await admin.get(`${prefix}{${id}}:lock`), taken?.lease.fence?.token)
    await taken?.lease.release()
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
  })

  t.test('a paused holder: saveAndRelease is fenced and leaves the next holder alone', async t => {
    const { store, lock, fast, fastOther, other, prefix } = await setup(t, { lockTtl: 100 })
    const id = generateSessionId()
    await store.create(id, { owner: 'nobody' })
    const a = await fast.acquireAndLoad(id)
    freeze(250)
    const b = await fastOther.acquireAndLoad(id, { timeout: 1000 })
    t.equal(await fastOther.saveAndRelease(id, { set: { owner: 'B' }, delete: [] }, { version: b?.record.version }, b?.lease as SessionLease), 'ok')
    const c = await other.acquire(id) // the next holder, who has not written yet
    t.equal(await fast.saveAndRelease(id, { set: { owner: 'A' }, delete: [] }, { version: a?.record.version }, a?.lease as SessionLease), 'fenced')
    t.equal(await admin.get(`${prefix}{${id}}:lock`), c.fence?.token, "the next holder's lease survives")
    t.same((await store.load(id))?.data, { owner: 'B' })
    await c.release()
    t.equal(lock.size + other.size, 0)
  })

  t.test('a session destroyed under the lease: gone, and the lease is released', async t => {
    const { store, fast, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, {})
    const taken = await fast.acquireAndLoad(id)
    await store.destroy(id)
    t.equal(await fast.saveAndRelease(id, { set: { x: 1 }, delete: [] }, { version: 0 }, taken?.lease as SessionLease), 'gone')
    t.equal(await store.exists(id), false)
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
  })

  t.test('changes that cannot be saved: refused, and the lease ends all the same', async t => {
    const { store, fast, lock, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { a: 1 })
    const taken = await fast.acquireAndLoad(id)
    const refused = fast.saveAndRelease(id, { set: { '\x00v': 9 }, delete: [] }, { version: taken?.record.version }, taken?.lease as SessionLease)
    await t.rejects(refused, TypeError, 'a reserved key')
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0, 'the lease is gone in Redis')
    await t.rejects(taken?.lease.release() as Promise<void>, { message: /not held/ }, 'and here')
    const next = await lock.acquire(id, { timeout: 0 })
    await next.release()
    t.same((await store.load(id))?.data, { a: 1 }, 'nothing written')
  })

  t.test('a lease of another lock kind is refused', async t => {
    const { fast } = await setup(t)
    const lease = await new MemorySessionLock().acquire(generateSessionId())
    await t.rejects(fast.saveAndRelease(lease.id, { set: {}, delete: [] }, {}, lease), TypeError)
  })
})

t.test('passOn: an unchanged session and its lease go to the next waiter of this process without a round trip', async t => {
  t.test('hands over the token and a fresh copy of the session; no command is sent', async t => {
    const { store, lock, fast, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { cart: ['a'] })
    const first = await fast.acquireAndLoad(id)
    if (first === null) throw new Error('no session')
    const waiting = fast.acquireAndLoad(id)
    await sleep(10)
    // The first holder mutates what it read without set(): that must not reach the next one.
    ;(first.record.data.cart as string[]).push('unsaved')
    const { value: next, commands } = await roundTrips(async () => {
      t.equal(fast.passOn(id, first.lease), true, 'passed on')
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
    t.equal(await fast.saveAndRelease(id, { set: { cart: ['a', 'b'] }, delete: [] }, { version: 0 }, next!.lease), 'ok')
    t.same((await store.load(id))?.data, { cart: ['a', 'b'] })
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
    t.equal(lock.held, 0)
    t.equal(lock.size, 0)
  })

  t.test('refused, holding on, without a waiter, for a lost lease, a lease it did not read, or after MAX_PASS_ON passes', async t => {
    const { store, lock, fast, other, prefix } = await setup(t, { lockTtl: 300 })
    const id = generateSessionId()
    await store.create(id, { n: 1 })
    const alone = await fast.acquireAndLoad(id)
    t.equal(fast.passOn(id, alone!.lease), false, 'nobody waits')
    await alone!.lease.release()

    const plain = await lock.acquire(id)
    const behind = fast.acquireAndLoad(id)
    await sleep(10)
    t.equal(fast.passOn(id, plain), false, 'a lease taken without reading the session')
    await plain.release()
    const taken = await behind

    // Lost: another instance took the lease after it expired (the renewal could not run).
    const waiter = fast.acquireAndLoad(id)
    freeze(350)
    const stolen = await other.acquire(id, { timeout: 0 })
    await sleep(20)
    t.equal((taken!.lease as unknown as { lost: boolean }).lost, true)
    t.equal(fast.passOn(id, taken!.lease), false, 'a lost lease is not passed on')
    await taken!.lease.release().catch(() => {})
    await stolen.release()
    const after = await waiter
    t.ok(after !== null, 'the waiter took it afresh')

    // A chain: MAX_PASS_ON passes, then the lease goes back through Redis.
    let holder = after!
    let passes = 0
    for (;;) {
      const next = fast.acquireAndLoad(id)
      await sleep(1)
      if (!fast.passOn(id, holder.lease)) {
        await holder.lease.release()
        holder = (await next)!
        break
      }
      passes++
      holder = (await next)!
    }
    t.equal(passes, MAX_PASS_ON, `passed on ${MAX_PASS_ON} times in a row, then released`)
    t.not(holder.lease.fence?.token, after!.lease.fence?.token, 'the next lease is a fresh one')
    const again = fast.acquireAndLoad(id)
    await sleep(1)
    t.equal(fast.passOn(id, holder.lease), true, 'and a fresh lease may be passed on again')
    await (await again)!.lease.release()
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0)
  })

  t.test('a lease passed on keeps being renewed: a chain longer than the ttl keeps it', async t => {
    const { store, fast, prefix } = await setup(t, { lockTtl: 300 })
    const id = generateSessionId()
    await store.create(id, {})
    let holder = (await fast.acquireAndLoad(id))!
    const token = holder.lease.fence?.token
    // 8 holders of 120 ms each: 960 ms, over three ttls, all on the first token.
    for (let i = 0; i < 8; i++) {
      const next = fast.acquireAndLoad(id)
      await sleep(120)
      t.equal(fast.passOn(id, holder.lease), true, `pass ${i + 1}`)
      holder = (await next)!
      t.equal(holder.lease.fence?.token, token)
    }
    t.equal((holder.lease as unknown as { lost: boolean }).lost, false, 'never lost')
    t.equal(await admin.get(`${prefix}{${id}}:lock`), token, 'still ours in Redis')
    t.ok(await admin.pttl(`${prefix}{${id}}:lock`) > 0)
    await holder.lease.release()
  })

  t.test('a waiter of another store, or a lock that closes meanwhile, takes the lease afresh or not at all', async t => {
    const { store, lock, fast, prefix } = await setup(t)
    const id = generateSessionId()
    await store.create(id, { a: 1 })
    const otherClient = new Redis(server.url)
    t.teardown(() => { otherClient.disconnect() })
    const foreign = pairedCalls(new RedisPairing(new RedisSessionStore({ redis: otherClient, prefix }), lock))
    const first = await fast.acquireAndLoad(id)
    const waiting = foreign.acquireAndLoad(id)
    await sleep(10)
    t.equal(fast.passOn(id, first!.lease), true)
    const got = await waiting
    t.not(got?.lease.fence?.token, first!.lease.fence?.token, 'another store\'s waiter took a fresh lease')
    t.same(got?.record.data, { a: 1 })
    const last = fast.acquireAndLoad(id)
    await sleep(10)
    t.equal(foreign.passOn(id, got!.lease), true)
    const refused = t.rejects(last, { code: 'MCP_SESSION_LOCK_CLOSED' }, 'closed before the next holder ran')
    await lock.close()
    await refused
    await sleep(50)
    t.equal(await admin.exists(`${prefix}{${id}}:lock`), 0, 'and the lease was released in Redis')
  })
})
