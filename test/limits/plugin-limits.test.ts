/**
 * The limits wired into the plugin (option `limits`): both eras answer a refused
 * tools/call with 429 + Retry-After and the JSON-RPC error under the request's id; a batch member
 * is refused inside a 200 (and a client that accepts only SSE gets it as the stream's event);
 * unknown tools and other methods are never limited; limits on the tool definition and through
 * its handle's update(); invalid options name their path; with `redis`, instances share counters.
 */
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { Redis } from 'ioredis'
import type { ToolHandle } from '../../lib/index.js'
import { build, initialize, post } from '../helpers/handshake-app.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { SSE_ACCEPT, finalOf, modernHeaders, newId, rpc } from '../helpers/wire.js'
import { sleep } from '../helpers/time.js'

const limits = { default: { rate: { calls: 2, perMs: 60_000 } }, tools: { slow: { rate: null, concurrency: 1 } } }

async function app (t: Parameters<typeof build>[0]): Promise<Awaited<ReturnType<typeof build>>> {
  // Calls of one session at once (the concurrency limit): without the lock, which would queue them.
  return await build(t, { limits, sessions: { lock: false } }, (m) => {
    m.tool({ name: 'echo', description: 'Echo', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
    m.tool({ name: 'slow', description: 'Slow', input: Type.Object({}) }, async () => { await sleep(300); return 'done' })
    m.tool({ name: 'own', description: 'Own limits', input: Type.Object({}), limits: { rate: { calls: 1, perMs: 60_000 } } }, async () => 'ok')
    m.tool({ name: 'exempt', description: 'Exempt', input: Type.Object({}), limits: false }, async () => 'ok')
  })
}

t.test('2026-07-28: the third call is refused with 429, Retry-After and data', async t => {
  const a = await app(t)
  const send = async (name: string, args: Record<string, unknown> = {}): Promise<Awaited<ReturnType<typeof a.inject>>> => {
    const body = rpc('tools/call', { name, arguments: args })
    return await a.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: body })
  }
  t.equal((await send('echo', { text: 'a' })).statusCode, 200)
  t.equal((await send('echo', { text: 'b' })).statusCode, 200)
  const refused = await send('echo', { text: 'c' })
  t.equal(refused.statusCode, 429)
  t.match(refused.headers['retry-after'], /^\d+$/)
  t.ok(Number(refused.headers['retry-after']) >= 29 && Number(refused.headers['retry-after']) <= 30)
  t.match(refused.json(), { jsonrpc: '2.0', error: { code: -32000, data: { limit: 'rate', tool: 'echo' } } })
  t.equal(typeof refused.json().id, 'number', "under the request's id")
  t.equal((await send('nope')).statusCode, 200, 'an unknown tool is -32602, not limited')
  const list = rpc('tools/list')
  t.equal((await a.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(list), payload: list })).statusCode, 200, 'tools/list is not limited')
  t.equal((await send('own')).statusCode, 200)
  t.equal((await send('own')).statusCode, 429, "the definition's own limits")
  for (let i = 0; i < 5; i++) t.equal((await send('exempt')).statusCode, 200)
})

t.test('handshake era: 429 + Retry-After for a single request; concurrency per principal', async t => {
  const a = await app(t)
  const session = await initialize(a)
  const call = async (name: string): Promise<Awaited<ReturnType<typeof post>>> =>
    await post(a, { jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name, arguments: {} } }, { session })
  const [first, second] = await Promise.all([call('slow'), (async () => { await sleep(50); return await call('slow') })()])
  t.equal(first.statusCode, 200)
  t.equal(second.statusCode, 429)
  t.equal(second.headers['retry-after'], '1')
  t.match(second.json(), { error: { code: -32000, data: { limit: 'concurrency', tool: 'slow', retryAfterMs: 1000 } } })
  t.equal((await call('slow')).statusCode, 200, 'free again once the first finished')
})

t.test('a batch (2025-03-26): the refused member is an error inside a 200, no Retry-After', async t => {
  const a = await app(t)
  const session = await initialize(a, { version: '2025-03-26' })
  const batch = [1, 2, 3].map(i => ({ jsonrpc: '2.0', id: `b${i}`, method: 'tools/call', params: { name: 'echo', arguments: { text: String(i) } } }))
  const res = await post(a, batch, { session })
  t.equal(res.statusCode, 200)
  t.equal(res.headers['retry-after'], undefined)
  const answers = res.json() as Array<Record<string, any>>
  t.equal(answers.filter(r => r.result !== undefined).length, 2)
  t.match(answers.find(r => r.id === 'b3'), { error: { code: -32000, data: { limit: 'rate' } } })
})

t.test('invalid limits fail ready() naming the option; invalid definition limits fail tool()', async t => {
  await t.rejects(build(t, { limits: { default: { concurrency: 0 } } } as never), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /limits\.default\.concurrency/ })
  const a = await build(t, {}, () => {})
  t.throws(() => a.mcp.tool({ name: 'x', description: 'x', limits: { rate: { calls: 0, perMs: 1 } } }, async () => 'x'),
    { code: 'FST_ERR_MCP_INVALID_DEFINITION', message: /"x" limits\.rate\.calls/ })
})

t.test('handshake era, a client that accepts only SSE: the refusal is the stream\'s event, in a 200', async t => {
  const a = await app(t)
  const session = await initialize(a)
  const call = async (): Promise<Awaited<ReturnType<typeof post>>> =>
    await post(a, { jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'own', arguments: {} } }, { session, headers: { accept: SSE_ACCEPT } })
  t.equal((await call()).statusCode, 200)
  const refused = await call()
  t.equal(refused.statusCode, 200)
  t.match(String(refused.headers['content-type']), /^text\/event-stream/)
  t.equal(refused.headers['retry-after'], undefined)
  t.match(finalOf(refused), { error: { code: -32000, data: { limit: 'rate', tool: 'own' } } })
})

t.test('handles: update() takes limits, validated; the new limits apply at once', async t => {
  let handle!: ToolHandle
  const a = await build(t, {}, (m) => { handle = m.tool({ name: 'paid', description: 'Paid API' }, async () => 'ok') })
  const send = async (): Promise<number> => {
    const body = rpc('tools/call', { name: 'paid', arguments: {} })
    return (await a.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: body })).statusCode
  }
  t.equal(await send(), 200, 'no limits option, no definition limits: unlimited')
  handle.update({ limits: { rate: { calls: 1, perMs: 60_000 } } })
  t.equal(await send(), 200)
  t.equal(await send(), 429, "the definition's limits apply without a limits option")
  t.throws(() => { handle.update({ limits: { concurrency: 0 } }) }, { code: 'FST_ERR_MCP_INVALID_DEFINITION', message: /"paid" limits\.concurrency/ })
  t.equal(await send(), 429, 'a refused update changed nothing')
  handle.update({ limits: false })
  t.equal(await send(), 200, 'exempted')
  const listed = rpc('tools/list')
  const tools = (await a.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(listed), payload: listed })).json().result.tools
  t.same(Object.keys(tools[0]).sort(), ['description', 'inputSchema', 'name'], 'limits are never sent')
})

t.test('with redis: every instance counts the same calls, on the plugin\'s client, keys under <redis.prefix>rl:', async t => {
  const server = await startRedisServer(t)
  const prefix = `lim${Date.now()}:`
  const opts = { redis: { client: server.url, prefix }, limits: { default: { rate: { calls: 2, perMs: 60_000 } } } }
  const one = await build(t, opts, (m) => { m.tool({ name: 'echo', description: 'Echo' }, async () => 'ok') })
  const two = await build(t, opts, (m) => { m.tool({ name: 'echo', description: 'Echo' }, async () => 'ok') })
  const send = async (to: typeof one): Promise<number> => {
    const body = rpc('tools/call', { name: 'echo', arguments: {} })
    return (await to.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: body })).statusCode
  }
  t.equal(await send(one), 200)
  t.equal(await send(two), 200)
  t.equal(await send(one), 429, 'the other instance took the second token')
  const probe = new Redis(server.url)
  t.teardown(() => { probe.disconnect() })
  const keys = await probe.keys(`${prefix}*`)
  t.ok(keys.length > 0 && keys.every(k => k.startsWith(`${prefix}rl:{echo|a:`)), `limit keys: ${keys.join(', ')}`)
  await one.close()
  await two.close()
})
