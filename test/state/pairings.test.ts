/**
 * The pairing contract (the kit's `pairingContract`, `lib/testing/contracts/`) against every
 * pairing `pairingFor()` chooses, each on real backends: the memory store with the memory lock and without a lock, the file store with
 * the file lock and a memory store of the app's own (both the plain sequence of contract calls),
 * the Redis store with the Redis lock on a private redis-server, and the PostgreSQL store with its
 * lock in a database of this file's own. The kit builds the pairing the plugin would from the store
 * and lock `make` gives; `chosen()` checks it is the one meant.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { FileSessionLock } from '../../lib/locks/file-lock.js'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import { PgSessionLock } from '../../lib/locks/pg-lock.js'
import { RedisSessionLock } from '../../lib/locks/redis-lock.js'
import { FileSessionStore } from '../../lib/sessions/file-store.js'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import { PgSessionStore } from '../../lib/sessions/pg-store.js'
import { RedisSessionStore } from '../../lib/sessions/redis-store.js'
import type { SessionLock } from '../../lib/locks/session-lock.js'
import type { SessionRecord, SessionStore } from '../../lib/sessions/session-store.js'
import { AnyPairing } from '../../lib/state/pairings/any-pairing.js'
import { pairingFor } from '../../lib/state/pairings/choose-pairing.js'
import { PgPairing } from '../../lib/state/pairings/pg-pairing.js'
import { MemoryPairing } from '../../lib/state/pairings/memory-pairing.js'
import type { Pairing } from '../../lib/state/pairings/pairing.js'
import { RedisPairing } from '../../lib/state/pairings/redis-pairing.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { pairingContract } from '../../lib/testing/contracts/index.js'

/** A memory store of the app's own: it reads through its own load, so it gets the plain sequence. */
class CountingStore extends MemorySessionStore {
  loads = 0
  override async load (id: string): Promise<SessionRecord | null> {
    this.loads++
    return await super.load(id)
  }
}

/** The store and lock, once `pairingFor` is checked to pair them as `kind`. */
function chosen<S extends SessionStore, L extends SessionLock> (store: S, lock: L | null, kind: new (...args: never[]) => Pairing): { store: S, lock: L | null } {
  const pairing = pairingFor(store, lock)
  if (!(pairing instanceof kind)) throw new Error(`pairingFor chose ${(pairing as object).constructor.name}, not ${kind.name}`)
  return { store, lock }
}

pairingContract({
  test: t.test.bind(t),
  name: 'memory store + memory lock',
  locked: true,
  passesOn: false,
  together: true,
  make: (t) => {
    const store = new MemorySessionStore()
    const lock = new MemorySessionLock()
    t.teardown(async () => { await lock.close(); await store.close() })
    return chosen(store, lock, MemoryPairing)
  }
})

pairingContract({
  test: t.test.bind(t),
  name: 'memory store without a lock',
  locked: false,
  passesOn: false,
  together: true,
  make: (t) => {
    const store = new MemorySessionStore()
    t.teardown(async () => { await store.close() })
    return chosen(store, null, MemoryPairing)
  }
})

pairingContract({
  test: t.test.bind(t),
  name: 'file store + file lock',
  locked: true,
  passesOn: false,
  together: false,
  make: async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'mcp-pairing-'))
    const store = new FileSessionStore({ dir })
    const lock = new FileSessionLock({ dir: store.lockDir })
    t.teardown(async () => { await lock.close(); await rm(dir, { recursive: true, force: true }) })
    return chosen(store, lock, AnyPairing)
  }
})

pairingContract({
  test: t.test.bind(t),
  name: 'a store of the app\'s own + memory lock',
  locked: true,
  passesOn: false,
  together: false,
  make: (t) => {
    const store = new CountingStore()
    const lock = new MemorySessionLock()
    t.teardown(async () => { await lock.close(); await store.close() })
    if (pairingFor(store, lock) instanceof MemoryPairing) throw new Error('a store with its own load must be asked through it')
    return chosen(store, lock, AnyPairing)
  }
})

const redis = await startRedisServer(t)
pairingContract({
  test: t.test.bind(t),
  name: 'Redis store + Redis lock',
  locked: true,
  passesOn: true,
  together: true,
  make: async (t) => {
    const prefix = `pair:${randomBytes(4).toString('hex')}:`
    const client = new Redis(redis.url)
    const store = new RedisSessionStore({ redis: client, prefix })
    const lock = new RedisSessionLock({ redis: client, prefix })
    t.teardown(async () => { await lock.close(); client.disconnect() })
    await lock.ready()
    return chosen(store, lock, RedisPairing)
  }
})

const db = await createTestDatabase(t)
let n = 0
pairingContract({
  test: t.test.bind(t),
  name: 'PostgreSQL store + PostgreSQL lock',
  locked: true,
  passesOn: true,
  together: true,
  make: async (t) => {
    const prefix = `p${n++}_`
    const pool = db.pool({ max: 4 })
    const store = new PgSessionStore({ pool, prefix })
    const lock = new PgSessionLock({ pool, prefix })
    t.teardown(async () => { await lock.close() })
    await lock.ready()
    return chosen(store, lock, PgPairing)
  }
})

t.test('a memory store of the app\'s own is read through its own load, on every open', async t => {
  const store = new CountingStore()
  const pairing = pairingFor(store, new MemorySessionLock())
  await store.create('s', {})
  t.equal(pairing.takeNow('s', { lock: true }), undefined, 'no read around its load')
  await pairing.letGo('s', (await pairing.take('s', {}))?.lease as never)
  t.equal(store.loads, 1)
})
