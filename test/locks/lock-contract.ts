/**
 * The session lock contract, run against every lock (memory, file, Redis). A lock-specific test
 * file calls `runSessionLockContract(t, name, options)`:
 * - `create(t, {timeout})` builds a lock (and registers its close with `t.teardown`); locks built
 *   by one test share their backend, like the workers of one deployment;
 * - `idle(t, lock)` asserts that nothing is left behind once every lease is released (in-process
 *   maps, backend keys);
 * - `sharedBackend`: whether two instances exclude each other (file and Redis; not memory).
 */
import type { Test } from 'tap'
import { SessionLockError, SessionLockTimeoutError } from '../../lib/locks/errors.js'
import type { SessionLease, SessionLock } from '../../lib/locks/session-lock.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { settlesWithin, sleep } from '../helpers/time.js'

export interface LockContractOptions<L extends SessionLock> {
  create: (t: Test, options: { timeout?: number }) => L | Promise<L>
  idle: (t: Test, lock: L) => void | Promise<void>
  sharedBackend: boolean
}

export function runSessionLockContract<L extends SessionLock> (t: Test, name: string, options: LockContractOptions<L>): void {
  const { create, idle } = options

  t.test(`${name}: lock contract`, async t => {
    t.test('acquire and release', async t => {
      const lock = await create(t, {})
      t.equal(lock.timeout, 30_000, 'default timeout: 30 s')
      const id = generateSessionId()
      const lease = await lock.acquire(id)
      t.equal(lease.id, id)
      t.type(lease.signal, AbortSignal)
      t.equal(lease.signal.aborted, false)
      await lease.release()
      await idle(t, lock)
    })

    t.test('a busy lock times out with SessionLockTimeoutError, then is granted once released', async t => {
      const lock = await create(t, {})
      const id = generateSessionId()
      const first = await lock.acquire(id)
      const started = performance.now()
      const err = await lock.acquire(id, { timeout: 50 }).then(() => null, (e: unknown) => e)
      const elapsed = performance.now() - started
      t.type(err, SessionLockTimeoutError)
      t.type(err, SessionLockError, 'a timeout is a SessionLockError too')
      t.match((err as Error).message, 'Timed out after 0.050s')
      t.notOk((err as Error).message.includes(id), 'the message shows the id cut, never whole')
      t.match((err as Error).message, id.slice(0, 8))
      t.equal((err as SessionLockTimeoutError).sessionId, id)
      // A lower bound only: timers never fire early, while a busy machine may make any wait longer.
      t.ok(elapsed >= 45, `waited the timeout (${Math.round(elapsed)} ms)`)
      await first.release()
      const second = await lock.acquire(id, { timeout: 50 })
      await second.release()
      await idle(t, lock)
    })

    t.test("the lock's timeout is the default", async t => {
      const lock = await create(t, { timeout: 60 })
      t.equal(lock.timeout, 60)
      const id = generateSessionId()
      const first = await lock.acquire(id)
      const started = performance.now()
      await t.rejects(lock.acquire(id), SessionLockTimeoutError)
      t.ok(performance.now() - started >= 55)
      await first.release()
      await idle(t, lock)
    })

    t.test('timeout 0 tries once', async t => {
      const lock = await create(t, {})
      const id = generateSessionId()
      const free = await lock.acquire(id, { timeout: 0 })
      const started = performance.now()
      await t.rejects(lock.acquire(id, { timeout: 0 }), SessionLockTimeoutError)
      // Against the lock's own wait in the same run, not a figure a busy machine can miss.
      t.ok(performance.now() - started < lock.timeout / 2, 'at once, not after the lock\'s timeout')
      await free.release()
      await idle(t, lock)
    })

    t.test('tryAcquire never waits', async t => {
      const lock = await create(t, {})
      const id = generateSessionId()
      const lease = await lock.tryAcquire(id)
      t.ok(lease, 'free: taken')
      const started = performance.now()
      t.equal(await lock.tryAcquire(id), null, 'busy: null')
      t.ok(performance.now() - started < lock.timeout / 2, 'at once, not after the lock\'s timeout')
      await lease?.release()
      const again = await lock.tryAcquire(id)
      t.ok(again, 'free again')
      await again?.release()
      await idle(t, lock)
    })

    t.test('releasing twice is an error: "not held"', async t => {
      const lock = await create(t, {})
      const lease = await lock.acquire(generateSessionId())
      await lease.release()
      const err = await lease.release().then(() => null, (e: unknown) => e)
      t.type(err, SessionLockError)
      t.notOk(err instanceof SessionLockTimeoutError)
      t.match((err as Error).message, /not held/)
      t.equal((err as SessionLockError).code, 'MCP_SESSION_LOCK_NOT_HELD')
      await idle(t, lock)
    })

    t.test('acquiring a lock its owner already holds is an error ("already held"), not a deadlock', async t => {
      const lock = await create(t, {})
      const id = generateSessionId()
      const owner = {}
      const lease = await lock.acquire(id, { owner })
      const started = performance.now()
      const err = await lock.acquire(id, { owner, timeout: 5000 }).then(() => null, (e: unknown) => e)
      t.ok(performance.now() - started < 5000 / 2, 'at once, not after the 5 s timeout')
      t.type(err, SessionLockError)
      t.match((err as Error).message, /already held/)
      t.equal((err as SessionLockError).code, 'MCP_SESSION_LOCK_ALREADY_HELD')
      await t.rejects(lock.tryAcquire(id, { owner }), { message: /already held/ })
      await t.rejects(lock.acquire(id, { owner: {}, timeout: 30 }), SessionLockTimeoutError, 'another owner waits')
      await lease.release()
      const again = await lock.acquire(id, { owner, timeout: 0 })
      t.pass('the owner may take it again once released')
      await again.release()
      await idle(t, lock)
    })

    t.test('different sessions do not block each other', async t => {
      const lock = await create(t, {})
      const a = await lock.acquire(generateSessionId())
      const b = await lock.acquire(generateSessionId(), { timeout: 0 })
      const c = await lock.tryAcquire(generateSessionId())
      t.ok(c)
      await Promise.all([a.release(), b.release(), c?.release()])
      await idle(t, lock)
    })

    t.test('re-acquire after release works', async t => {
      const lock = await create(t, {})
      const id = generateSessionId()
      for (let i = 0; i < 5; i++) {
        const lease = await lock.acquire(id, { timeout: 0 })
        await lease.release()
      }
      t.pass()
      await idle(t, lock)
    })

    t.test('waiters of one process are served first come, first served', async t => {
      const lock = await create(t, {})
      const id = generateSessionId()
      const holder = await lock.acquire(id)
      const order: number[] = []
      const waiters = Array.from({ length: 6 }, async (_, i) => {
        const lease = await lock.acquire(id, { timeout: 10_000 })
        order.push(i)
        await sleep(2)
        await lease.release()
      })
      await sleep(20)
      await holder.release()
      await Promise.all(waiters)
      t.same(order, [0, 1, 2, 3, 4, 5])
      await idle(t, lock)
    })

    t.test("an aborted wait rejects with the signal's reason and leaves the queue", async t => {
      const lock = await create(t, {})
      const id = generateSessionId()
      const holder = await lock.acquire(id)
      const controller = new AbortController()
      const reason = new Error('client went away')
      const waiting = lock.acquire(id, { signal: controller.signal, timeout: 10_000 })
      await sleep(10)
      controller.abort(reason)
      const started = performance.now()
      await t.rejects(waiting, reason)
      t.ok(performance.now() - started < 10_000 / 2, 'at once, not after the 10 s timeout')
      await holder.release()
      const next = await lock.acquire(id, { timeout: 0 })
      t.pass('the aborted waiter did not take the lock')
      await next.release()
      const aborted = AbortSignal.abort(new Error('already'))
      await t.rejects(lock.acquire(id, { signal: aborted }), { message: 'already' }, 'an aborted signal rejects at once')
      await idle(t, lock)
    })

    t.test('no lost updates under a burst; nothing left behind after it', async t => {
      // With a shared backend the burst goes through two instances, each with its own in-process
      // queue: only the backend can keep them apart (one instance's queue alone would serialize
      // the burst even for a lock that excludes nothing).
      const lock = await create(t, {})
      const locks = options.sharedBackend ? [lock, await create(t, {})] : [lock]
      const ids = [generateSessionId(), generateSessionId()]
      const counters = new Map<string, number>(ids.map(id => [id, 0]))
      await Promise.all(Array.from({ length: 40 }, async (_, i) => {
        const id = ids[i % 2] as string
        const lease = await (locks[Math.floor(i / 2) % locks.length] as L).acquire(id, { timeout: 10_000 })
        try {
          const seen = counters.get(id) as number
          await sleep(1)
          counters.set(id, seen + 1)
        } finally {
          await lease.release()
        }
      }))
      t.same([...counters.values()], [20, 20])
      for (const l of locks) await idle(t, l)
    })

    t.test('a negative timeout is refused', async t => {
      await t.rejects(async () => await create(t, { timeout: -1 }), new RangeError('timeout must be greater than or equal to 0.'))
      const lock = await create(t, {})
      await t.rejects(lock.acquire(generateSessionId(), { timeout: -5 }), RangeError)
      await idle(t, lock)
    })

    t.test('close() releases held leases, rejects waiters and later acquires; twice is fine', async t => {
      const lock = await create(t, {})
      const id = generateSessionId()
      const held = await lock.acquire(id)
      const waiting = lock.acquire(id, { timeout: 10_000 })
      const outcome = t.rejects(waiting, { name: 'SessionLockError', code: 'MCP_SESSION_LOCK_CLOSED' })
      await sleep(10)
      await lock.close?.()
      await outcome
      t.equal(held.signal.aborted, true, "the held lease's signal aborts")
      await t.resolves(held.release(), "the holder's own release, in its finally, does not throw")
      await t.rejects(lock.acquire(generateSessionId()), { code: 'MCP_SESSION_LOCK_CLOSED' })
      await t.rejects(lock.tryAcquire(generateSessionId()), { code: 'MCP_SESSION_LOCK_CLOSED' })
      await lock.close?.()
      await idle(t, lock)
    })

    if (options.sharedBackend) {
      t.test('a second instance (another worker) waits for the first, then gets the lock', async t => {
        const one = await create(t, {})
        const two = await create(t, {})
        const id = generateSessionId()
        const lease = await one.acquire(id)
        // The id is a secret: the message shows its first characters; the error still knows it (not enumerable: never logged).
        const timedOut = await two.acquire(id, { timeout: 50 }).then(() => null, (err: SessionLockTimeoutError) => err)
        t.equal(timedOut?.message, `Timed out after 0.050s waiting for the lock of session ${id.slice(0, 8)}…`)
        t.equal(timedOut?.sessionId, id)
        t.notOk(JSON.stringify({ ...timedOut }).includes(id), 'no enumerable field carries the whole id')
        t.equal(await two.tryAcquire(id), null)
        const waiting = two.acquire(id, { timeout: 5000 })
        t.equal(await settlesWithin(waiting, 100), false, 'still waiting while held')
        await lease.release()
        // Granted, not timed out: a waiter that missed the release would reject after its 5 s.
        const taken = await waiting
        await t.rejects(one.acquire(id, { timeout: 0 }), SessionLockTimeoutError, 'now the first one waits')
        await taken.release()
        await idle(t, one)
        await idle(t, two)
      })

      t.test('instances do not share owners: the same owner on another instance just waits', async t => {
        const one = await create(t, {})
        const two = await create(t, {})
        const id = generateSessionId()
        const owner = {}
        const lease: SessionLease = await one.acquire(id, { owner })
        await t.rejects(two.acquire(id, { owner, timeout: 30 }), SessionLockTimeoutError)
        await lease.release()
        await idle(t, one)
        await idle(t, two)
      })
    }
  })
}
