/**
 * Redis fails under a locked session (RedisSessionStore + RedisSessionLock, in-process app):
 *
 * - stopped (SIGTERM): a request is refused at once, 503 "Session lock is unavailable.", with an
 *   error log carrying the cause. The private server runs without persistence, so after the
 *   restart the old session is gone (404: the store says so, the app does not guess); recovery
 *   without restarting the app is shown by a new session that works.
 * - paused (SIGSTOP, a hung server): refused after the lock client's 500 ms command timeout, 503;
 *   after SIGCONT the data survived and the SAME session works again, with its counter intact and
 *   no lease left behind by the request that timed out.
 */
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { RedisSessionLock, RedisSessionStore, LOCK_CLIENT_OPTIONS } from '../../lib/index.js'
import { shownId } from '../../lib/util/shown-id.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { assertIdle, startApp, type InProcess } from './fixtures/app.js'
import { callTool, counterOf, initialize } from '../helpers/http-client.js'
import { until } from '../helpers/time.js'
import { headers, newId } from '../helpers/wire.js'

const server = await startRedisServer(t)

async function setup (t: Test): Promise<InProcess & { lock: RedisSessionLock, admin: Redis, client: Redis }> {
  // The store's own client fails fast too (no offline queue), like the lock's.
  const client = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
  client.on('error', () => {})
  const admin = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
  admin.on('error', () => {})
  const lock = new RedisSessionLock({ redis: server.url, timeout: 2000, ttl: 3000 })
  await lock.ready()
  // Without an offline queue a command sent before the connection is up fails at once: the first
  // initialize read "Session store is unavailable." on a loaded machine.
  await until(() => client.status === 'ready' && admin.status === 'ready', { what: 'the store and admin clients to connect' })
  const store = new RedisSessionStore({ redis: client })
  const { app, url, logs } = await startApp(t, {
    store,
    lock,
    close: async () => {
      await lock.close()
      client.disconnect()
      admin.disconnect()
    }
  })
  return { url, logs, lock, app, admin, client }
}

const UNAVAILABLE = /^Session (lock|store) is unavailable\.$/

t.test('Redis stopped: 503 at once with an error log; after the restart the app recovers', async t => {
  const { url, logs, lock, app, admin, client } = await setup(t)
  const session = await initialize(url)
  t.equal((await callTool(url, session, 'counter_add', {})).last?.result?.structuredContent?.counter, 1, 'works before the outage')

  await server.stop()
  await until(() => lock.client.status !== 'ready', { timeout: 3000, what: 'the lock client to notice' })

  // Measured through app.inject (no socket): the time is the plugin's, not the HTTP client's.
  const timings: number[] = []
  for (let i = 0; i < 5; i++) {
    const id = newId()
    const started = performance.now()
    const r = await app.inject({
      method: 'POST',
      url: '/mcp',
      headers: headers(session),
      payload: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'counter_add', arguments: {} } })
    })
    timings.push(performance.now() - started)
    const body = r.json()
    t.equal(r.statusCode, 503, `request ${i + 1}: 503`)
    t.equal(body.id, id, 'under the request\'s id')
    t.equal(body.error?.code, -32000, 'JSON-RPC -32000')
    t.match(body.error?.message, UNAVAILABLE, `"${String(body.error?.message)}"`)
  }
  t.comment(`refusals took ${timings.map(ms => Math.round(ms)).join(', ')} ms`)
  const median = [...timings].sort((a, b) => a - b)[2]
  t.ok(median < 100, `refused within 100 ms (median of five: ${Math.round(median)} ms)`)
  t.ok(Math.max(...timings) < 600, 'never waited for a timeout (slowest under 600 ms)')

  const logged = logs.find(l => l.level === 50 && l.sessionId === shownId(session.sid) && /^session (lock|store) unavailable$/.test(l.msg))
  t.ok(logged, 'an error log for the session')
  t.match(logged?.err?.message, /Failed to acquire the lock of session .+\(.+\)/, 'with the cause in it')
  t.ok(typeof logged?.err?.stack === 'string', 'and its stack')
  t.comment(`logged: ${JSON.stringify({ msg: logged?.msg, err: { type: logged?.err?.type, message: logged?.err?.message } })}`)

  await server.start()
  // Every client: the store's own (initialize goes through it) reconnects on its own schedule.
  await until(async () => lock.client.status === 'ready' && admin.status === 'ready' && client.status === 'ready', { timeout: 5000, what: 'the clients to reconnect' })
  // No persistence: Redis came back empty, and the store says the old session is gone.
  const old = await callTool(url, session, 'counter_get')
  t.equal(old.status, 404, 'the old session is gone with the data Redis did not keep: 404, not 503')

  const fresh = await initialize(url)
  t.equal((await callTool(url, fresh, 'counter_add', { by: 2 })).last?.result?.structuredContent?.counter, 2, 'a new session works without restarting the app')
  t.equal(await counterOf(url, fresh), 2, 'and keeps its state')
  await assertIdle(t, { app, lock, redis: admin })
})

t.test('Redis paused: 503 after the command timeout; after SIGCONT the same session works again', async t => {
  const { url, logs, lock, app, admin } = await setup(t)
  const session = await initialize(url)
  t.equal((await callTool(url, session, 'counter_add', { by: 5 })).last?.result?.structuredContent?.counter, 5)

  server.pause()
  let resumed = false
  t.teardown(() => { if (!resumed) server.resume() })
  const started = performance.now()
  const r = await callTool(url, session, 'counter_add', { by: 100 })
  const took = performance.now() - started
  t.equal(r.status, 503, '503 while Redis hangs')
  t.match(r.last?.error?.message, UNAVAILABLE)
  t.ok(took >= 400 && took < 1500, `after the 500 ms command timeout, not the 2 s lock timeout (${Math.round(took)} ms)`)
  t.ok(logs.find(l => l.level === 50 && l.sessionId === shownId(session.sid)), 'logged as an error')

  server.resume()
  resumed = true
  // The timed-out SET NX still ran once Redis thawed; the lock released it right behind (same
  // connection, in order), so the session is free again at once.
  const again = await callTool(url, session, 'counter_add', { by: 1 })
  t.equal(again.status, 200, 'the same session works again')
  t.equal(again.last?.result?.structuredContent?.counter, 6, 'its data survived; the refused request changed nothing')
  await assertIdle(t, { app, lock, redis: admin })
})
