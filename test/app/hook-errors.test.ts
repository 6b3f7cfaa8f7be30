/**
 * Errors raised by the app's own hooks (rate limits, maintenance switches, auth plugins) keep
 * their meaning on the MCP endpoint: the status and headers the hook chose, with a JSON-RPC body
 * whose code fits; an unexpected error stays a 500 -32603 that does not leak its message.
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import rateLimit from '@fastify/rate-limit'
import mcp from '../../lib/index.js'
import { defaultTools, initialize, request } from '../helpers/handshake-app.js'
import { headers, initializeBody } from '../helpers/wire.js'

async function app (t: { teardown (fn: () => unknown): void }, before: (app: FastifyInstance) => Promise<void> | void): Promise<FastifyInstance> {
  const a = Fastify({ logger: false })
  t.teardown(() => a.close())
  await before(a)
  await a.register(mcp)
  defaultTools(a.mcp)
  return a
}

const init = async (a: FastifyInstance, extra?: Record<string, string>) =>
  await a.inject({ method: 'POST', url: '/mcp', headers: headers(null, extra), payload: JSON.stringify(initializeBody({ id: 7 })) })

t.test('@fastify/rate-limit: 429 with its headers and -32000 with its message', async (t) => {
  const a = await app(t, async (a) => { await a.register(rateLimit, { max: 2, timeWindow: 60_000 }) })
  const s = await initialize(a) // initialize + notifications/initialized: the 2 allowed
  const res = await request(a, s, 'tools/list', {}, { id: 'r1' })
  t.equal(res.statusCode, 429)
  t.ok(Number(res.headers['retry-after']) > 0, 'Retry-After kept')
  t.equal(res.headers['x-ratelimit-limit'], '2', 'the limiter\'s headers kept')
  t.match(res.headers['content-type'], /^application\/json/)
  const body = res.json()
  t.equal(body.jsonrpc, '2.0')
  t.equal(body.error.code, -32000, 'a server-side condition, not an invalid request')
  t.match(body.error.message, /^Rate limit exceeded/)
  t.notMatch(body.error.message, /Bad Request/)
})

t.test('a hook\'s deliberate 503 with Retry-After: 503, -32000, its message', async (t) => {
  const a = await app(t, (a) => {
    a.addHook('onRequest', async (request, reply) => {
      if (request.headers['x-maintenance'] === undefined) return
      reply.header('retry-after', '30')
      throw Object.assign(new Error('Down for maintenance'), { statusCode: 503 })
    })
  })
  const res = await init(a, { 'x-maintenance': '1' })
  t.equal(res.statusCode, 503)
  t.equal(res.headers['retry-after'], '30')
  t.same(res.json(), { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Down for maintenance' } })
})

t.test('a hook after the body was read answers under the request\'s id', async (t) => {
  const a = await app(t, (a) => {
    a.addHook('preHandler', async () => { throw Object.assign(new Error('Slow down'), { statusCode: 429 }) })
  })
  const res = await init(a)
  t.equal(res.statusCode, 429)
  t.same(res.json(), { jsonrpc: '2.0', id: 7, error: { code: -32000, message: 'Slow down' } })
})

t.test('401 and 403 from a hook: their status and headers, -32600 with the hook\'s message', async (t) => {
  const a = await app(t, (a) => {
    a.addHook('onRequest', async (request, reply) => {
      if (request.headers.authorization === undefined) {
        reply.header('www-authenticate', 'Bearer realm="shop"')
        throw Object.assign(new Error('Missing token'), { statusCode: 401 })
      }
      if (request.headers.authorization !== 'Bearer good') throw Object.assign(new Error('Forbidden for this token'), { statusCode: 403 })
    })
  })
  const anon = await init(a)
  t.equal(anon.statusCode, 401)
  t.equal(anon.headers['www-authenticate'], 'Bearer realm="shop"')
  t.same(anon.json().error, { code: -32600, message: 'Missing token' })
  const bad = await init(a, { authorization: 'Bearer bad' })
  t.equal(bad.statusCode, 403)
  t.same(bad.json().error, { code: -32600, message: 'Forbidden for this token' })
  t.equal((await init(a, { authorization: 'Bearer good' })).statusCode, 200)
})

t.test('an error\'s own headers (http-errors / @fastify/error style) are sent', async (t) => {
  const a = await app(t, (a) => {
    a.addHook('onRequest', async () => {
      throw Object.assign(new Error('Too Many Requests'), { status: 429, headers: { 'retry-after': '5' } })
    })
  })
  const res = await init(a)
  t.equal(res.statusCode, 429, '`status` counts like `statusCode`')
  t.equal(res.headers['retry-after'], '5')
  t.equal(res.json().error.code, -32000)
})

t.test('an unexpected error (no statusCode) → 500 -32603 "Internal error", message not leaked, logged', async (t) => {
  const lines: Array<Record<string, any>> = []
  const a = Fastify({ logger: { level: 'info', stream: { write: (l: string) => { lines.push(JSON.parse(l)) } } } })
  t.teardown(() => a.close())
  a.addHook('onRequest', async () => { throw new Error('db password is hunter2') })
  await a.register(mcp)
  const res = await init(a)
  t.equal(res.statusCode, 500)
  t.same(res.json(), { jsonrpc: '2.0', id: null, error: { code: -32603, message: 'Internal error' } })
  t.notMatch(res.body, /hunter2/)
  t.ok(lines.some(l => l.level === 50 && l.err?.message === 'db password is hunter2'), 'the cause is logged at error')
})

t.test('Fastify\'s own client errors keep their status and -32600', async (t) => {
  const a = await app(t, () => {})
  const s = await initialize(a)
  // A body that is not JSON: the route's 415 (its own check), and a malformed header value.
  const res = await a.inject({ method: 'POST', url: '/mcp', headers: { ...headers(s), 'content-type': 'text/plain' }, payload: 'x' })
  t.equal(res.statusCode, 415)
  t.equal(res.json().error.code, -32600)
})
