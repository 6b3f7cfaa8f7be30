/**
 * A 2026-07-28 POST's JSON answer as it goes on the wire: the exact body text (the server's
 * `_meta` last in the result, spliced in by `stringifyMessage`) and the exact Content-Type, for a
 * result and for a refusal, the same as before either was made faster.
 */
import t from 'tap'
import { build } from '../helpers/handshake-app.js'
import { modernHeaders, rpc } from '../helpers/wire.js'

t.test('a tool result: the body text and Content-Type, exactly', async (t) => {
  const app = await build(t, { serverInfo: { name: 'srv', version: '2.0.0' } })
  const body = rpc('tools/call', { name: 'echo', arguments: { text: 'hi' } }, { id: 'a' })
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: body })
  t.equal(res.statusCode, 200)
  t.equal(res.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(res.payload, '{"jsonrpc":"2.0","id":"a","result":{"content":[{"type":"text","text":"hi"}],"resultType":"complete",' +
    '"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"srv","version":"2.0.0"}}}}')
})

t.test('a result with its own _meta: merged, the server\'s last', async (t) => {
  const app = await build(t, { serverInfo: { name: 'srv', version: '2.0.0' } }, (m) => {
    m.tool({ name: 'own', description: 'Own _meta' }, async () => ({ content: [], _meta: { mine: 1 } }))
  })
  const body = rpc('tools/call', { name: 'own', arguments: {} }, { id: 1 })
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: body })
  t.equal(res.payload, '{"jsonrpc":"2.0","id":1,"result":{"content":[],"_meta":{"mine":1,"io.modelcontextprotocol/serverInfo":{"name":"srv","version":"2.0.0"}},"resultType":"complete"}}')
})

t.test('a refusal: the same Content-Type', async (t) => {
  const app = await build(t)
  const body = rpc('tools/call', { name: 'echo', arguments: { text: 'hi' } }, { id: 2 })
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: { ...modernHeaders(body), 'mcp-method': 'tools/list' }, payload: body })
  t.equal(res.statusCode, 400)
  t.equal(res.headers['content-type'], 'application/json; charset=utf-8')
  t.match(JSON.parse(res.payload), { jsonrpc: '2.0', id: 2, error: { code: -32020 } })
})
