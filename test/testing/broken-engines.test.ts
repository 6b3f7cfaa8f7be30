/**
 * The kit fails loudly on the classic mistakes: each deliberately broken store or lock
 * (fixtures/broken-engines.ts) run through the exported suites fails exactly the named cases of
 * the rule it breaks, and passes the rest. The cases run here one after another through a runner
 * of this file's own (`test(name, fn)` collecting them), so the test can say which failed; the
 * unbroken originals pass every case in their own files (test/sessions/memory-store.test.ts,
 * test/locks/memory-lock.test.ts, test/engine/sqlite-engine.test.ts).
 */
import t, { type Test } from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openSqlite } from '../../examples/sqlite-engine/sqlite-db.js'
import { SqliteSessionLock } from '../../examples/sqlite-engine/sqlite-lock.js'
import { fencedStoreContract, lockContract, lockingStoreContract, storeContract, type CaseScope, type TestFunction } from '../../lib/testing/contracts/index.js'
import { LastComeFirstServedLock, RecreatingStore, SharedObjectsStore, SilentLeaseLock, UnfencedStore, WholeRecordStore } from './fixtures/broken-engines.js'

/** Runs every case `register` declares, in order: the names of those that failed, with their message. */
async function failures (register: (test: TestFunction) => void): Promise<{ ran: number, failed: Record<string, string> }> {
  const cases: Array<{ name: string, fn: () => Promise<void> }> = []
  register((name, fn) => { cases.push({ name, fn }) })
  const failed: Record<string, string> = {}
  for (const c of cases) {
    try { await c.fn() } catch (err) { failed[c.name] = (err as Error).message }
  }
  return { ran: cases.length, failed }
}

/** A connection to the case's database file (one file per case), closed when it ends. */
const files = new WeakMap<CaseScope, string>()
function connect (scope: CaseScope): ReturnType<typeof openSqlite> {
  let file = files.get(scope)
  if (file === undefined) {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-broken-'))
    scope.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
    files.set(scope, file = join(dir, 'state.db'))
  }
  const db = openSqlite(file)
  scope.teardown(() => { db.close() })
  return db
}

async function check (t: Test, register: (test: TestFunction) => void, expected: string[]): Promise<void> {
  const { ran, failed } = await failures(register)
  t.comment(JSON.stringify(failed, null, 2))
  t.same(Object.keys(failed), expected, `fails exactly ${expected.length} named case(s) of ${ran}`)
}

t.test('a store that re-creates destroyed records', async t => {
  await check(t, test => { storeContract({ test, make: ({ ttl }) => new RecreatingStore({ ttl }) }) }, [
    'store: save of an unknown session is gone and creates nothing',
    'store: save after destroy is gone and never brings the session back',
    'store: an expired session is gone for every operation, and its id can be reused',
    'store: a record with a TTL of its own lives and expires by it, refreshed by use'
  ])
})

t.test('a store that writes all keys instead of the changed ones', async t => {
  await check(t, test => { storeContract({ test, make: ({ ttl }) => new WholeRecordStore({ ttl }) }) }, [
    'store: two requests that change different keys both keep their change'
  ])
})

t.test('a store that returns shared objects instead of copies', async t => {
  await check(t, test => { storeContract({ test, make: ({ ttl }) => new SharedObjectsStore({ ttl }) }) }, [
    'store: every load, however many, gives fresh objects equal to what was stored'
  ])
})

t.test('a store that ignores the fence', async t => {
  const make = ({ leaseTtl }: { leaseTtl?: number }, scope: CaseScope): { store: UnfencedStore, lock: SqliteSessionLock } => {
    const db = connect(scope)
    return { store: new UnfencedStore({ db }), lock: new SqliteSessionLock({ db, ttl: leaseTtl }) }
  }
  await check(t, test => {
    lockingStoreContract({ test, leaseTtl: 200, make })
    fencedStoreContract({ test, leaseTtl: 200, make })
  }, [
    "fast path: a stale holder's save is refused (fenced): the next holder's work survives",
    // Not the save under a live lease, nor the one nobody else could have touched: those go through.
    'fenced save: a paused holder whose lease expired cannot overwrite what the next holder saved',
    'fenced save: lease expired while someone else holds it (not yet written): fenced',
    'fenced save: lease expired, nobody took it: without the version read the save is fenced',
    'fenced save: lease expired, nobody holds it, but an unlocked writer wrote: fenced'
  ])
})

t.test('a lock that is not FIFO', async t => {
  await check(t, test => { lockContract({ test, sharedBackend: false, make: ({ timeout }) => new LastComeFirstServedLock({ timeout }) }) }, [
    'lock: waiters of one process are served first come, first served'
  ])
})

t.test('a lock that never signals a lost lease', async t => {
  await check(t, test => {
    lockContract({ test, sharedBackend: true, leaseTtl: 200, make: ({ timeout, ttl }, scope) => new SilentLeaseLock({ db: connect(scope), timeout, ttl }) })
  }, [
    'lock: close() releases held leases, rejects waiters and later acquires; twice is fine',
    'lock: a lease that expired while its holder stalled is lost: its signal aborts'
  ])
})
