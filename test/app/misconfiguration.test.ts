/**
 * Misconfiguration caught at registration or named in the log: Redis and PostgreSQL URLs are
 * checked by shape when given (`redis:/host:6379`, one slash, is refused naming the option, where it
 * used to pass and leave the app waiting and answering 503s), the shared engine that does not
 * answer at start-up is logged once with its backend and host, and a `requestState` sealed by an
 * instance with another secret is refused with a log line naming that as the likely cause. And
 * CORS: what the docs say matters (where the CORS plugin is, not its order) holds.
 */
import { createServer } from 'node:net'
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import mcp, { createLockClient, createPgPool, createRedisClient } from '../../lib/index.js'
import { postgresUrlProblem, redisUrlProblem } from '../../lib/util/url-shape.js'
import { postgresProbe, redisProbe } from '../../lib/engine-probe.js'
import { finalOf, modernHeaders, rpc } from '../helpers/wire.js'

function capture (): { lines: Array<Record<string, any>>, stream: Writable } {
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, done) { for (const l of String(chunk).split('\n')) if (l !== '') lines.push(JSON.parse(l)); done() } })
  return { lines, stream }
}

/** A port nobody listens on (taken from the OS, then let go). */
async function closedPort (): Promise<number> {
  const server = createServer()
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  await new Promise(resolve => server.close(resolve))
  return port
}

t.test('URL shapes: what a client takes passes, a missing slash or scheme does not', async t => {
  for (const ok of ['redis://127.0.0.1:6379', 'rediss://user:pw@cache.internal:6380/2', 'redis://[::1]:6379']) t.equal(redisUrlProblem(ok), null, ok)
  t.match(redisUrlProblem('redis:/host:6379'), /has no host: write redis:\/\/host:port/)
  t.match(redisUrlProblem('redis:host:6379'), /has no host/)
  t.match(redisUrlProblem('redis://'), /has no host/)
  t.match(redisUrlProblem('http://host:6379'), /must be a redis:\/\/ or rediss:\/\/ URL, got http:/)
  t.match(redisUrlProblem('host:6379'), /must be a redis/)
  for (const ok of ['postgres://postgres@127.0.0.1:5432/app', 'postgresql://u:p@db/app?sslmode=require', 'postgres:///app?host=/run/postgresql', '/run/postgresql app']) {
    t.equal(postgresUrlProblem(ok), null, ok)
  }
  t.match(postgresUrlProblem('postgres:/db.internal:5432/app'), /has no host: write postgres:\/\/user@host:5432\/db/)
  t.match(postgresUrlProblem('postgress://db/app'), /must be a postgres:\/\/ or postgresql:\/\/ URL, got postgress:/)
  t.match(postgresUrlProblem('db.internal:5432'), /must be a postgres/)
})

t.test('registration refuses a Redis or PostgreSQL URL of the wrong shape, naming the option; no URL in the message', async t => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ redis: 'redis:/cache.internal:6379' }, /^Invalid option "redis": has no host: write redis:\/\/host:port \(two slashes after "redis:"\)$/],
    [{ redis: 'https://cache.internal' }, /^Invalid option "redis": must be a redis:\/\/ or rediss:\/\/ URL/],
    [{ postgres: 'postgres:/db.internal:5432/app' }, /^Invalid option "postgres": has no host/],
    [{ postgres: 'mysql://db.internal/app' }, /^Invalid option "postgres": must be a postgres:\/\/ or postgresql:\/\/ URL/]
  ]
  for (const [opts, message] of cases) {
    const app = Fastify({ logger: false })
    t.teardown(() => app.close())
    const err = await app.register(mcp, opts).ready().then(() => null, (e: Error) => e)
    t.match(err, { code: 'FST_ERR_MCP_INVALID_OPTION', message }, JSON.stringify(opts))
    t.notOk(String(err?.message).includes('internal:'), 'the URL itself is not repeated (it may hold a password)')
  }
})

t.test('the client factories refuse the same shapes at once', async t => {
  t.throws(() => createRedisClient('redis:/cache.internal:6379'), { name: 'TypeError', message: /^Redis URL has no host/ })
  t.throws(() => createLockClient('redis:/cache.internal:6379'), { name: 'TypeError', message: /^Redis URL has no host/ })
  t.throws(() => createPgPool('postgres:/db.internal/app'), { name: 'TypeError', message: /^PostgreSQL connection string has no host/ })
})

t.test('PostgreSQL refusing connections at start-up: one line names the backend and the host; the app starts', async t => {
  const port = await closedPort()
  const { lines, stream } = capture()
  const app = Fastify({ logger: { level: 'info', stream } })
  t.teardown(() => app.close())
  await app.register(mcp, { postgres: `postgres://postgres:secret-pw@127.0.0.1:${port}/app`, requestState: { secret: 'misconfiguration-secret-0123456789' } })
  await app.ready()
  const line = lines.find(l => l.backend === 'PostgreSQL')
  t.match(line, { level: 50, host: `127.0.0.1:${port}`, msg: `fastify-mcp-http: PostgreSQL at 127.0.0.1:${port} not reachable at start-up; requests that need it get 503 until it answers` })
  t.match(line?.err?.message ?? line?.err?.code, /ECONNREFUSED|connect/, 'with the cause')
  t.notOk(JSON.stringify(lines).includes('secret-pw'), 'never the password')
})

t.test('Redis refusing connections at start-up: one line names the backend and the host; the app starts', async t => {
  const port = await closedPort()
  const { lines, stream } = capture()
  const app = Fastify({ logger: { level: 'info', stream } })
  t.teardown(() => app.close())
  await app.register(mcp, { redis: `redis://:secret-pw@127.0.0.1:${port}`, requestState: { secret: 'misconfiguration-secret-0123456789' } })
  await app.ready()
  const line = lines.find(l => l.backend === 'Redis')
  t.match(line, { level: 50, host: `127.0.0.1:${port}`, msg: `fastify-mcp-http: Redis at 127.0.0.1:${port} not reachable at start-up; requests that need it get 503 until it answers` })
  t.notOk(JSON.stringify(lines).includes('secret-pw'), 'never the password')
})

t.test('a requestState sealed under another secret: -32602 to the client, the log names mismatched secrets', async t => {
  const nameSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }
  const build = async (secret: string, stream?: Writable) => {
    const app = Fastify({ logger: stream === undefined ? false : { level: 'info', stream } })
    t.teardown(() => app.close())
    await app.register(mcp, { requestState: { secret } })
    app.mcp.tool({ name: 'ask', description: 'Asks a name' }, async (_a, ctx) => {
      const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: nameSchema })
      return `Hello, ${String(r.content?.name)}`
    })
    return app
  }
  const { lines, stream } = capture()
  const a = await build('instance-a-secret-0123456789abcdef')
  const b = await build('instance-b-secret-0123456789abcdef', stream)
  const caps = { elicitation: {} }
  const first = rpc('tools/call', { name: 'ask', arguments: {} }, { caps })
  const round = finalOf(await a.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(first), payload: JSON.stringify(first) }))
  t.equal(round.result?.resultType, 'input_required')
  const retry = rpc('tools/call', { name: 'ask', arguments: {}, inputResponses: { name: { action: 'accept', content: { name: 'Ada' } } }, requestState: round.result.requestState }, { caps })
  const res = await b.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(retry), payload: JSON.stringify(retry) })
  t.match(finalOf(res).error, { code: -32602, message: 'Invalid params: requestState failed verification' }, 'the client is told it is refused, not why the servers disagree')
  const line = lines.find(l => typeof l.msg === 'string' && l.msg.startsWith('requestState refused'))
  t.match(line, { level: 40, reason: 'requestState failed verification', likelyCause: /another requestState\.secret \(set the same one on every instance\)/ })
  t.match(line?.msg, /^requestState refused: likely cause: the instance that sealed it has another requestState\.secret/)
})

t.test('CORS: where the plugin is counts, not when it was registered', async t => {
  const { default: cors } = await import('@fastify/cors')
  const origin = 'https://shop.example.com'
  const status = async (place: 'before' | 'after' | 'sibling'): Promise<number> => {
    const app = Fastify({ logger: false })
    t.teardown(() => app.close())
    const addCors = async (): Promise<void> => { await app.register(cors, { origin: [origin], methods: ['GET', 'POST', 'DELETE'] }) }
    if (place === 'before') await addCors()
    await app.register(mcp)
    if (place === 'after') await addCors()
    if (place === 'sibling') await app.register(async (child) => { await child.register(cors, { origin: [origin] }) })
    const body = rpc('server/discover')
    return (await app.inject({ method: 'POST', url: '/mcp', headers: { ...modernHeaders(body), origin }, payload: JSON.stringify(body) })).statusCode
  }
  t.equal(await status('before'), 200, 'registered before the plugin: approved')
  t.equal(await status('after'), 200, 'registered after it: approved the same')
  t.equal(await status('sibling'), 403, 'inside a sibling plugin: its hook never runs for the MCP routes')
})

t.test('the start-up line names the host of a client or pool handed over, and of Sentinels', async t => {
  const { Redis } = await import('ioredis')
  const { default: pg } = await import('pg')
  const lazy = new Redis({ host: '10.0.0.9', port: 6390, lazyConnect: true })
  t.teardown(() => { lazy.disconnect() })
  const given = redisProbe(lazy, lazy as never)
  t.same([given.backend, given.host], ['Redis', '10.0.0.9:6390'])
  await given.probe(10)
  t.pass('a lazy client (lazyConnect) is left to connect when the app wants it')
  const sentinels = redisProbe({ sentinels: [{ host: 's1', port: 26379 }, { host: 's2', port: 26379 }], name: 'mymaster' }, lazy as never)
  t.equal(sentinels.host, 'sentinels s1:26379,s2:26379 (mymaster)')
  const pool = new pg.Pool({ host: 'db.internal', port: 5433 })
  t.teardown(() => pool.end())
  t.same([postgresProbe(pool, pool as never).backend, postgresProbe(pool, pool as never).host], ['PostgreSQL', 'db.internal:5433'])
  const byString = new pg.Pool({ connectionString: 'postgres://u:secret-pw@db2.internal:5434/app' })
  t.teardown(() => byString.end())
  t.equal(postgresProbe(byString, byString as never).host, 'db2.internal:5434', 'from its connection string, without the password')
})
