/**
 * The limit backend contract, run against every backend (memory, Redis, Redis Cluster). A
 * backend's test file calls `runLimitBackendContract(t, name, options)`:
 * - `create(t)` builds a backend (closed in teardown) whose state no other test sees;
 * - `idle(t, backend)` waits until nothing is left behind once every lease is released and every
 *   bucket is full again (in-process entries, Redis keys): the flood bound.
 *
 * Time: no assertion depends on how fast the machine is. Counts are bounded by the tokens that
 * can have accrued over the measured elapsed time, and waits use the wait a refusal announced
 * (plus a margin) or `until`.
 */
import { randomBytes } from 'node:crypto'
import type { Test } from 'tap'
import type { LimitBackend, LimitDecision, LimitSpec } from '../../lib/limits/backend.js'
import { sleep, until } from '../helpers/time.js'

export interface LimitContractOptions<B extends LimitBackend> {
  create: (t: Test) => B | Promise<B>
  idle: (t: Test, backend: B) => Promise<void>
}

let seq = 0
const newKey = (): string => `tool_${randomBytes(3).toString('hex')}|p:user${++seq}`
const newCall = (): string => `call-${randomBytes(4).toString('hex')}`

/** A spec: `calls` per `perMs` with `burst`, `concurrency` in flight (0 = none). */
function spec (o: { calls?: number, perMs?: number, burst?: number, concurrency?: number, leaseMs?: number }): LimitSpec {
  const rated = o.calls !== undefined && o.perMs !== undefined
  return {
    intervalUs: rated ? Math.round((o.perMs as number) * 1000 / (o.calls as number)) : 0,
    burst: rated ? o.burst ?? o.calls as number : 0,
    concurrency: o.concurrency ?? 0,
    leaseMs: o.leaseMs ?? 30_000
  }
}

/** Acquires until refused (at most `max` tries); the allowed count, the refusal and the time taken. */
async function drain (b: LimitBackend, key: string, s: LimitSpec, max = 100): Promise<{ allowed: number, refusal: LimitDecision | null, ms: number }> {
  const started = performance.now()
  let allowed = 0
  for (let i = 0; i < max; i++) {
    const d = await b.acquire(key, s, newCall())
    if (!d.ok) return { allowed, refusal: d, ms: performance.now() - started }
    allowed++
  }
  return { allowed, refusal: null, ms: performance.now() - started }
}

export function runLimitBackendContract<B extends LimitBackend> (t: Test, name: string, options: LimitContractOptions<B>): void {
  const { create, idle } = options

  t.test(`${name}: limit backend contract`, async t => {
    t.test('a full bucket allows `burst` calls, then refuses with the wait for the next token', async t => {
      const b = await create(t)
      const key = newKey()
      const s = spec({ calls: 2, perMs: 60_000, burst: 5 }) // one token per 30 s: none accrues here
      const { allowed, refusal } = await drain(b, key, s)
      t.equal(allowed, 5, 'exactly the burst')
      t.match(refusal, { ok: false, limit: 'rate' })
      const wait = (refusal as { retryAfterMs: number }).retryAfterMs
      t.ok(wait > 0 && wait <= 30_000, `waits at most one interval (${wait} ms)`)
      t.equal(typeof wait, 'number')
      t.ok(Number.isInteger(wait), 'whole ms')
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'rate' }, 'a refusal took nothing: still empty')
    })

    t.test('burst defaults to calls, and distinct keys have distinct buckets', async t => {
      const b = await create(t)
      const s = spec({ calls: 3, perMs: 60_000 })
      const [one, two] = [newKey(), newKey()]
      t.equal((await drain(b, one, s)).allowed, 3)
      t.equal((await drain(b, two, s)).allowed, 3, 'another caller has its own bucket')
    })

    t.test('the bucket refills one token per interval, up to the burst', async t => {
      const b = await create(t)
      const key = newKey()
      const interval = 100
      const s = spec({ calls: 10, perMs: 10 * interval, burst: 3 })
      const first = await drain(b, key, s)
      // While draining, tokens may accrue: at most one per interval that passed.
      t.ok(first.allowed >= 3 && first.allowed <= 3 + Math.ceil(first.ms / interval), `a full bucket: ${first.allowed} in ${Math.round(first.ms)} ms`)
      const emptyAt = performance.now()
      const wait = (first.refusal as { retryAfterMs: number }).retryAfterMs
      t.ok(wait > 0 && wait <= interval, `the next token within one interval (${wait} ms)`)
      // The announced wait is enough.
      await sleep(wait + 20)
      t.match(await b.acquire(key, s, newCall()), { ok: true }, 'a token after the announced wait')
      // 2.5 intervals later, at least 2 tokens are back (and never more than the burst, plus
      // what accrues while draining).
      await sleep(2.5 * interval + 20)
      const elapsed = performance.now() - emptyAt
      const second = await drain(b, key, s)
      t.ok(second.allowed >= 2, `refilled: ${second.allowed} after ${Math.round(elapsed)} ms`)
      t.ok(second.allowed <= 3 + Math.ceil(second.ms / interval), `capped by the burst: ${second.allowed}`)
      // Long idle: full again, never more than the burst.
      await sleep(6 * interval)
      const third = await drain(b, key, s)
      t.ok(third.allowed >= 3 && third.allowed <= 3 + Math.ceil(third.ms / interval), `full after idling: ${third.allowed}`)
    })

    t.test('parallel checks of one key are atomic: exactly the burst is allowed', async t => {
      const b = await create(t)
      const key = newKey()
      const s = spec({ calls: 10, perMs: 600_000 })
      const decisions = await Promise.all(Array.from({ length: 40 }, async () => await b.acquire(key, s, newCall())))
      t.equal(decisions.filter(d => d.ok).length, 10)
      t.equal(decisions.filter(d => !d.ok && d.limit === 'rate').length, 30)
    })

    t.test('the concurrency cap: refused while full, free again once a call is released', async t => {
      const b = await create(t)
      const key = newKey()
      const s = spec({ concurrency: 2, leaseMs: 10_000 })
      const [a1, a2] = [newCall(), newCall()]
      t.match(await b.acquire(key, s, a1), { ok: true })
      t.match(await b.acquire(key, s, a2), { ok: true })
      const refused = await b.acquire(key, s, newCall())
      t.match(refused, { ok: false, limit: 'concurrency' })
      const wait = (refused as { retryAfterMs: number }).retryAfterMs
      t.ok(wait > 0 && wait <= 10_000, `until the first lease would expire (${wait} ms)`)
      await b.release(key, a1)
      await b.release(key, a1) // twice: nothing
      await b.release(key, 'never-taken')
      const a3 = newCall()
      t.match(await b.acquire(key, s, a3), { ok: true }, 'the released slot is free')
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'concurrency' })
      await b.release(key, a2)
      await b.release(key, a3)
      const all = await Promise.all(Array.from({ length: 20 }, async () => await b.acquire(key, s, newCall())))
      t.equal(all.filter(d => d.ok).length, 2, 'parallel checks: exactly the cap')
    })

    t.test('a refusal takes nothing: no lease on a rate refusal, no token on a concurrency refusal', async t => {
      const b = await create(t)
      const key = newKey()
      const both = spec({ calls: 2, perMs: 600_000, concurrency: 1, leaseMs: 10_000 })
      const first = newCall()
      t.match(await b.acquire(key, both, first), { ok: true }, '1 token left')
      t.match(await b.acquire(key, both, newCall()), { ok: false, limit: 'concurrency' })
      t.match(await b.acquire(key, both, newCall()), { ok: false, limit: 'concurrency' })
      await b.release(key, first)
      const second = newCall()
      t.match(await b.acquire(key, both, second), { ok: true }, 'the concurrency refusals took no token')
      await b.release(key, second)
      t.match(await b.acquire(key, both, newCall()), { ok: false, limit: 'rate' }, 'now the bucket is empty')
      t.match(await b.acquire(key, spec({ concurrency: 1 }), newCall()), { ok: true }, 'the rate refusal took no lease')
    })

    t.test('both limits exceeded: the rate refusal is reported (its wait is known)', async t => {
      const b = await create(t)
      const key = newKey()
      const s = spec({ calls: 1, perMs: 600_000, concurrency: 1 })
      t.match(await b.acquire(key, s, newCall()), { ok: true })
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'rate' })
    })

    t.test("a holder that neither releases nor renews loses its slot after the lease's lifetime", async t => {
      const b = await create(t)
      const key = newKey()
      const leaseMs = 600
      const s = spec({ concurrency: 1, leaseMs })
      const before = performance.now()
      const crashed = newCall()
      t.match(await b.acquire(key, s, crashed), { ok: true })
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'concurrency' }, 'held')
      let freedAt = 0
      const next = newCall()
      await until(async () => {
        const d = await b.acquire(key, s, next)
        freedAt = performance.now()
        return d.ok
      }, { timeout: leaseMs + 5000, every: 20, what: 'the slot of the crashed holder' })
      // Measured from before the acquire: the slot cannot come back earlier than the lifetime
      // (2 ms for the clocks' granularity).
      t.ok(freedAt - before >= leaseMs - 2, `freed after ${Math.round(freedAt - before)} ms, not before ${leaseMs}`)
      t.equal(await b.renew(key, crashed, leaseMs), false, 'the expired lease cannot be renewed')
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'concurrency' }, 'nor was it revived: one slot, held by the next call')
      await b.release(key, next)
    })

    /** Renews `callId` every quarter of `leaseMs` until the returned stop() (a live holder). */
    function keepAlive (b: LimitBackend, key: string, callId: string, leaseMs: number): () => void {
      const timer = setInterval(() => { b.renew(key, callId, leaseMs).catch(() => {}) }, leaseMs / 4)
      return () => { clearInterval(timer) }
    }

    t.test("a crashed holder's slot comes back even while other calls of its key stay live", async t => {
      // The busy tool: the lease set itself never expires, the crashed lease must.
      const b = await create(t)
      const key = newKey()
      // Renewed every quarter: a live lease survives event-loop stalls of up to 3/4 of it.
      const leaseMs = 600
      const s = spec({ concurrency: 2, leaseMs })
      const [crashed, live] = [newCall(), newCall()]
      t.match(await b.acquire(key, s, crashed), { ok: true })
      t.match(await b.acquire(key, s, live), { ok: true })
      const stop = keepAlive(b, key, live, leaseMs)
      t.teardown(stop)
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'concurrency' })
      const next = newCall()
      await until(async () => (await b.acquire(key, s, next)).ok, { timeout: leaseMs + 5000, every: 20, what: 'the crashed slot' })
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'concurrency' }, 'the live holder kept its slot')
      stop()
      await b.release(key, live)
      await b.release(key, next)
    })

    t.test('a lease that ran out is not revived by a late renewal', async t => {
      const b = await create(t)
      const key = newKey()
      const leaseMs = 600
      const s = spec({ concurrency: 2, leaseMs })
      const [late, live] = [newCall(), newCall()]
      t.match(await b.acquire(key, s, late), { ok: true })
      t.match(await b.acquire(key, s, live), { ok: true })
      const stop = keepAlive(b, key, live, leaseMs) // keeps the key itself alive
      t.teardown(stop)
      await sleep(leaseMs + 200) // `late` ran out (nothing checked the key meanwhile)
      t.equal(await b.renew(key, late, leaseMs), false, 'too late: gone')
      t.match(await b.acquire(key, s, newCall()), { ok: true }, 'its slot is free')
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'concurrency' }, 'and only its slot')
      stop()
    })

    t.test('renewal keeps a lease past its lifetime; a released lease cannot be renewed', async t => {
      const b = await create(t)
      const key = newKey()
      const leaseMs = 600 // renewed every quarter: survives stalls of up to 3/4 of it
      const s = spec({ concurrency: 1, leaseMs })
      const holder = newCall()
      t.match(await b.acquire(key, s, holder), { ok: true })
      const started = performance.now()
      while (performance.now() - started < 3 * leaseMs) {
        await sleep(leaseMs / 4)
        t.equal(await b.renew(key, holder, leaseMs), true)
      }
      t.match(await b.acquire(key, s, newCall()), { ok: false, limit: 'concurrency' }, 'still held after 3 lifetimes')
      await b.release(key, holder)
      t.equal(await b.renew(key, holder, leaseMs), false, 'released: gone')
      t.match(await b.acquire(key, s, newCall()), { ok: true }, 'not re-created by the renewal')
    })

    t.test('a spec without a cap takes no lease; one without a rate keeps no bucket', async t => {
      const b = await create(t)
      const key = newKey()
      t.match(await b.acquire(key, spec({ concurrency: 1 }), newCall()), { ok: true })
      for (let i = 0; i < 3; i++) t.match(await b.acquire(key, spec({ concurrency: 1 }), newCall()), { ok: false, limit: 'concurrency' }, 'no bucket to empty: only the cap refuses')
      const other = newKey()
      for (let i = 0; i < 5; i++) t.match(await b.acquire(other, spec({ calls: 5, perMs: 600_000 }), newCall()), { ok: true }, 'no lease taken: no cap to hit')
    })

    t.test('nothing is left once leases are released and buckets are full again (a flood is bounded)', async t => {
      const b = await create(t)
      const s = spec({ calls: 1, perMs: 200, concurrency: 2, leaseMs: 400 })
      const calls: Array<[string, string]> = []
      for (let i = 0; i < 500; i++) calls.push([`flood|a:10.0.${i >> 8}.${i & 255}`, newCall()])
      const decisions = await Promise.all(calls.map(async ([key, id]) => await b.acquire(key, s, id)))
      t.equal(decisions.filter(d => d.ok).length, 500, '500 distinct callers, each allowed')
      // Half released, half left to expire (a crashed instance).
      await Promise.all(calls.slice(0, 250).map(async ([key, id]) => { await b.release(key, id) }))
      await idle(t, b)
    })
  })
}
