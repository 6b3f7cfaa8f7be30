/**
 * An unknown session id never reaches the lock: POST (a request, a notification, a client's
 * answer), GET and DELETE with a well-formed id nobody minted answer 404 and create no lock key,
 * no lock file, and no in-process lock entry, with every lock (a recording wrapper proves the lock
 * was never asked; the file lock's directory and Redis' MONITOR prove nothing was created).
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import {
  FileSessionLock, FileSessionStore, LOCK_CLIENT_OPTIONS, MemorySessionLock, MemorySessionStore, RedisSessionLock, RedisSessionStore,
  type AcquireOptions, type SessionLease, type SessionLock, type SessionStore
} from '../../lib/index.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { failFastRedis } from '../helpers/fail-fast-redis.js'
import { post, readReply } from '../helpers/http-client.js'
import { getHeaders, headers, newId } from '../helpers/wire.js'
import { startApp } from './fixtures/app.js'

const server = await startRedisServer(t)
const admin = await failFastRedis(t, server.url, LOCK_CLIENT_OPTIONS)

/** Delegates to a lock and records every id it was asked for. */
class RecordingLock implements SessionLock {
  readonly asked: string[] = []
  constructor (readonly inner: SessionLock) {}
  get timeout (): number { return this.inner.timeout }
  async acquire (id: string, options?: AcquireOptions): Promise<SessionLease> {
    this.asked.push(id)
    return await this.inner.acquire(id, options)
  }

  async tryAcquire (id: string, options?: Pick<AcquireOptions, 'owner'>): Promise<SessionLease | null> {
    this.asked.push(id)
    return await this.inner.tryAcquire(id, options)
  }

  async close (): Promise<void> { await this.inner.close?.() }
}

/** Every way a request can name a session, with an id nobody minted; each must answer 404. */
async function knock (t: Test, url: string, sid: string): Promise<void> {
  const session = { sid, version: '2025-11-25' }
  const calls: Array<[string, () => Promise<number>]> = [
    ['a request', async () => (await post(url, { jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'counter_add', arguments: {} } }, session)).status],
    ['a notification', async () => (await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, session)).status],
    ['a client\'s answer', async () => (await post(url, { jsonrpc: '2.0', id: 'srv-00000000-1', result: {} }, session)).status],
    ['GET', async () => (await readReply(await fetch(url, { headers: getHeaders(session) }))).status],
    ['DELETE', async () => (await readReply(await fetch(url, { method: 'DELETE', headers: headers(session) }))).status]
  ]
  for (const [what, call] of calls) t.equal(await call(), 404, `${what}: 404`)
}

const kinds: Array<[string, (t: Test) => Promise<{ store: SessionStore, lock: SessionLock, check: (t: Test, sid: string) => Promise<void>, close: () => Promise<void> }>]> = [
  ['memory lock', async () => {
    const lock = new RecordingLock(new MemorySessionLock())
    return {
      store: new MemorySessionStore(),
      lock,
      check: async (t, sid) => {
        t.notOk(lock.asked.includes(sid), 'the lock was never asked')
        t.equal((lock.inner as MemorySessionLock).size, 0, 'no in-process entry')
      },
      close: async () => { await lock.close() }
    }
  }],
  ['file lock', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'mcp-unknown-ids-'))
    t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
    const lock = new RecordingLock(new FileSessionLock({ dir }))
    return {
      store: new FileSessionStore({ dir }),
      lock,
      check: async (t, sid) => {
        t.notOk(lock.asked.includes(sid), 'the lock was never asked')
        t.notOk((await readdir(dir)).some(name => name.startsWith(sid)), 'no lock file (nor session file)')
      },
      close: async () => { await lock.close() }
    }
  }],
  ['Redis lock with the memory store', async () => {
    const lock = new RecordingLock(new RedisSessionLock({ redis: server.url }))
    await (lock.inner as RedisSessionLock).ready()
    return {
      store: new MemorySessionStore(),
      lock,
      check: async (t, sid) => {
        t.notOk(lock.asked.includes(sid), 'the lock was never asked')
        t.equal(await admin.exists(`mcp:{${sid}}:lock`), 0, 'no lock key')
      },
      close: async () => { await lock.close() }
    }
  }]
]

for (const [name, make] of kinds) {
  t.test(`${name}: unknown session ids never reach the lock`, async t => {
    const { store, lock, check, close } = await make(t)
    const s = await startApp(t, { store, lock, close })
    const sid = generateSessionId()
    await knock(t, s.url, sid)
    await check(t, sid)
  })
}

t.test('Redis store with the Redis lock (one script): no command sets or touches a lock key of an unknown id', async t => {
  const client = await failFastRedis(t, server.url, LOCK_CLIENT_OPTIONS)
  const lock = new RedisSessionLock({ redis: server.url })
  await lock.ready()
  const s = await startApp(t, { store: new RedisSessionStore({ redis: client }), lock, close: async () => { await lock.close(); client.disconnect() } })
  const sid = generateSessionId()
  const monitor = await admin.monitor()
  const touched: string[] = []
  monitor.on('monitor', (_time: string, args: string[]) => {
    // Inside the scripts too: a SET NX of the lease would show here.
    if (args.some(a => a === `mcp:{${sid}}:lock`) && String(args[0]).toLowerCase() !== 'evalsha' && String(args[0]).toLowerCase() !== 'eval') touched.push(args.join(' '))
  })
  t.teardown(() => { monitor.disconnect() })
  await commandsSent(admin, async () => { await knock(t, s.url, sid) })
  t.same(touched, [], 'no SET, PEXPIRE or DEL of the lock key')
  t.equal(await admin.exists(`mcp:{${sid}}:lock`), 0, 'no lock key')
})
