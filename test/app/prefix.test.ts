/**
 * `app.register(mcp, { prefix })` serves the endpoint under the prefix, like any Fastify plugin,
 * and a plugin registered inside a prefixed parent keeps that parent's prefix.
 */
import t from 'tap'
import Fastify from 'fastify'
import mcp from '../../lib/index.js'
import { defaultTools } from '../helpers/handshake-app.js'
import { headers, initializeBody } from '../helpers/wire.js'

async function init (app: ReturnType<typeof Fastify>, url: string): Promise<number> {
  const res = await app.inject({ method: 'POST', url, headers: headers(), payload: JSON.stringify(initializeBody()) })
  return res.statusCode
}

t.test('the prefix option is honoured: /api/mcp, not /mcp', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(mcp, { prefix: '/api' })
  defaultTools(app.mcp)
  t.equal(await init(app, '/api/mcp'), 200, 'served under the prefix')
  t.equal(await init(app, '/mcp'), 404, 'not at the unprefixed path')
  // app.mcp stays on the app (the plugin does not encapsulate its decorator).
  t.type(app.mcp.tool, 'function')
})

t.test('prefix and path combine', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(mcp, { prefix: '/api/', path: '/agents' })
  t.equal(await init(app, '/api/agents'), 200)
})

t.test('inside a prefixed parent: /v1/mcp, and /v1/api/mcp with a prefix of its own', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(async (api) => {
    await api.register(mcp)
  }, { prefix: '/v1' })
  await app.register(async (api) => {
    await api.register(mcp, { prefix: '/api', path: '/tools' })
  }, { prefix: '/v2' })
  t.equal(await init(app, '/v1/mcp'), 200)
  t.equal(await init(app, '/v2/api/tools'), 200)
  t.equal(await init(app, '/mcp'), 404)
})

t.test('a whole session works under the prefix (GET and DELETE too)', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(mcp, { prefix: '/api' })
  defaultTools(app.mcp)
  await app.ready()
  const res = await app.inject({ method: 'POST', url: '/api/mcp', headers: headers(), payload: JSON.stringify(initializeBody()) })
  const sid = res.headers['mcp-session-id'] as string
  const del = await app.inject({ method: 'DELETE', url: '/api/mcp', headers: { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' } })
  t.equal(del.statusCode, 200)
})

t.test('an invalid prefix fails at register time naming the option', async (t) => {
  const app = Fastify()
  let err: unknown = null
  try {
    await app.register(mcp, { prefix: 42 as unknown as string })
    await app.ready()
  } catch (e) {
    err = e
  } finally {
    await app.close().catch(() => {})
  }
  t.match(err, { code: 'FST_ERR_MCP_INVALID_OPTION', message: /prefix/ })
})
