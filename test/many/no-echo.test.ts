/**
 * A client that never sends back the `Mcp-Session-Id` `initialize` gave it (raw HTTP on
 * 2025-11-25), through two demo processes sharing one private redis-server behind a round-robin
 * proxy, with the Redis store and the Redis lock configured explicitly:
 *
 * - `tools/list` → 200; `basket_create`, then 30 parallel `basket_add` → 30 items (the handle's
 *   state is kept under the lock, across processes, without any session);
 * - a session-only tool (`counter_add`) → `isError` saying to send the id back;
 * - with `sessions.requireSessionId` (MCP_REQUIRE_SESSION_ID=1) → 400 as before.
 */
import t, { type Test } from 'tap'
import { startRedisServer } from '../helpers/redis-server.js'
import { post, send, type Reply } from '../helpers/http-client.js'
import { initializeBody, LEGACY, newId } from '../helpers/wire.js'
import { startProxy } from './fixtures/proxy.js'
import { startCluster } from '../concurrency/fixtures/cluster.js'

t.setTimeout(120_000)

const redisServer = await startRedisServer(t)
const env = { MCP_STORE: 'redis', MCP_LOCK: 'redis', REDIS_URL: redisServer.url, MCP_LOCK_TIMEOUT_MS: '20000' }
const [served, strict] = await Promise.all([
  startCluster(t, 2, env),
  startCluster(t, 1, { ...env, MCP_REQUIRE_SESSION_ID: '1' })
])
const proxy = await startProxy(t, served.map(p => p.url))

/** What a no-echo client sends: the version it negotiated, never the session id. */
const NO_ECHO = { 'mcp-protocol-version': LEGACY }

async function callTool (url: string, name: string, args: Record<string, unknown>): Promise<Reply> {
  return await post(url, { jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name, arguments: args } }, null, { headers: NO_ECHO })
}

/** initialize (its id is dropped), then notifications/initialized without it. */
async function handshake (t: Test, url: string): Promise<void> {
  const res = await send(url, initializeBody({ version: LEGACY }))
  t.equal(res.status, 200, 'initialize → 200')
  t.type(res.headers.get('mcp-session-id'), 'string', 'a session id is handed out (and never sent back)')
  await res.text()
  const ack = await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, null, { headers: NO_ECHO })
  t.equal(ack.status, 202, 'notifications/initialized without the id → 202')
}

t.test('a no-echo client through two processes: lists, 30 parallel basket_add keep 30 items, a session-only tool says why', async t => {
  await handshake(t, proxy.url)
  const list = await post(proxy.url, { jsonrpc: '2.0', id: newId(), method: 'tools/list' }, null, { headers: NO_ECHO })
  t.equal(list.status, 200, 'tools/list → 200')
  t.ok(list.last?.result?.tools?.some((tool: { name: string }) => tool.name === 'basket_add'))

  const created = await callTool(proxy.url, 'basket_create', {})
  const basket = created.last?.result?.structuredContent?.basket
  t.type(basket, 'string', 'basket_create → a handle')
  const adds = await Promise.all(Array.from({ length: 30 }, async (_, i) => await callTool(proxy.url, 'basket_add', { basket, item: `item-${i}`, delayMs: 5 })))
  t.same(adds.filter(r => r.status !== 200 || r.last?.result?.isError === true).map(r => r.text), [], 'every basket_add succeeded')
  const got = await callTool(proxy.url, 'basket_get', { basket })
  const items = got.last?.result?.structuredContent?.items as string[]
  t.equal(items.length, 30, '30 items')
  t.same([...items].sort(), Array.from({ length: 30 }, (_, i) => `item-${i}`).sort(), 'each once')

  const counter = await callTool(proxy.url, 'counter_add', {})
  t.equal(counter.status, 200, 'a session-only tool: never a 400 or 5xx')
  t.equal(counter.last?.result?.isError, true, 'isError')
  t.match(counter.last?.result?.content?.[0]?.text, /needs a session.*send back the Mcp-Session-Id header/)
})

t.test('with sessions.requireSessionId the same client gets 400', async t => {
  const url = strict[0]!.url
  const res = await send(url, initializeBody({ version: LEGACY }))
  t.equal(res.status, 200)
  await res.text()
  const list = await post(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, null, { headers: NO_ECHO })
  t.equal(list.status, 400)
  t.same(list.last, { jsonrpc: '2.0', id: 1, error: { code: -32600, message: 'Bad Request: Mcp-Session-Id header is required' } })
})
