import assert from 'node:assert/strict'
import t, { type Test } from 'tap'
import { PgSessionLock } from '../../lib/locks/pg-lock.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { lockContract } from '../../lib/testing/contracts/index.js'
import { sleep } from '../helpers/time.js'

const db = await createTestDatabase(t)

async function newLock (t: Pick<Test, 'teardown'>, options: { timeout?: number, ttl?: number, prefix?: string } = {}): Promise<PgSessionLock> {
  const lock = new PgSessionLock({ pool: db.pool({ max: 4 }), prefix: 'lk_', ...options })
  t.teardown(() => lock.close())
  await lock.ready()
  return lock
}

async function leaseRows (prefix = 'lk_'): Promise<Array<{ id: string, token: string }>> {
  return (await db.admin.query(`SELECT id, token FROM ${prefix}leases`)).rows
}

lockContract({
  test: t.test.bind(t),
  name: 'PgSessionLock',
  make: async ({ timeout, ttl }, t) => await newLock(t, { timeout, ttl }),
  leaseTtl: 200,
  idle: async (lock) => {
    assert.equal(lock.size, 0, 'no session held or waited for in this process')
    assert.equal(lock.pending, 0, 'no waiter left')
    assert.equal(lock.held, 0, 'no lease tracked')
    assert.deepEqual(await leaseRows(), [], 'no lease row left')
  },
  sharedBackend: true
})

t.test('the lease is a row: the id, a fresh 128-bit token, an expiry by the database clock', async t => {
  const lock = await newLock(t, { ttl: 5000, prefix: 'row_' })
  const id = generateSessionId()
  const a = await lock.acquire(id)
  const { rows } = await db.admin.query('SELECT id, token, extract(epoch from expires_at - clock_timestamp()) * 1000 AS left_ms FROM row_leases')
  t.equal(rows.length, 1)
  t.equal(rows[0].id, id)
  t.match(rows[0].token, /^[0-9a-f]{32}$/)
  t.equal(a.fence?.token, rows[0].token, 'the fence is the token')
  t.ok(rows[0].left_ms > 4000 && rows[0].left_ms <= 5000, `expires in the ttl (${Math.round(rows[0].left_ms)} ms)`)
  await a.release()
  const b = await lock.acquire(id)
  t.not(b.fence?.token, a.fence?.token, 'a new token per acquisition')
  await b.release()
})

t.test('renewal keeps a lease alive past its ttl while it is held', async t => {
  const lock = await newLock(t, { ttl: 900, prefix: 'ren_' })
  const other = await newLock(t, { prefix: 'ren_' })
  const id = generateSessionId()
  const lease = await lock.acquire(id)
  await sleep(3000)
  t.equal(lease.signal.aborted, false)
  t.equal(await other.tryAcquire(id), null, 'still busy for another instance after 3+ ttls')
  await lease.release()
  t.same(await leaseRows('ren_'), [], 'released')
})

t.test('a lost lease aborts the signal; renewal never revives it; release never frees the next holder', async t => {
  const lock = await newLock(t, { ttl: 300, prefix: 'lost_' })
  const id = generateSessionId()
  const lease = await lock.acquire(id)
  await db.admin.query('DELETE FROM lost_leases') // ran out, or was taken over, while the holder worked
  const aborted = new Promise(resolve => lease.signal.addEventListener('abort', resolve, { once: true }))
  await Promise.race([aborted, sleep(1000)])
  t.equal(lease.signal.aborted, true, 'aborted at the next renewal')
  t.match(lease.signal.reason, { name: 'SessionLockError', code: 'MCP_SESSION_LEASE_LOST' })
  t.notOk((lease.signal.reason as Error).message.includes(id), 'the reason shows the id cut (ids are secrets)')
  t.same(await leaseRows('lost_'), [], 'not revived')
  await db.admin.query("INSERT INTO lost_leases VALUES ($1, 'next-holder', clock_timestamp() + interval '5 s')", [id])
  await lease.release()
  t.same(await leaseRows('lost_'), [{ id, token: 'next-holder' }], "the next holder's lease survives")
})

t.test('an expired lease row is taken over; the old holder cannot renew it', async t => {
  const lock = await newLock(t, { ttl: 200, prefix: 'exp_' })
  const id = generateSessionId()
  await db.admin.query("INSERT INTO exp_leases VALUES ($1, 'dead-holder', clock_timestamp() - interval '1 ms')", [id])
  const lease = await lock.acquire(id, { timeout: 0 })
  t.not(lease.fence?.token, 'dead-holder')
  await lease.release()
})

t.test('the database down: acquire fails at once with a SessionLockError, not after the timeout', async t => {
  const lock = new PgSessionLock({ pool: 'postgres://postgres@127.0.0.1:1/none', prefix: 'down_' })
  t.teardown(() => lock.close())
  const started = performance.now()
  await t.rejects(lock.acquire(generateSessionId(), { timeout: 30_000 }), { name: 'SessionLockError', code: 'MCP_SESSION_LOCK_ERROR' })
  t.ok(performance.now() - started < 5000, 'at once')
  t.equal(lock.size, 0, 'the local slot is freed')
  await t.rejects(lock.ready(), { name: 'SessionLockError' })
})

t.test('bad options are refused', async t => {
  t.throws(() => new PgSessionLock({ pool: db.admin, prefix: 'Bad-Prefix' }), TypeError)
  t.throws(() => new PgSessionLock({ pool: db.admin, prefix: 'x; drop table y' }), TypeError)
  t.throws(() => new PgSessionLock({ pool: {} as never }), TypeError)
  t.throws(() => new PgSessionLock({ pool: db.admin, ttl: 2 }), RangeError)
})
