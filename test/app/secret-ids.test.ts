/**
 * Session, handle and task ids are secrets: a scan of every log line (level trace) and every
 * response body over the paths that talk about a session — busy (lock timeout), unknown id (404),
 * a Redis outage (503 from the store and the lock), a request to a client that cannot receive it,
 * handle calls on a busy and on a down backend — finds no full id. (Spans: test/telemetry/spans.test.ts.)
 */
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { createRedisClient, RedisSessionLock, RedisSessionStore, type RedisClientLike } from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { sleep, until } from '../helpers/time.js'
import { call, initialize, post, request } from '../helpers/handshake-app.js'

t.setTimeout(120_000)

const server = await startRedisServer(t)
const lines: string[] = []
const bodies: string[] = []
const stream = new Writable({ write (chunk, _enc, done) { lines.push(String(chunk)); done() } })
const app = Fastify({ logger: { level: 'trace', stream } })
const redis = createRedisClient(server.url, { log: app.log }) as RedisClientLike & { quit: () => Promise<unknown> }
const lock = new RedisSessionLock({ redis: server.url, timeout: 100 })
t.teardown(async () => { await app.close(); await lock.close(); await redis.quit().catch(() => {}) })
await app.register(mcp, { redis, sessions: { store: new RedisSessionStore({ redis }), lock } })
app.mcp.handleKind('bag', { ttl: 60_000 })
// The plugin's clients fail fast rather than queue: the first request waits until both are connected.
await until(() => (redis as { status?: string }).status === 'ready' && lock.client.status === 'ready', { what: 'the Redis clients to connect' })
app.mcp.tool({ name: 'slow', description: 'Holds its session a while' }, async () => { await sleep(600); return 'done' })
app.mcp.tool({ name: 'ask', description: 'Asks the client' }, async (_a, ctx) => {
  await ctx.elicit('x', { message: 'Name?', requestedSchema: { type: 'object', properties: {} } })
  return 'asked'
})
app.mcp.tool({ name: 'bag_create', description: 'A bag' }, async (_a, ctx) => await ctx.handles.create('bag', {}))
app.mcp.tool({ name: 'bag_hold', description: 'Holds a bag', input: Type.Object({ bag: Type.String(), ms: Type.Number() }), handle: { argument: 'bag', kind: 'bag' } },
  async ({ ms }) => { await sleep(ms); return 'held' })

const keep = <T extends { body: string }>(r: T): T => { bodies.push(r.body); return r }

t.test('no full id in any log line or body over busy, 404, outage and unknown-id paths', async t => {
  const s = await initialize(app, { capabilities: {} })
  const unknown = { sid: 'Q'.repeat(43), version: s.version }
  const bag = (await call(app, s, 'tools/call', { name: 'bag_create', arguments: {} })).result.content[0].text as string

  // Busy: the session's lock and the bag's lock are held past the lock timeout.
  const slow = request(app, s, 'tools/call', { name: 'slow', arguments: {} })
  await sleep(100)
  const busy = keep(await request(app, s, 'tools/call', { name: 'slow', arguments: {} }))
  t.equal(busy.statusCode, 503, 'busy session → 503')
  keep(await slow)
  const holding = request(app, null, 'tools/call', { name: 'bag_hold', arguments: { bag, ms: 600 } })
  await sleep(100)
  t.equal(keep(await request(app, null, 'tools/call', { name: 'bag_hold', arguments: { bag, ms: 0 } })).statusCode, 503, 'busy handle → 503')
  keep(await holding)

  // Unknown ids, and a request to a client that declared nothing.
  t.equal(keep(await request(app, unknown, 'tools/list')).statusCode, 404, 'unknown session → 404')
  keep(await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': unknown.sid } }))
  keep(await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': unknown.sid } }))
  keep(await request(app, s, 'tools/call', { name: 'ask', arguments: {} }))
  keep(await request(app, null, 'tools/call', { name: 'bag_hold', arguments: { bag: `${bag}x`, ms: 0 } }))

  // Outage: Redis stops.
  await server.stop()
  const down = keep(await request(app, s, 'tools/call', { name: 'slow', arguments: {} }))
  t.equal(down.statusCode, 503, 'store down → 503')
  keep(await request(app, null, 'tools/call', { name: 'bag_hold', arguments: { bag, ms: 0 } }))
  keep(await post(app, { jsonrpc: '2.0', method: 'notifications/initialized' }, { session: s }))
  keep(await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid, 'mcp-protocol-version': s.version } }))
  await server.start()
  await sleep(300)

  const secrets = [s.sid, unknown.sid, bag]
  const text = lines.join('') + bodies.join('\n')
  t.ok(lines.length > 20, `${lines.length} log lines scanned`)
  t.ok(text.includes(s.sid.slice(0, 8)), 'the logs still name the session by its prefix')
  for (const secret of secrets) {
    const at = text.indexOf(secret)
    t.equal(at, -1, `no full id (${secret.slice(0, 8)}…)${at === -1 ? '' : `: …${text.slice(Math.max(0, at - 300), at + 60)}`}`)
  }
})
