/**
 * The message bus's Redis down while the store is fine (memory store, Redis bus on a private
 * redis-server), as operators see it: client answers and cancellations answered 503 with
 * Retry-After, one error line for the outage (not a stack per request) and one line when the bus
 * answers again; the same for the session subscriptions of the hub.
 */
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import mcp, { LOCK_CLIENT_OPTIONS, RedisBus } from '../../lib/index.js'
import { SessionTopics } from '../../lib/bus/session-topics.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { sleep, until } from '../helpers/time.js'
import { initialize, post } from '../helpers/handshake-app.js'

t.setTimeout(120_000)

const server = await startRedisServer(t)

function capture (): { lines: Array<Record<string, any>>, stream: Writable } {
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, done) { for (const l of String(chunk).split('\n')) if (l !== '') lines.push(JSON.parse(l)); done() } })
  return { lines, stream }
}

t.test('client answers and cancellations during a bus outage: 503 each, one error line, one recovery line', async t => {
  const { lines, stream } = capture()
  const app = Fastify({ logger: { level: 'info', stream } })
  t.teardown(async () => { await app.close() })
  await app.register(mcp, { redis: server.url })
  app.mcp.tool({ name: 'echo', description: 'Echoes' }, async () => 'echo')
  await app.ready()
  // The plugin's broadcast subscription is in place before Redis goes (else its failure is logged too).
  const admin = new Redis(server.url)
  await until(async () => Number((await admin.pubsub('NUMSUB', 'mcp:broadcast') as [string, number])[1]) >= 1, { timeout: 10_000, what: 'the broadcast subscription' })
  admin.disconnect()
  const session = await initialize(app)
  await server.stop()
  t.teardown(async () => { await server.start().catch(() => {}) })
  const before = lines.length
  const statuses: number[] = []
  const retryAfter: unknown[] = []
  for (let i = 0; i < 10; i++) {
    // An answer to a request of this server (a minted id), and a cancellation: both go through the bus.
    const answer = await post(app, { jsonrpc: '2.0', id: `srv-0000000${i}-1`, result: {} }, { session })
    const cancel = await post(app, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: i } }, { session })
    for (const r of [answer, cancel]) { statuses.push(r.statusCode); retryAfter.push(r.headers['retry-after']) }
  }
  t.same(statuses, Array(20).fill(503), 'each refused with 503')
  t.same(retryAfter, Array(20).fill('1'), 'each with Retry-After')
  const errors = lines.slice(before).filter(l => l.level >= 50)
  t.equal(errors.filter(l => l.msg === 'message bus unavailable').length, 1, 'one error line for the outage')
  t.ok(errors[0]?.err !== undefined, 'with its cause')
  t.equal(errors.length, 1, `nothing else at error (${errors.map(l => l.msg).join('; ')})`)

  await server.start()
  let status = 503
  for (let i = 0; i < 50 && status === 503; i++) {
    await sleep(100)
    status = (await post(app, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'x' } }, { session })).statusCode
  }
  t.equal(status, 202, 'accepted again once Redis is back')
  t.equal(lines.slice(before).filter(l => l.msg === 'message bus available again').length, 1, 'one recovery line')
})

t.test('session subscriptions failing during an outage: one error line, one recovery line', async t => {
  const client = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
  client.on('error', () => {})
  await until(() => client.status === 'ready', { timeout: 5000, what: 'the client' })
  const bus = new RedisBus({ redis: client })
  const logged: Array<{ level: string, msg: string }> = []
  const logger = {
    error: (_o: object, msg: string) => { logged.push({ level: 'error', msg }) },
    warn: (_o: object, msg: string) => { logged.push({ level: 'warn', msg }) },
    debug: (_o: object, msg: string) => { logged.push({ level: 'debug', msg }) }
  }
  const topics = new SessionTopics(bus, logger)
  t.teardown(async () => { await topics.close(); await bus.close(); client.disconnect() })
  await server.stop()
  for (let i = 0; i < 10; i++) await t.rejects(topics.ready(`s${i}`), `session ${i}: not subscribed`)
  t.equal(logged.filter(l => l.level === 'error').length, 1, `one error line for ten sessions (${logged.map(l => l.msg).join('; ')})`)
  await server.start()
  await until(async () => await topics.ready('after').then(() => true, () => false), { timeout: 10_000, what: 'a subscription once Redis is back' })
  t.equal(logged.filter(l => l.msg === 'bus subscription available again').length, 1, 'one recovery line')
})
