/**
 * A Redis outage as operators and clients see it: a burst of failing requests logs one error line
 * (with its cause) and, once Redis is back, one recovery line, instead of a stack per request;
 * every 503 carries Retry-After; `ctx.handles.create` answers 503 like every other state path
 * (never a tool error the model reads).
 */
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import mcp, { createRedisClient, RedisSessionLock, RedisSessionStore, type RedisClientLike } from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { sleep, until } from '../helpers/time.js'
import { finalOf, modernHeaders, rpc } from '../helpers/wire.js'
import { initialize, request } from '../helpers/handshake-app.js'

t.setTimeout(120_000)

const server = await startRedisServer(t)
const lines: Array<Record<string, any>> = []
const stream = new Writable({ write (chunk, _enc, done) { for (const l of String(chunk).split('\n')) if (l !== '') lines.push(JSON.parse(l)); done() } })
const app = Fastify({ logger: { level: 'info', stream } })
const redis = createRedisClient(server.url) as RedisClientLike & { quit: () => Promise<unknown> }
const lock = new RedisSessionLock({ redis: server.url, timeout: 200 })
t.teardown(async () => { await app.close(); await lock.close(); await redis.quit().catch(() => {}) })
await app.register(mcp, { redis, sessions: { store: new RedisSessionStore({ redis }), lock } })
app.mcp.handleKind('bag', { ttl: 60_000 })
app.mcp.tool({ name: 'echo', description: 'Echoes' }, async () => 'echo')
// The plugin's clients fail fast rather than queue: the first request waits until both are connected.
await until(() => (redis as { status?: string }).status === 'ready' && lock.client.status === 'ready', { what: 'the Redis clients to connect' })
app.mcp.tool({ name: 'bag_create', description: 'A bag' }, async (_a, ctx) => await ctx.handles.create('bag', {}))

t.test('a burst during an outage: one error line, one recovery line, Retry-After on each 503, handles.create → 503', async t => {
  const s = await initialize(app)
  await server.stop()
  const before = lines.length
  const answers = []
  for (let i = 0; i < 20; i++) answers.push(await request(app, s, 'tools/call', { name: 'echo', arguments: {} }))
  const body = rpc('tools/call', { name: 'bag_create', arguments: {} })
  const created = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: JSON.stringify(body) })
  answers.push(created)
  t.same(answers.map(a => a.statusCode), Array(21).fill(503), 'every request → 503')
  t.same(answers.filter(a => a.headers['retry-after'] === undefined).length, 0, 'each carries Retry-After')
  t.equal(finalOf(created).error?.message, 'State store is unavailable.', 'handles.create during the outage → 503, not a tool error')
  const errors = lines.slice(before).filter(l => l.level >= 50)
  t.equal(errors.filter(l => /session (store|lock) unavailable/.test(l.msg)).length, 1, 'one error line for the session backend')
  t.ok(errors.every(l => l.err !== undefined), 'with its cause')
  t.ok(errors.length <= 3, `a handful of error lines, not one per request (${errors.length}: ${errors.map(l => l.msg).join('; ')})`)

  await server.start()
  let status = 503
  for (let i = 0; i < 50 && status === 503; i++) {
    await sleep(100)
    status = (await request(app, s, 'tools/call', { name: 'echo', arguments: {} })).statusCode
  }
  // The restarted redis-server kept nothing: the session is gone, which the backend can say again.
  t.equal(status, 404, 'answered by the backend again once Redis is back')
  const recovered = lines.slice(before).filter(l => /available again/.test(l.msg))
  t.equal(recovered.filter(l => /^session/.test(l.msg)).length, 1, 'one recovery line')
})
