/**
 * 401 and 403 say why in the log, at info, without the token: no principal (auth.authenticate), an
 * Origin not allowed, a missing scope.
 */
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import mcp from '../../lib/index.js'
import { headers, initializeBody } from '../helpers/wire.js'

t.test('401 and 403 log their reason, never the token', async t => {
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, done) { for (const l of String(chunk).split('\n')) if (l !== '') lines.push(JSON.parse(l)); done() } })
  const app = Fastify({ logger: { level: 'info', stream } })
  t.teardown(() => app.close())
  await app.register(mcp, {
    auth: { authenticate: (request) => request.headers.authorization === 'Bearer good-token-123' ? { id: 'alice', scopes: [] } : null }
  })
  app.mcp.tool({ name: 'admin', description: 'Admins only', scopes: ['admin'] }, async () => 'ok')
  const send = async (h: Record<string, string>): Promise<number> => (await app.inject({ method: 'POST', url: '/mcp', headers: headers(null, h), payload: initializeBody() })).statusCode

  t.equal(await send({ authorization: 'Bearer secret-wrong-token-456' }), 401)
  t.equal(await send({ authorization: 'Bearer good-token-123', origin: 'https://evil.example' }), 403)
  const call = await app.inject({
    method: 'POST',
    url: '/mcp',
    headers: headers(null, { authorization: 'Bearer good-token-123', 'mcp-protocol-version': '2025-11-25' }),
    payload: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'admin', arguments: {} } }
  })
  t.equal(call.statusCode, 403, 'missing scope → 403')

  const refused = lines.filter(l => l.msg === 'MCP request refused')
  t.same(refused.map(l => [l.level, l.statusCode]), [[30, 401], [30, 403], [30, 403]], 'each at info')
  t.equal(refused[0].reason, 'authenticate returned no principal')
  t.match(refused[1].reason, /origin not allowed/)
  t.equal(refused[2].reason, 'insufficient_scope')
  const text = JSON.stringify(lines)
  t.notOk(text.includes('secret-wrong-token-456') || text.includes('good-token-123'), 'no token in any line')
})
