/**
 * What the lock costs on Redis, in round trips (docs/sessions-and-lock.md#lock-false): with the
 * Redis store and its lock, a request that saves costs 2 (take+read, save+release) locked or not;
 * one that changes nothing costs 2 locked (take+read, release) and 1 unlocked (the read); a ping,
 * a list or a read-only tool takes no lease (1: the read). Counted through MONITOR on a private
 * redis-server.
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import mcp, { RedisSessionStore } from '../../lib/index.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { headers, initializeBody, type Session } from '../helpers/wire.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => { admin.disconnect() })

async function build (lock: false | undefined): Promise<FastifyInstance> {
  const client = new Redis(server.url)
  const app = Fastify({ logger: false })
  t.teardown(async () => { await app.close(); client.disconnect() })
  await app.register(mcp, { sessions: { store: new RedisSessionStore({ redis: client }), lock } })
  app.mcp.tool({ name: 'bump', description: 'Writes the session' }, async (_a, ctx) => {
    ctx.session?.set('n', (ctx.session.get<number>('n') ?? 0) + 1)
    return 'bumped'
  })
  app.mcp.tool({ name: 'peek', description: 'Reads the session, and does not say it only reads' }, async (_a, ctx) => String(ctx.session?.get('n') ?? 0))
  app.mcp.tool({ name: 'look', description: 'Reads the session', annotations: { readOnlyHint: true } }, async (_a, ctx) => String(ctx.session?.get('n') ?? 0))
  await app.ready()
  return app
}

async function open (app: FastifyInstance): Promise<Session> {
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: headers(), payload: initializeBody() })
  return { sid: res.headers['mcp-session-id'] as string, version: res.json().result.protocolVersion }
}

async function roundTrips (app: FastifyInstance, session: Session, method: string, params?: Record<string, unknown>): Promise<number> {
  const send = async (): Promise<number> =>
    (await app.inject({ method: 'POST', url: '/mcp', headers: headers(session), payload: { jsonrpc: '2.0', id: 1, method, params } })).statusCode
  await send() // scripts loaded, session used once
  const { value, commands } = await commandsSent(admin, send)
  t.equal(value, 200, `${method} ${JSON.stringify(params ?? {})} answered`)
  return commands.length
}

t.test('locked (the default lock) and lock: false, request by request', async t => {
  const locked = await build(undefined)
  const unlocked = await build(false)
  const a = await open(locked)
  const b = await open(unlocked)
  const rows: Array<[string, string, Record<string, unknown> | undefined, number, number]> = [
    ['a call that saves', 'tools/call', { name: 'bump' }, 2, 2],
    ['a call that changes nothing', 'tools/call', { name: 'peek' }, 2, 1],
    ['a read-only tool', 'tools/call', { name: 'look' }, 1, 1],
    ['a ping', 'ping', undefined, 1, 1],
    ['tools/list', 'tools/list', undefined, 1, 1]
  ]
  for (const [what, method, params, withLock, without] of rows) {
    t.equal(await roundTrips(locked, a, method, params), withLock, `${what}: ${withLock} locked`)
    t.equal(await roundTrips(unlocked, b, method, params), without, `${what}: ${without} with lock: false`)
  }
})
