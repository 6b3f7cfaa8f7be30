/**
 * The operators' status surface: `app.mcp.status()` and the opt-in `statusRoute`. Off by
 * default (404); on, a constant-size JSON of counts with `no-store`, never a session id or a
 * principal, however many sessions there are.
 */
import t from 'tap'
import { build, initialize } from '../helpers/handshake-app.js'

const KEYS = ['draining', 'getStreams', 'inflightRequests', 'listenStreams', 'lockWaiters', 'pendingClientRequests', 'runningTasks', 'sessionsHeld']

t.test('off by default: 404', async t => {
  const app = await build(t)
  t.equal((await app.inject({ method: 'GET', url: '/mcp/status' })).statusCode, 404)
  t.same(Object.keys(app.mcp.status()).sort(), KEYS, 'the decorator is always there')
})

t.test('on: the counts, fresh, and nothing that names a session or a principal', async t => {
  const app = await build(t, { statusRoute: '/mcp/status', auth: { authenticate: async () => ({ id: 'alice-principal' }) } })
  const empty = await app.inject({ method: 'GET', url: '/mcp/status' })
  t.equal(empty.statusCode, 200)
  t.equal(empty.headers['cache-control'], 'no-store')
  t.match(empty.headers['content-type'], /application\/json/)
  t.same(Object.keys(empty.json()).sort(), KEYS)
  t.ok(Object.values(empty.json()).every(v => v === 0 || v === false), 'all 0 (and not draining) when idle')
  const sessions = []
  for (let i = 0; i < 20; i++) sessions.push(await initialize(app))
  const res = await app.inject({ method: 'GET', url: '/mcp/status' })
  t.same(res.json(), app.mcp.status())
  t.equal(res.body.length, empty.body.length, 'constant size (counts only)')
  for (const s of sessions) t.notOk(res.body.includes(s.sid))
  t.notOk(res.body.includes('alice'))
  t.equal((await app.inject({ method: 'POST', url: '/mcp/status', payload: '{}' })).statusCode, 404, 'read-only')
})

t.test('the option is checked at register time', async t => {
  await t.rejects(build(t, { statusRoute: 'status' as never }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /statusRoute/ })
  await t.rejects(build(t, { statusRoute: true as never }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /statusRoute/ })
  await t.rejects(build(t, { telemetry: { tracerProvider: {} } as never }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /telemetry\.tracerProvider/ })
  await t.rejects(build(t, { telemetry: 'yes' as never }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /telemetry/ })
})
