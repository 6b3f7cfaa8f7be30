/**
 * Clients that start a session per call, or never send the id back, stay cheap: a session not
 * used after `initialize` lives by `sessions.unusedTtlMs` (default 2 minutes) instead of the
 * store's TTL, on a real Redis (store, lock and bus): 100 × (initialize + one call) all succeed
 * and leave only keys with a TTL, the sessions' at most `unusedTtlMs`, gone once it has passed.
 * A session that is used lives by the store's TTL. (Each store's side: the contract suite.)
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import mcp, { RedisSessionLock, RedisSessionStore, type McpPluginOptions } from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { sleep } from '../helpers/time.js'
import { finalOf, headers, initializeBody, LEGACY } from '../helpers/wire.js'

t.setTimeout(120_000)
const server = await startRedisServer(t)
const redis = new Redis(server.url)
t.teardown(async () => { await redis.quit() })

async function build (t: Test, prefix: string, sessions: McpPluginOptions['sessions'] = {}): Promise<FastifyInstance> {
  const client = new Redis(server.url)
  const app = Fastify({ logger: false })
  const lock = new RedisSessionLock({ redis: server.url, prefix })
  t.teardown(async () => { await app.close(); await lock.close(); await client.quit() })
  await app.register(mcp, { redis: { client, prefix }, sessions: { store: new RedisSessionStore({ redis: client, prefix }), lock, ...sessions } })
  app.mcp.tool({ name: 'hello', description: 'Says hello' }, async () => 'hello')
  return app
}

/** initialize, then one `tools/call`: with the id (`echo`), or without it (a no-echo client). */
async function oneCall (app: FastifyInstance, echo: boolean): Promise<number[]> {
  const init = await app.inject({ method: 'POST', url: '/mcp', headers: headers(), payload: initializeBody({ version: LEGACY }) })
  const sid = init.headers['mcp-session-id'] as string
  const session = echo ? { sid, version: LEGACY } : null
  const call = await app.inject({
    method: 'POST',
    url: '/mcp',
    headers: headers(session, { 'mcp-protocol-version': LEGACY }),
    payload: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'hello', arguments: {} } }
  })
  return [init.statusCode, call.statusCode, finalOf(call).result?.isError === true ? 1 : 0]
}

async function keysWithTtl (prefix: string): Promise<Array<{ key: string, pttl: number }>> {
  const keys = await redis.keys(`${prefix}*`)
  return await Promise.all(keys.map(async key => ({ key, pttl: await redis.pttl(key) })))
}

t.test('100 × (initialize + one call without the id): all succeed; every key has a TTL, the sessions\' the short one', async t => {
  const prefix = 'noecho:'
  const app = await build(t, prefix)
  const results = await Promise.all(Array.from({ length: 100 }, async () => await oneCall(app, false)))
  t.same(results.filter(r => r.join() !== '200,200,0'), [], 'every initialize and call succeeded')
  const keys = await keysWithTtl(prefix)
  const sessions = keys.filter(k => k.key.endsWith('}:s'))
  t.equal(sessions.length, 100, 'one session record per initialize, nothing else per call')
  t.ok(keys.length <= 110, `bounded: ${keys.length} keys`)
  t.same(keys.filter(k => k.pttl < 0), [], 'every key has a TTL')
  t.same(sessions.filter(k => k.pttl > 120_000), [], 'the never-used sessions expire within 2 minutes, not the store\'s hour')
})

t.test('with a short unusedTtlMs the never-used sessions are gone once it passed; a used one stays', async t => {
  const prefix = 'short:'
  const app = await build(t, prefix, { unusedTtlMs: 300 })
  const results = await Promise.all(Array.from({ length: 100 }, async () => await oneCall(app, false)))
  t.same(results.filter(r => r.join() !== '200,200,0'), [], 'every initialize and call succeeded')
  t.same(await oneCall(app, true), [200, 200, 0], 'a client that sends its id back')
  await sleep(700)
  const sessions = (await keysWithTtl(prefix)).filter(k => k.key.endsWith('}:s'))
  t.equal(sessions.length, 1, 'only the used session is left')
  t.ok(sessions[0]!.pttl > 3_000_000, 'it lives by the store\'s TTL (one hour)')
})

t.test('sessions.unusedTtlMs must be a positive integer', async t => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await t.rejects(async () => { await app.register(mcp, { sessions: { unusedTtlMs: 0 } }) }, { code: 'FST_ERR_MCP_INVALID_OPTION', message: /sessions\.unusedTtlMs/ })
})
