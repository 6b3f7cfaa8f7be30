/**
 * The pairing contract (`lib/state/pairings/pairing.ts`), run against every pairing: memory (with
 * the memory lock and without a lock), any store with any lock, Redis, and the locking store
 * (PostgreSQL), and, through the kit's `pairingContract` (`index.ts`), against the pairing the
 * plugin makes of an app's own store and lock. `runPairingContract(t, name, options)`:
 * - `create(t)` builds a pairing on fresh backends (closed in `t`'s teardown);
 * - `locked`: whether it has a lock (a pairing without one is asked only what needs no lease);
 * - `passesOn`: whether an unchanged record's lease goes to a waiter of this process (Redis, PostgreSQL).
 * What is proven here is what the state scope relies on, whatever the pairing: an unknown key is
 * never held, a key is held by one at a time, a write ends the lease whatever it finds, a record
 * handed on is the taker's own copy.
 */
import { SessionLockTimeoutError } from '../../locks/errors.js'
import type { SessionLease } from '../../locks/session-lock.js'
import { generateSessionId } from '../../sessions/session-id.js'
import type { Pairing, Taken } from '../../state/pairings/pairing.js'
import { settlesWithin, sleep } from './runner.js'
import type { CaseAssertions, SuiteDeclarations } from './tap-like.js'

/** A case's `t` (tap-style assertions on `node:assert`, see `tap-like.ts`); at the top, `t.test` declares a case. */
export type Test = SuiteDeclarations & CaseAssertions

export interface PairingContractOptions {
  create: (t: Test) => Pairing | Promise<Pairing>
  /** Whether the pairing has a lock (without one, only reads, writes and holds are asked of it). */
  locked: boolean
  passesOn: boolean
  /** Whether it writes several records at once, all or none (memory, Redis on one node, PostgreSQL). */
  together: boolean
}

function leaseOf (taken: Taken | null): SessionLease {
  if (taken === null || taken.lease === null) throw new Error('nothing taken')
  return taken.lease
}

export function runPairingContract (t: Test, name: string, options: PairingContractOptions): void {
  const { create } = options

  t.test(`${name}: pairing contract`, async t => {
    t.test('an unknown key reads null', async t => {
      const pairing = await create(t)
      t.equal(await pairing.read(generateSessionId()), null)
    })

    t.test('a write without a lease (a scope opened without the lock) saves', async t => {
      const pairing = await create(t)
      const id = generateSessionId()
      await pairing.store.create(id, { n: 1 })
      const record = await pairing.read(id)
      t.same(await pairing.write(id, { set: { n: 5 }, delete: [] }, { version: record?.version }, null), { status: 'ok' })
      t.same((await pairing.read(id))?.data, { n: 5 })
    })

    t.test('takeNow: where it answers, it answers as take and read would', async t => {
      const pairing = await create(t)
      const id = generateSessionId()
      await pairing.store.create(id, { n: 1 })
      const unlocked = pairing.takeNow(id, { lock: false })
      if (unlocked !== undefined) t.same(unlocked, { lease: null, record: { data: { n: 1 }, version: 0 } })
      const now = pairing.takeNow(id, { lock: true, owner: {} })
      if (now === undefined) return
      t.same(now?.record, { data: { n: 1 }, version: 0 })
      if (!options.locked) { t.equal(now?.lease, null, 'no lock: no lease'); return }
      const lease = leaseOf(now)
      t.notOk(await settlesWithin(pairing.take(id, { timeout: 200 }).then(async taken => await pairing.letGo(id, leaseOf(taken))), 50), 'held: another take waits')
      t.ok(pairing.letsGoNow, 'a pairing that takes without a promise lets go without one')
      t.same(pairing.letGoNow(id, lease), { status: 'unchanged' })
      await sleep(20)
      const again = await pairing.take(id, { timeout: 0 })
      t.ok(again?.lease, 'free again')
      await pairing.letGo(id, leaseOf(again))
    })

    if (options.locked) {
      t.test('an unknown key: take and read resolve null, holding nothing', async t => {
        const pairing = await create(t)
        const id = generateSessionId()
        t.equal(await pairing.take(id, {}), null)
        t.equal(await pairing.read(id), null)
        t.equal(pairing.takeNow(id, { lock: true }) ?? null, null, 'takeNow: null or undefined, never a record')
        await pairing.store.create(id, { n: 0 })
        const taken = await pairing.take(id, { timeout: 0 })
        t.ok(taken?.lease, 'the key was not left held')
        await pairing.letGo(id, leaseOf(taken))
      })

      t.test('take reads the record under a lease; a second take waits until the first lets go', async t => {
        const pairing = await create(t)
        const id = generateSessionId()
        await pairing.store.create(id, { n: 1 })
        const first = await pairing.take(id, { owner: {} })
        t.same(first?.record, { data: { n: 1 }, version: 0 })
        t.notOk(pairing.expired(leaseOf(first)), 'held, not expired')
        t.equal(pairing.takeNow(id, { lock: true, owner: {} }), undefined, 'a held key is not taken without a wait')
        const second = pairing.take(id, { owner: {} })
        t.notOk(await settlesWithin(second, 50), 'waits')
        t.same(await pairing.letGo(id, leaseOf(first)), { status: 'unchanged' })
        const taken = await second
        t.same(taken?.record, { data: { n: 1 }, version: 0 })
        await pairing.letGo(id, leaseOf(taken))
      })

      t.test('a taker that gives up while queued leaves the queue: its signal, or the timeout', async t => {
        const pairing = await create(t)
        const id = generateSessionId()
        await pairing.store.create(id, {})
        const held = await pairing.take(id, {})
        const gone = new AbortController()
        const aborted = pairing.take(id, { signal: gone.signal })
        await sleep(20)
        gone.abort(new Error('client left'))
        await t.rejects(aborted, { message: 'client left' })
        await t.rejects(pairing.take(id, { timeout: 30 }), SessionLockTimeoutError)
        await pairing.letGo(id, leaseOf(held))
        const next = await pairing.take(id, { timeout: 1000 })
        t.ok(next?.lease, 'free for the next one')
        await pairing.letGo(id, leaseOf(next))
      })

      t.test('write saves the changes and ends the lease', async t => {
        const pairing = await create(t)
        const id = generateSessionId()
        await pairing.store.create(id, { n: 1, gone: true })
        const taken = await pairing.take(id, {})
        const lease = leaseOf(taken)
        const waiting = pairing.take(id, { timeout: 2000 })
        const result = await pairing.write(id, { set: { n: 2 }, delete: ['gone'] }, { version: taken?.record.version, fence: lease.fence }, lease)
        t.same(result, { status: 'ok' })
        const next = await waiting
        t.same(next?.record, { data: { n: 2 }, version: 1 }, 'the next holder reads the write')
        await pairing.letGo(id, leaseOf(next))
        await t.rejects(lease.release(), { code: 'MCP_SESSION_LOCK_NOT_HELD' }, 'the written lease has ended')
      })

      t.test('a record destroyed under the lease: write answers gone, re-creates nothing, and ends the lease', async t => {
        const pairing = await create(t)
        const id = generateSessionId()
        await pairing.store.create(id, { n: 1 })
        const taken = await pairing.take(id, {})
        t.equal(await pairing.store.destroy(id), true)
        const lease = leaseOf(taken)
        t.same(await pairing.write(id, { set: { n: 2 }, delete: [] }, { version: taken?.record.version, fence: lease.fence }, lease), { status: 'gone' })
        t.equal(await pairing.read(id), null, 'not re-created')
        await pairing.store.create(id, { n: 9 })
        const again = await pairing.take(id, { timeout: 0 })
        t.ok(again?.lease, 'the lease ended with the write')
        await pairing.letGo(id, leaseOf(again))
      })

      t.test(`an unchanged record's lease ${options.passesOn ? 'goes to a waiter of this process, as its own copy' : 'is released, never handed on'}`, async t => {
        const pairing = await create(t)
        const id = generateSessionId()
        await pairing.store.create(id, { cart: { items: ['a'] } })
        const first = await pairing.take(id, {})
        const lease = leaseOf(first)
        t.equal(pairing.passOn(id, lease), false, 'nobody waits: not handed on')
        ;((first?.record.data.cart as { items: string[] }).items).push('mutated, never saved')
        const next = pairing.take(id, { timeout: 2000 })
        await sleep(20)
        t.same(await pairing.letGo(id, lease), { status: 'unchanged' })
        const second = await next
        t.same(second?.record, { data: { cart: { items: ['a'] } }, version: 0 }, 'its own copy, without what the first mutated')
        if (options.passesOn) t.same(second?.lease?.fence, lease.fence, 'the same lease, handed on')
        await t.rejects(lease.release(), { code: 'MCP_SESSION_LOCK_NOT_HELD' }, 'the first holder has let go')
        await pairing.letGo(id, leaseOf(second))
        const last = await pairing.take(id, { timeout: 0 })
        t.ok(last?.lease, 'free once the last holder let go')
        await pairing.letGo(id, leaseOf(last))
      })

      t.test(`several records: ${options.together ? 'written together, all or none, every lease ended' : 'no write of several at once (the unit writes them one by one)'}`, async t => {
        const pairing = await create(t)
        if (!options.together) { t.equal(pairing.writeTogether, undefined); return }
        const write = pairing.writeTogether?.bind(pairing)
        if (write === undefined) { t.fail('writeTogether missing'); return }
        const [a, b] = [generateSessionId(), generateSessionId()]
        await pairing.store.create(a, { n: 0 })
        await pairing.store.create(b, { items: [] })
        const take = async (id: string): Promise<Taken> => await pairing.take(id, { timeout: 2000 }) as Taken
        const items = (ta: Taken, tb: Taken): Parameters<typeof write>[0] => [
          { id: a, changes: { set: { n: 1 }, delete: [] }, guard: { version: ta.record.version, fence: ta.lease?.fence }, lease: ta.lease },
          { id: b, changes: { set: { items: ['x'] }, delete: [] }, guard: { version: tb.record.version, fence: tb.lease?.fence }, lease: tb.lease }
        ]
        let [ta, tb] = [await take(a), await take(b)]
        t.same((await write(items(ta, tb))).map(r => r.status), ['ok', 'ok'], 'both written')
        t.same([(await pairing.read(a))?.data, (await pairing.read(b))?.data], [{ n: 1 }, { items: ['x'] }])
        ;[ta, tb] = [await take(a), await take(b)]
        t.ok(ta.lease !== null && tb.lease !== null, 'both leases ended: taken again at once')
        await pairing.store.destroy(b)
        t.same((await write(items(ta, tb))).map(r => r.status), ['skipped', 'gone'], 'one gone: nothing written')
        t.same((await pairing.read(a))?.data, { n: 1 }, 'the other record as it was')
        t.equal(await pairing.read(b), null, 'the gone one not re-created')
        const again = await take(a)
        t.ok(again.lease, 'every lease ended, the failed write\'s too')
        await pairing.letGo(a, leaseOf(again))
      })

      t.test('release ends a lease and resolves the error of a second one', async t => {
        const pairing = await create(t)
        const id = generateSessionId()
        await pairing.store.create(id, {})
        const lease = leaseOf(await pairing.take(id, {}))
        let lost = false
        pairing.whenLost(lease, () => { lost = true })
        t.equal(await pairing.release(lease), undefined)
        t.match(await pairing.release(lease), { code: 'MCP_SESSION_LOCK_NOT_HELD' })
        t.equal(await pairing.release(null), undefined, 'no lease: nothing to do')
        t.notOk(lost, 'a lease released by its holder was not lost')
      })
    }

    t.test('holds: a free key is held at once, a held one is refused, end() frees it', async t => {
      const pairing = await create(t)
      const holds = pairing.holds()
      if (!holds.locking) { t.pass('no lock: holds without a lease'); return }
      const id = generateSessionId()
      await pairing.store.create(id, { n: 0 })
      const hold = await holds.tryHold(id)
      t.ok(hold)
      t.equal(await holds.tryHold(id), null, 'held by the first')
      t.equal(await hold?.save({ set: { n: 1 }, delete: [] }, 0), 'ok', 'a save under the hold')
      await hold?.end()
      const again = await holds.tryHold(id)
      t.ok(again, 'free after end()')
      await again?.end()
    })
  })
}
