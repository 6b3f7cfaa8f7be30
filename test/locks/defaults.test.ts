/**
 * The documented defaults (README, docs/sessions-and-lock.md, docs/options.md), each read from what
 * the code does rather than from a constant: a Redis or PostgreSQL lease lives 30 s and is renewed
 * 10 s after its last confirmation; a lock waits 30 s; `sessions.cancelGraceMs` is 5 s;
 * `sessions.unusedTtlMs` is 2 minutes, capped at the store's TTL (a store whose TTL is shorter
 * expires a never-used session by its own).
 */
import t from 'tap'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import mcp, { FileSessionLock, MemorySessionLock, MemorySessionStore, PgSessionLock, RedisSessionLock, RedisSessionStore } from '../../lib/index.js'
import type { BackendLease } from '../../lib/locks/backend-lease.js'
import { resolveOptions } from '../../lib/options.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { sleep } from '../helpers/time.js'
import { headers, initializeBody, LEGACY } from '../helpers/wire.js'

t.test('a Redis lease: 30 s, renewed 10 s after it was confirmed; the Redis and PostgreSQL locks\' ttl', async t => {
  const server = await startRedisServer(t)
  const lock = new RedisSessionLock({ redis: server.url })
  t.teardown(() => lock.close())
  await lock.ready()
  t.equal(lock.ttl, 30_000, 'RedisSessionLock ttl')
  const lease = await lock.acquire('a-session-id-of-enough-length') as BackendLease<unknown>
  const due = lease.renewal.renewAt - lease.renewal.confirmedAt
  t.ok(Math.abs(due - 10_000) < 0.01, `the renewal is due 10 s after the confirmation (${due} ms)`)
  const admin = new Redis(server.url)
  t.teardown(() => { admin.disconnect() })
  const pttl = await admin.pttl('mcp:{a-session-id-of-enough-length}:lock')
  t.ok(pttl > 29_000 && pttl <= 30_000, `the key lives 30 s in Redis (${pttl} ms left)`)
  await lease.release()
  // unusedTtl capped at the store's TTL where the store sets the expiry at create (Redis).
  const store = new RedisSessionStore({ redis: admin, ttl: 1000, prefix: 'cap:' })
  await store.create('a-never-used-session-id', { a: 1 }, { unusedTtl: 120_000 })
  const left = await admin.pttl('cap:{a-never-used-session-id}:s')
  t.ok(left > 0 && left <= 1000, `a Redis record created with unusedTtl 2 min expires by the store's 1 s (${left} ms left)`)
  const pool = { query: async () => ({ rows: [], rowCount: 0 }), connect: async () => { throw new Error('not used') }, end: async () => {}, on: () => {} }
  const pg = new PgSessionLock({ pool: pool as never })
  t.equal(pg.ttl, 30_000, 'PgSessionLock ttl')
})

t.test('a lock waits 30 s by default', async t => {
  const dir = t.testdir()
  for (const lock of [new MemorySessionLock(), new FileSessionLock({ dir }), new RedisSessionLock({ redis: new Redis({ lazyConnect: true }) as never })]) {
    t.equal(lock.timeout, 30_000, lock.constructor.name)
    await lock.close?.()
  }
})

t.test('sessions.cancelGraceMs is 5 s, sessions.unusedTtlMs 2 minutes', async t => {
  const resolved = resolveOptions({}, '1.0.0')
  t.equal(resolved.cancelGraceMs, 5000)
  t.equal(resolved.unusedTtlMs, 120_000)
})

t.test('unusedTtlMs is capped at the store\'s TTL: a never-used session of a store with a shorter TTL expires by it', async t => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { sessions: { store: new MemorySessionStore({ ttl: 300 }) } })
  const init = await app.inject({ method: 'POST', url: '/mcp', headers: headers(), payload: initializeBody({ version: LEGACY }) })
  const session = { sid: init.headers['mcp-session-id'] as string, version: LEGACY }
  await sleep(500)
  const later = await app.inject({ method: 'POST', url: '/mcp', headers: headers(session), payload: { jsonrpc: '2.0', id: 1, method: 'ping' } })
  t.equal(later.statusCode, 404, 'gone after the store\'s 300 ms, not the 2 minutes of unusedTtlMs')
})
