/**
 * The session lock contract (`SessionLock`, `lib/locks/session-lock.ts`): what the plugin relies on
 * of any lock, bundled or an app's own. The rules that keep updates from being lost
 * (docs/your-own-engine.md): one holder of a key at a time, across every instance sharing the
 * backend; waiters of one process served in arrival order (else a request can starve behind later
 * ones until it times out: a client told 503 for work it sent first); a waiter that gives up (its
 * signal, its timeout) leaves the queue; a lease that expired while its holder stalled is lost, and
 * its `signal` says so (else the stalled holder goes on as if it held the key, and writes over the
 * next holder's work unless the store's fence stops it).
 *
 *   import { test } from 'node:test'
 *   import { lockContract } from 'fastify-mcp-http/testing/contracts'
 *   lockContract({ test, sharedBackend: true, make: ({ timeout }, scope) => new MyLock({ timeout }) })
 */
import assert from 'node:assert/strict'
import { SessionLockError, SessionLockTimeoutError } from '../../locks/errors.js'
import type { SessionLease, SessionLock } from '../../locks/session-lock.js'
import { generateSessionId } from '../../sessions/session-id.js'
import { abortedWithin, freeze, registerCases, rejection, settlesWithin, sleep, type CaseScope, type ContractCase, type TestFunction } from './runner.js'

/** What {@link LockContractOptions.make} is asked for. */
export interface MakeLockOptions {
  /** The lock's default acquire timeout in ms (`undefined`: its own default, which must be 30 s). */
  timeout?: number
  /** The lease TTL in ms, for a lock whose leases expire unless renewed (see {@link LockContractOptions.leaseTtl}). */
  ttl?: number
}

/** Options of {@link lockContract}. */
export interface LockContractOptions<L extends SessionLock = SessionLock> {
  /** The runner's `test(name, fn)` (`node:test`'s `test`, tap's `t.test.bind(t)`). */
  test: TestFunction
  /**
   * Builds a lock. The locks one case builds (the same `scope`) share their backend, like the
   * instances of one deployment; each case starts on a backend where nothing is held.
   */
  make: (options: MakeLockOptions, scope: CaseScope) => L | Promise<L>
  /** Cleans up one lock `make` built, when its case ends (default: `lock.close?.()`). */
  cleanup?: (lock: L) => unknown
  /**
   * Throws (an `assert`) when something is left behind once every lease is released: in-process
   * maps, backend keys or rows. Optional.
   */
  idle?: (lock: L, scope: CaseScope) => void | Promise<void>
  /** Whether two instances exclude each other (a lock on a shared backend: yes; an in-process lock: no). */
  sharedBackend: boolean
  /**
   * For a lock on a shared backend whose leases expire unless renewed: a lease TTL in ms short
   * enough for a case (200 is fine). The lost-lease case then stalls a holder past it and checks
   * that its lease's `signal` aborts once another instance took the key.
   */
  leaseTtl?: number
  /** The prefix of the case names (default `lock`): `<name>: <rule>`. */
  name?: string
}

interface LockCase {
  make: (options: MakeLockOptions) => Promise<SessionLock>
  idle: (lock: SessionLock) => Promise<void>
  sharedBackend: boolean
  leaseTtl: number
}

type Needs = 'any' | 'shared' | 'expiring'
const cases: Array<ContractCase<LockCase> & { needs: Needs }> = []
const it = (name: string, run: ContractCase<LockCase>['run']): void => { cases.push({ name, run, needs: 'any' }) }
const shared = (name: string, run: ContractCase<LockCase>['run']): void => { cases.push({ name, run, needs: 'shared' }) }
const expiring = (name: string, run: ContractCase<LockCase>['run']): void => { cases.push({ name, run, needs: 'expiring' }) }
const assertNot = (value: unknown, message?: string): void => { assert.ok(!(value as boolean), message) }

it('acquire and release', async ({ make, idle }) => {
  const lock = await make({})
  assert.equal(lock.timeout, 30_000, 'default timeout: 30 s')
  const id = generateSessionId()
  const lease = await lock.acquire(id)
  assert.equal(lease.id, id)
  assert.ok(lease.signal instanceof AbortSignal)
  assert.equal(lease.signal.aborted, false)
  await lease.release()
  await idle(lock)
})

it('a busy lock times out with SessionLockTimeoutError, then is granted once released', async ({ make, idle }) => {
  const lock = await make({})
  const id = generateSessionId()
  const first = await lock.acquire(id)
  const started = performance.now()
  const err = await rejection(lock.acquire(id, { timeout: 50 }))
  const elapsed = performance.now() - started
  assert.ok(err instanceof SessionLockTimeoutError)
  assert.ok(err instanceof SessionLockError, 'a timeout is a SessionLockError too')
  assert.ok((err as Error).message.includes('Timed out after 0.050s'), (err as Error).message)
  assertNot((err as Error).message.includes(id), 'the message shows the id cut, never whole')
  assert.ok((err as Error).message.includes(id.slice(0, 8)))
  assert.equal((err as SessionLockTimeoutError).sessionId, id)
  // A lower bound only: timers never fire early, while a busy machine may make any wait longer.
  assert.ok(elapsed >= 45, `waited the timeout (${Math.round(elapsed)} ms)`)
  await first.release()
  const second = await lock.acquire(id, { timeout: 50 })
  await second.release()
  await idle(lock)
})

it("the lock's timeout is the default", async ({ make, idle }) => {
  const lock = await make({ timeout: 60 })
  assert.equal(lock.timeout, 60)
  const id = generateSessionId()
  const first = await lock.acquire(id)
  const started = performance.now()
  await assert.rejects(lock.acquire(id), SessionLockTimeoutError)
  assert.ok(performance.now() - started >= 55)
  await first.release()
  await idle(lock)
})

it('timeout 0 tries once', async ({ make, idle }) => {
  const lock = await make({})
  const id = generateSessionId()
  const free = await lock.acquire(id, { timeout: 0 })
  const started = performance.now()
  await assert.rejects(lock.acquire(id, { timeout: 0 }), SessionLockTimeoutError)
  // Against the lock's own wait in the same run, not a figure a busy machine can miss.
  assert.ok(performance.now() - started < lock.timeout / 2, 'at once, not after the lock\'s timeout')
  await free.release()
  await idle(lock)
})

it('tryAcquire never waits', async ({ make, idle }) => {
  const lock = await make({})
  const id = generateSessionId()
  const lease = await lock.tryAcquire(id)
  assert.ok(lease, 'free: taken')
  const started = performance.now()
  assert.equal(await lock.tryAcquire(id), null, 'busy: null')
  assert.ok(performance.now() - started < lock.timeout / 2, 'at once, not after the lock\'s timeout')
  await lease?.release()
  const again = await lock.tryAcquire(id)
  assert.ok(again, 'free again')
  await again?.release()
  await idle(lock)
})

it('releasing twice is an error: "not held"', async ({ make, idle }) => {
  const lock = await make({})
  const lease = await lock.acquire(generateSessionId())
  await lease.release()
  const err = await rejection(lease.release())
  assert.ok(err instanceof SessionLockError)
  assertNot(err instanceof SessionLockTimeoutError)
  assert.match((err as Error).message, /not held/)
  assert.equal((err as SessionLockError).code, 'MCP_SESSION_LOCK_NOT_HELD')
  await idle(lock)
})

it('acquiring a lock its owner already holds is an error ("already held"), not a deadlock', async ({ make, idle }) => {
  const lock = await make({})
  const id = generateSessionId()
  const owner = {}
  const lease = await lock.acquire(id, { owner })
  const started = performance.now()
  const err = await rejection(lock.acquire(id, { owner, timeout: 5000 }))
  assert.ok(performance.now() - started < 5000 / 2, 'at once, not after the 5 s timeout')
  assert.ok(err instanceof SessionLockError)
  assert.match((err as Error).message, /already held/)
  assert.equal((err as SessionLockError).code, 'MCP_SESSION_LOCK_ALREADY_HELD')
  await assert.rejects(lock.tryAcquire(id, { owner }), { message: /already held/ })
  await assert.rejects(lock.acquire(id, { owner: {}, timeout: 30 }), SessionLockTimeoutError, 'another owner waits')
  await lease.release()
  const again = await lock.acquire(id, { owner, timeout: 0 })
  await again.release()
  await idle(lock)
})

it('different sessions do not block each other', async ({ make, idle }) => {
  const lock = await make({})
  const a = await lock.acquire(generateSessionId())
  const b = await lock.acquire(generateSessionId(), { timeout: 0 })
  const c = await lock.tryAcquire(generateSessionId())
  assert.ok(c)
  await Promise.all([a.release(), b.release(), c?.release()])
  await idle(lock)
})

it('re-acquire after release works', async ({ make, idle }) => {
  const lock = await make({})
  const id = generateSessionId()
  for (let i = 0; i < 5; i++) {
    const lease = await lock.acquire(id, { timeout: 0 })
    await lease.release()
  }
  await idle(lock)
})

it('waiters of one process are served first come, first served', async ({ make, idle }) => {
  const lock = await make({})
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
  assert.deepEqual(order, [0, 1, 2, 3, 4, 5])
  await idle(lock)
})

it("an aborted wait rejects with the signal's reason and leaves the queue", async ({ make, idle }) => {
  const lock = await make({})
  const id = generateSessionId()
  const holder = await lock.acquire(id)
  const controller = new AbortController()
  const reason = new Error('client went away')
  const waiting = lock.acquire(id, { signal: controller.signal, timeout: 10_000 })
  await sleep(10)
  controller.abort(reason)
  const started = performance.now()
  await assert.rejects(waiting, reason)
  assert.ok(performance.now() - started < 10_000 / 2, 'at once, not after the 10 s timeout')
  await holder.release()
  const next = await lock.acquire(id, { timeout: 0 })
  await next.release()
  const aborted = AbortSignal.abort(new Error('already'))
  await assert.rejects(lock.acquire(id, { signal: aborted }), { message: 'already' }, 'an aborted signal rejects at once')
  await idle(lock)
})

it('no lost updates under a burst; nothing left behind after it', async ({ make, idle, sharedBackend }) => {
  // With a shared backend the burst goes through two instances, each with its own in-process
  // queue: only the backend can keep them apart (one instance's queue alone would serialize
  // the burst even for a lock that excludes nothing).
  const lock = await make({})
  const locks = sharedBackend ? [lock, await make({})] : [lock]
  const ids = [generateSessionId(), generateSessionId()]
  const counters = new Map<string, number>(ids.map(id => [id, 0]))
  await Promise.all(Array.from({ length: 40 }, async (_, i) => {
    const id = ids[i % 2] as string
    const lease = await (locks[Math.floor(i / 2) % locks.length] as SessionLock).acquire(id, { timeout: 10_000 })
    try {
      const seen = counters.get(id) as number
      await sleep(1)
      counters.set(id, seen + 1)
    } finally {
      await lease.release()
    }
  }))
  assert.deepEqual([...counters.values()], [20, 20])
  for (const l of locks) await idle(l)
})

it('a negative timeout is refused', async ({ make, idle }) => {
  await assert.rejects(async () => await make({ timeout: -1 }), new RangeError('timeout must be greater than or equal to 0.'))
  const lock = await make({})
  await assert.rejects(lock.acquire(generateSessionId(), { timeout: -5 }), RangeError)
  await idle(lock)
})

it('close() releases held leases, rejects waiters and later acquires; twice is fine', async ({ make, idle }) => {
  const lock = await make({})
  const id = generateSessionId()
  const held = await lock.acquire(id)
  const waiting = lock.acquire(id, { timeout: 10_000 })
  const outcome = assert.rejects(waiting, { name: 'SessionLockError', code: 'MCP_SESSION_LOCK_CLOSED' })
  await sleep(10)
  await lock.close?.()
  await outcome
  assert.equal(held.signal.aborted, true, "the held lease's signal aborts")
  await assert.doesNotReject(held.release(), "the holder's own release, in its finally, does not throw")
  await assert.rejects(lock.acquire(generateSessionId()), { code: 'MCP_SESSION_LOCK_CLOSED' })
  await assert.rejects(lock.tryAcquire(generateSessionId()), { code: 'MCP_SESSION_LOCK_CLOSED' })
  await lock.close?.()
  await idle(lock)
})

// With a shared backend only: instances (workers) exclude each other.
shared('a second instance (another worker) waits for the first, then gets the lock', async ({ make, idle }) => {
  const one = await make({})
  const two = await make({})
  const id = generateSessionId()
  const lease = await one.acquire(id)
  // The id is a secret: the message shows its first characters; the error still knows it (not enumerable: never logged).
  const timedOut = await rejection(two.acquire(id, { timeout: 50 })) as SessionLockTimeoutError | null
  assert.equal(timedOut?.message, `Timed out after 0.050s waiting for the lock of session ${id.slice(0, 8)}…`)
  assert.equal(timedOut?.sessionId, id)
  assertNot(JSON.stringify({ ...timedOut }).includes(id), 'no enumerable field carries the whole id')
  assert.equal(await two.tryAcquire(id), null)
  const waiting = two.acquire(id, { timeout: 5000 })
  assert.equal(await settlesWithin(waiting, 100), false, 'still waiting while held')
  await lease.release()
  // Granted, not timed out: a waiter that missed the release would reject after its 5 s.
  const taken = await waiting
  await assert.rejects(one.acquire(id, { timeout: 0 }), SessionLockTimeoutError, 'now the first one waits')
  await taken.release()
  await idle(one)
  await idle(two)
})

shared('instances do not share owners: the same owner on another instance just waits', async ({ make, idle }) => {
  const one = await make({})
  const two = await make({})
  const id = generateSessionId()
  const owner = {}
  const lease: SessionLease = await one.acquire(id, { owner })
  await assert.rejects(two.acquire(id, { owner, timeout: 30 }), SessionLockTimeoutError)
  await lease.release()
  await idle(one)
  await idle(two)
})

// With leases that expire unless renewed: a stalled holder's lease is lost, and it is told.
expiring('a lease that expired while its holder stalled is lost: its signal aborts', async ({ make, idle, leaseTtl }) => {
  const one = await make({ ttl: leaseTtl })
  const two = await make({ ttl: leaseTtl })
  const id = generateSessionId()
  const stale = await one.acquire(id)
  freeze(leaseTtl * 3) // a GC pause or a stalled process: no renewal runs, the lease expires in the backend
  const next = await two.acquire(id, { timeout: 10_000 })
  await abortedWithin(stale.signal, 10_000 + leaseTtl * 10,
    "the stale lease's signal never aborted: its holder goes on as if it held the key while another instance does")
  assert.equal(next.signal.aborted, false, 'the new holder keeps its lease')
  await next.release()
  await stale.release().catch(() => {}) // lost: "not held", or nothing to do
  await idle(one)
  await idle(two)
})

/** The names of the lock contract's cases, in order (the shared-backend and lost-lease ones included). */
export const lockContractCases: readonly string[] = cases.map(c => c.name)

/** Registers the lock contract's cases with the runner, each against fresh locks from `make`. */
export function lockContract<L extends SessionLock> (options: LockContractOptions<L>): void {
  const cleanup = options.cleanup ?? (async (lock: L) => { await lock.close?.() })
  const applies = cases.filter(c => c.needs === 'any' || (options.sharedBackend && (c.needs === 'shared' ||
    (c.needs === 'expiring' && options.leaseTtl !== undefined))))
  registerCases(options.test, options.name ?? 'lock', applies, scope => ({
    make: async (o) => {
      const lock = await options.make(o, scope)
      scope.teardown(async () => { await cleanup(lock) })
      return lock
    },
    idle: async (lock) => { await options.idle?.(lock as L, scope) },
    sharedBackend: options.sharedBackend,
    leaseTtl: options.leaseTtl ?? 0
  }))
}
