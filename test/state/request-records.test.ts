/**
 * A request that changes two records — its session and a state handle — is kept all together
 * where the backend can (one synchronous step in memory, one Redis script, one PostgreSQL call),
 * and otherwise (the file store, a store of the app's own: one by one, the session first) is
 * answered with exactly what was kept. Each fault below is made real: Redis starts refusing
 * writes (`min-replicas-to-write`), PostgreSQL's table refuses updates (a trigger), another
 * request ends the handle, another holder takes a lease; the answer is compared with what the
 * store holds afterwards, both ways. A keyed call's idempotency record is one more key of the
 * record it runs on: kept with its changes or not at all, so a retry with the key replays exactly
 * when the call was kept, and runs again when it was not.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { Type } from '@sinclair/typebox'
import mcp, {
  FileSessionStore, MemorySessionStore, PgSessionLock, PgSessionStore, RedisSessionLock, RedisSessionStore,
  type SaveGuard, type SaveResult, type SessionChanges, type SessionLock, type SessionStore
} from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { sleep } from '../helpers/time.js'

const STORE_DOWN = 'Session store is unavailable.'
const LOST = 'Session lock was lost; the changes of this request were not saved.'

/** A store that refuses every save while `refusing` (the fault of a store of the app's own). */
function refusing<S extends SessionStore> (store: S): S & { refusing: boolean } {
  const save = store.save.bind(store)
  const own = store as S & { refusing: boolean }
  own.refusing = false
  own.save = async (id: string, changes: SessionChanges, guard?: SaveGuard): Promise<SaveResult> => {
    if (own.refusing) throw new Error('store refuses writes')
    return await save(id, changes, guard)
  }
  return own
}

interface Backend {
  name: string
  /** Whether it keeps a request's records together (else: one by one, the session first). */
  together: boolean
  store: SessionStore
  lock?: SessionLock
  /** Makes the store refuse writes from now on (`undo` lets it write again). */
  refuseWrites: () => Promise<() => Promise<void>>
  /** Takes the lease of `key` for someone else, as another holder after this one's ran out. */
  steal?: (key: string) => Promise<void>
}

async function app (t: Test, b: Backend): Promise<FastifyInstance> {
  const a = Fastify({ logger: false })
  t.teardown(() => a.close())
  await a.register(mcp, { sessions: { store: b.store, lock: b.lock, gcProbability: 0 }, requestState: { secret: 'records-test-secret' } })
  registerDemoTools(a.mcp)
  // One call that changes both records: the basket (its handle) and the session's counter.
  a.mcp.tool({
    name: 'basket_add_counted',
    description: 'Adds an item to a basket and counts it in the session, after `delayMs`.',
    input: Type.Object({ basket: Type.String(), item: Type.String(), delayMs: Type.Optional(Type.Integer()) }),
    handle: { argument: 'basket', kind: 'basket' }
  }, async ({ item, delayMs = 0 }, ctx) => {
    if (delayMs > 0) await sleep(delayMs)
    ctx.handle?.set('items', [...(ctx.handle.get<string[]>('items') ?? []), item])
    ctx.session?.set('counter', (ctx.session.get<number>('counter') ?? 0) + 1)
    return `added ${item}`
  })
  await a.ready()
  return a
}

async function rpc (a: FastifyInstance, sid: string | null, body: unknown, version = '2025-11-25'): Promise<{ status: number, body: any }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': version }
  if (sid !== null) headers['mcp-session-id'] = sid
  const res = await a.inject({ method: 'POST', url: '/mcp', headers, payload: JSON.stringify(body) })
  const text = res.body
  const json = text.startsWith('event:') || text.startsWith('id:') || text.startsWith(':')
    ? JSON.parse(text.split('\n').filter(l => l.startsWith('data: ')).map(l => l.slice(6)).at(-1) as string)
    : text === '' ? null : JSON.parse(text)
  return { status: res.statusCode, body: json }
}

let nextId = 1
const call = (name: string, args: Record<string, unknown>): Record<string, unknown> => ({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args } })
const keyed = (name: string, args: Record<string, unknown>, idempotencyKey: string): Record<string, unknown> =>
  ({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args, idempotencyKey } })
const REPLAY = 'fastify-mcp-http/idempotentReplay'

async function session (a: FastifyInstance, version = '2025-11-25'): Promise<string> {
  const res = await a.inject({
    method: 'POST',
    url: '/mcp',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    payload: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 't', version: '1' } } })
  })
  return res.headers['mcp-session-id'] as string
}

async function basket (a: FastifyInstance, sid: string): Promise<string> {
  return (await rpc(a, sid, call('basket_create', {}))).body.result.structuredContent.basket
}

async function stored (a: FastifyInstance, sid: string, id: string): Promise<{ counter: unknown, items: unknown }> {
  const counter = (await rpc(a, sid, call('counter_get', {}))).body.result?.structuredContent?.counter
  const items = (await rpc(a, sid, call('basket_get', { basket: id }))).body.result?.structuredContent?.items
  return { counter, items }
}

function cases (name: string, make: (t: Test) => Promise<Backend>, faults: { refuse: boolean, steal: boolean }): void {
  t.test(name, async t => {
    if (faults.refuse) {
      t.test('a 2025-03-26 batch [basket_add, counter_add] while the store starts refusing writes: both answered, neither kept', async t => {
        const b = await make(t)
        const a = await app(t, b)
        const sid = await session(a, '2025-03-26')
        const id = await basket(a, sid)
        const batch = rpc(a, sid, [call('basket_add', { basket: id, item: 'apple', delayMs: 300 }), call('counter_add', {})], '2025-03-26')
        await sleep(100)
        const undo = await b.refuseWrites()
        const r = await batch
        await undo()
        t.equal(r.status, 200)
        t.equal(r.body.length, 2)
        for (const m of r.body) {
          t.equal(m.result, undefined, `member ${String(m.id)}: no result`)
          t.equal(m.error?.message.startsWith(STORE_DOWN), true, `member ${String(m.id)}: the store refused (${String(m.error?.message)})`)
          t.same(m.error?.data?.kept, [], 'data: nothing kept')
        }
        t.same(await stored(a, sid, id), { counter: 0, items: [] }, 'nothing kept: a retry of the whole batch applies it once')
      })
    }

    t.test('a keyed call that changes the session and a handle: its record is kept with them, and a copy replays', async t => {
      const b = await make(t)
      const a = await app(t, b)
      const sid = await session(a)
      const id = await basket(a, sid)
      const first = await rpc(a, sid, keyed('basket_add_counted', { basket: id, item: 'plum' }, 'k-once'))
      const copy = await rpc(a, sid, keyed('basket_add_counted', { basket: id, item: 'plum' }, 'k-once'))
      t.equal(copy.body.result?._meta?.[REPLAY], true, 'the copy replays')
      t.same(copy.body.result?.content, first.body.result?.content)
      t.same(await stored(a, sid, id), { counter: 1, items: ['plum'] }, 'applied once')
    })

    if (faults.refuse) {
      t.test('a keyed call whose save is refused: its record is not kept either, so the retry with the key runs (once)', async t => {
        const b = await make(t)
        const a = await app(t, b)
        const sid = await session(a)
        const id = await basket(a, sid)
        const running = rpc(a, sid, keyed('basket_add_counted', { basket: id, item: 'kiwi', delayMs: 300 }, 'k-refused'))
        await sleep(100)
        const undo = await b.refuseWrites()
        const r = await running
        await undo()
        t.equal(r.status, 503, 'told not saved')
        const retry = await rpc(a, sid, keyed('basket_add_counted', { basket: id, item: 'kiwi' }, 'k-refused'))
        t.equal(retry.body.result?._meta?.[REPLAY], undefined, 'the retry ran: nothing was recorded')
        const again = await rpc(a, sid, keyed('basket_add_counted', { basket: id, item: 'kiwi' }, 'k-refused'))
        t.equal(again.body.result?._meta?.[REPLAY], true, 'and is recorded now')
        t.same(await stored(a, sid, id), { counter: 1, items: ['kiwi'] }, 'applied once')
      })
    }

    if (faults.steal) {
      t.test('a keyed call whose handle lease is lost: nothing kept, record included; the retry with the key runs (once)', async t => {
        const b = await make(t)
        const a = await app(t, b)
        const sid = await session(a)
        const id = await basket(a, sid)
        const running = rpc(a, sid, keyed('basket_add_counted', { basket: id, item: 'lime', delayMs: 300 }, 'k-lost'))
        await sleep(100)
        await b.steal?.(`~basket~${id}`)
        const r = await running
        await b.steal?.('')
        t.equal(r.status, 503, 'told lost')
        const retry = await rpc(a, sid, keyed('basket_add_counted', { basket: id, item: 'lime' }, 'k-lost'))
        t.equal(retry.body.result?._meta?.[REPLAY], undefined, 'the retry ran: nothing was recorded')
        t.same(await stored(a, sid, id), { counter: 1, items: ['lime'] }, 'applied once')
      })
    }

    t.test('a call that changes the session and a handle, the handle ended meanwhile', async t => {
      const b = await make(t)
      const a = await app(t, b)
      const sid = await session(a)
      const id = await basket(a, sid)
      const running = rpc(a, sid, call('basket_add_counted', { basket: id, item: 'pear', delayMs: 300 }))
      await sleep(100)
      t.equal(await a.mcp.handles.end('basket', id), true, 'ended out of band (an admin route) while the call runs')
      const r = await running
      const text = r.body.result?.content?.[0]?.text as string
      t.equal(r.body.result?.isError, true, 'the call is answered as failed')
      t.match(text, /^Unknown or expired basket handle\./)
      const counter = (await rpc(a, sid, call('counter_get', {}))).body.result?.structuredContent?.counter
      if (b.together) {
        t.equal(counter, 0, 'kept together: the session\'s part was not kept either')
        t.notMatch(text, /saved/)
      } else {
        t.equal(counter, 1, 'one by one, the session first: its part was kept')
        t.match(text, /other changes were saved \(session\)/, 'and the answer says so')
      }
    })

    if (faults.steal) {
      for (const subject of ['session', 'handle'] as const) {
        t.test(`the ${subject}'s lease taken by another holder while the other's is intact: nothing kept, answered lost`, async t => {
          const b = await make(t)
          const a = await app(t, b)
          const sid = await session(a)
          const id = await basket(a, sid)
          const running = rpc(a, sid, call('basket_add_counted', { basket: id, item: 'fig', delayMs: 300 }))
          await sleep(100)
          await b.steal?.(subject === 'session' ? sid : `~basket~${id}`)
          const r = await running
          t.equal(r.status, 503)
          t.equal(r.body.error?.message.startsWith(subject === 'session' ? LOST : 'Handle lock was lost'), true, String(r.body.error?.message))
          t.same(r.body.error?.data?.kept, [], 'data: nothing kept')
          await b.steal?.('')
          t.same(await stored(a, sid, id), { counter: 0, items: [] }, 'neither record changed')
        })
      }
    }
  })
}

/** A store of the app's own over `store` (written one by one), refusing writes on demand. */
function ownStore (store: SessionStore): Backend {
  const own = refusing(store)
  return {
    name: 'own',
    together: false,
    store: own,
    refuseWrites: async () => { own.refusing = true; return async () => { own.refusing = false } }
  }
}

cases('memory store (one synchronous step)', async () => ({
  name: 'memory', together: true, store: new MemorySessionStore(), refuseWrites: async () => { throw new Error('the memory store refuses nothing') }
}), { refuse: false, steal: false })

cases('a store of the app\'s own (one by one, the session first)', async () => ownStore(new MemorySessionStore()), { refuse: true, steal: false })

cases('file store (one by one, the session first)', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-records-'))
  t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
  return ownStore(new FileSessionStore({ dir }))
}, { refuse: true, steal: false })

const redis = await startRedisServer(t)
cases('Redis (one script)', async (t) => {
  const client = new Redis(redis.url)
  const admin = new Redis(redis.url)
  t.teardown(() => { client.disconnect(); admin.disconnect() })
  const prefix = `rr${nextId++}:`
  const stolen: string[] = []
  return {
    name: 'redis',
    together: true,
    store: new RedisSessionStore({ redis: client, prefix }),
    // Short leases: those a refusing Redis could not release expire soon.
    lock: new RedisSessionLock({ redis: client, prefix, ttl: 1500 }),
    // Redis refuses every write while it lacks a replica it was told to require.
    refuseWrites: async () => {
      await admin.config('SET', 'min-replicas-to-write', '1')
      return async () => { await admin.config('SET', 'min-replicas-to-write', '0') }
    },
    // '' lets go of what was taken (the test's reads take the lock again).
    steal: async (key) => {
      if (key === '') { for (const k of stolen) await admin.del(k); return }
      const lock = `${prefix}{${key}}:lock`
      stolen.push(lock)
      await admin.set(lock, 'another-holder', 'PX', 30_000)
    }
  }
}, { refuse: true, steal: true })

const db = await createTestDatabase(t)
cases('PostgreSQL (one call)', async (t) => {
  const prefix = `rr${nextId++}_`
  const pool = db.pool({ max: 4 })
  const store = new PgSessionStore({ pool, prefix })
  const lock = new PgSessionLock({ pool, prefix, ttl: 1500 })
  t.teardown(() => lock.close())
  await lock.ready()
  const stolen: string[] = []
  return {
    name: 'postgres',
    together: true,
    store,
    lock,
    // The state table refuses updates (a trigger raising an error) until undone.
    refuseWrites: async () => {
      await db.admin.query(`CREATE FUNCTION ${prefix}refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refusing writes'; END $$`)
      await db.admin.query(`CREATE TRIGGER ${prefix}refuse BEFORE UPDATE ON ${prefix}state FOR EACH ROW EXECUTE FUNCTION ${prefix}refuse()`)
      return async () => {
        await db.admin.query(`DROP TRIGGER ${prefix}refuse ON ${prefix}state`)
        await db.admin.query(`DROP FUNCTION ${prefix}refuse()`)
      }
    },
    steal: async (key) => {
      if (key === '') { await db.admin.query(`DELETE FROM ${prefix}leases WHERE id = ANY($1)`, [stolen]); return }
      stolen.push(key)
      await db.admin.query(`UPDATE ${prefix}leases SET token = 'another-holder' WHERE id = $1`, [key])
    }
  }
}, { refuse: true, steal: true })
