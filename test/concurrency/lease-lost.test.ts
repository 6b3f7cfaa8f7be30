/**
 * A lease lost while the handler runs (Redis unreachable or the key gone past its TTL): the
 * handler's ctx.signal aborts and the client is told its changes were not saved (503), not an
 * empty 202 and not a success.
 */
import t from 'tap'
import { Redis } from 'ioredis'
import { MemorySessionStore, RedisSessionLock } from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { startApp, lockKeys } from './fixtures/app.js'
import { callTool, counterOf, initialize } from '../helpers/http-client.js'
import { until } from '../helpers/time.js'

t.test('a lease lost mid-handler aborts the handler and answers 503', async (t) => {
  const server = await startRedisServer(t)
  const admin = new Redis(server.url)
  t.teardown(() => admin.quit())
  const lock = new RedisSessionLock({ redis: server.url, timeout: 2000, ttl: 300 })
  await lock.ready()
  const store = new MemorySessionStore()
  const { url } = await startApp(t, { store, lock, close: async () => { await lock.close() } })
  const session = await initialize(url)
  // The handler's work is long (30 s): answered well before it could have ended, it was stopped.
  const WORK = 30_000
  const pending = callTool(url, session, 'counter_add', { by: 5, delayMs: WORK })
  await until(async () => (await lockKeys(admin)).length === 1, { timeout: 30_000, what: 'the lease is taken' })
  // Someone else's lease now: renewal finds it is no longer ours.
  const [key] = await lockKeys(admin)
  await admin.set(key, 'another-holder', 'PX', 200)
  const lostAt = performance.now()
  const reply = await pending
  // The handler was stopped when the lease was lost, not waited for (a ratio of its own length).
  const took = performance.now() - lostAt
  t.ok(took < WORK / 2, `answered ${Math.round(took)} ms after the lease was lost, not after the ${WORK} ms handler`)
  t.equal(reply.status, 503)
  t.equal(reply.last?.id, reply.id)
  t.equal(reply.last?.error?.code, -32000)
  t.equal(reply.last?.error?.message, 'Session lock was lost; the changes of this request were not saved.')
  await until(async () => (await lockKeys(admin)).length === 0, { timeout: 30_000, what: 'the foreign lease expired' })
  t.equal(await counterOf(url, session), 0, 'the stopped handler wrote nothing')
})
