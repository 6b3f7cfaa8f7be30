/**
 * The worked example of docs/your-own-engine.md (examples/sqlite-engine/) through the exported kit:
 * the store, lock, fenced save, pairing and fast-path contracts. Each case has its own database file; the
 * instances one case makes open it each with a connection of their own, as processes would.
 */
import t from 'tap'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openSqlite, type SqliteDb } from '../../examples/sqlite-engine/sqlite-db.js'
import { SqliteSessionLock } from '../../examples/sqlite-engine/sqlite-lock.js'
import { SqliteSessionStore } from '../../examples/sqlite-engine/sqlite-store.js'
import { fencedStoreContract, lockContract, lockingStoreContract, pairingContract, storeContract, type CaseScope } from '../../lib/testing/contracts/index.js'

const test = t.test.bind(t)
const files = new WeakMap<CaseScope, string>()

/** A connection to the case's database file (made on the first call of the case), closed when it ends. */
function connect (scope: CaseScope): SqliteDb {
  let file = files.get(scope)
  if (file === undefined) {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-sqlite-'))
    scope.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
    files.set(scope, file = join(dir, 'state.db'))
  }
  const db = openSqlite(file)
  scope.teardown(() => { db.close() })
  return db
}

storeContract({ test, name: 'SqliteSessionStore', make: ({ ttl }, scope) => new SqliteSessionStore({ db: connect(scope), ttl }) })

lockContract({
  test,
  name: 'SqliteSessionLock',
  make: ({ timeout, ttl }, scope) => new SqliteSessionLock({ db: connect(scope), timeout, ttl }),
  idle: (lock) => {
    assert.equal(lock.size, 0, 'nothing held or waited for in this process')
    assert.deepEqual(lock.db.prepare('SELECT id FROM leases').all(), [], 'no lease row left')
  },
  sharedBackend: true,
  leaseTtl: 200
})

fencedStoreContract({
  test,
  name: 'SqliteSessionStore + SqliteSessionLock fenced save',
  leaseTtl: 200,
  make: ({ leaseTtl }, scope) => {
    const db = connect(scope)
    return { store: new SqliteSessionStore({ db }), lock: new SqliteSessionLock({ db, ttl: leaseTtl }) }
  }
})

pairingContract({
  test,
  name: 'SqliteSessionStore + SqliteSessionLock',
  make: (scope) => {
    const db = connect(scope)
    return { store: new SqliteSessionStore({ db }), lock: new SqliteSessionLock({ db }) }
  }
})

lockingStoreContract({
  test,
  name: 'SqliteSessionStore fast path',
  leaseTtl: 200,
  make: ({ leaseTtl }, scope) => {
    const db = connect(scope)
    return { store: new SqliteSessionStore({ db }), lock: new SqliteSessionLock({ db, ttl: leaseTtl }) }
  }
})
