/**
 * What one client can take of `subscriptions/listen` (2026-07-28) is bounded: streams per client
 * (per principal, or per remote address), the resource URIs a stream keeps and echoes, and a
 * reader that stops reading is disconnected and its slot freed.
 */
import t, { type Test } from 'tap'
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http'
import Fastify from 'fastify'
import mcp, { type McpDecorator, type McpPluginOptions } from '../../../lib/index.js'
import { build, listen, SECRET, type Live } from './fixtures/helper.js'
import { type SseReader } from '../../helpers/sse.js'
import { sleep, until } from '../../helpers/time.js'
import { modernHeaders as headersFor, rpc } from '../../helpers/wire.js'

/** The bounds docs/protocol-eras.md documents (lib/protocol/stateless/listen.ts). */
const MAX_LISTEN_URIS = 100
const MAX_LISTEN_URI_LENGTH = 2048

/** A server with tools and resources, so that every listen filter is honoured. */
function fixture (m: McpDecorator): void {
  m.tool({ name: 'echo', description: 'Echoes' }, async () => 'x')
  m.resource({ uri: 'test://r', name: 'r', description: 'A resource' }, async (uri) => ({ uri, text: '' }))
}

async function openListen (live: Live, id: string, headers: Record<string, string> = {}, notifications: Record<string, unknown> = { toolsListChanged: true }): Promise<Response> {
  return await live.post(rpc('subscriptions/listen', { notifications }, { id }), headers)
}

/** Opens `n` listen streams that must all be accepted; returns their readers. */
async function openMany (t: Test, live: Live, n: number, prefix: string, headers: Record<string, string> = {}): Promise<SseReader[]> {
  const readers: SseReader[] = []
  for (let i = 0; i < n; i++) {
    const res = await openListen(live, `${prefix}-${i}`, headers)
    t.equal(res.status, 200, `${prefix} listen ${i} accepted`)
    const r = live.reader(res)
    await r.waitFor(e => e.json?.method === 'notifications/subscriptions/acknowledged')
    readers.push(r)
  }
  return readers
}

/** Whether a listen stream was ended by the server with its final result. */
async function endedWithResult (r: SseReader, id: string): Promise<boolean> {
  await r.waitClosed()
  return r.messages.some(m => m.id === id && m.result?.resultType === 'complete')
}

async function refused429 (t: Test, res: Response, id: string, what: string): Promise<void> {
  t.equal(res.status, 429, what)
  if (res.status !== 429) { await res.body?.cancel(); return }
  const body = await res.json() as Record<string, any>
  t.equal(body.jsonrpc, '2.0')
  t.equal(body.id, id, 'under the request id')
  t.equal(body.error?.code, -32000)
  t.match(body.error?.message, /Too many listen streams for this client/)
}

t.test('listen.maxPerClient: per remote address without auth (request.ip, following trustProxy)', async (t) => {
  const app = await build(t, { plugin: { requestState: { secret: SECRET }, listen: { maxPerClient: 3 }, keepAliveIntervalMs: 0 }, fastify: { trustProxy: true } }, fixture)
  const live = await listen(t, app)
  await openMany(t, live, 3, 'a', { 'x-forwarded-for': '10.0.0.1' })
  await refused429(t, await openListen(live, 'a-over', { 'x-forwarded-for': '10.0.0.1' }), 'a-over', 'the 4th stream of one address → 429')
  // Another address (one proxy hop: trustProxy) has its own slots.
  await openMany(t, live, 3, 'b', { 'x-forwarded-for': '10.0.0.2' })
  t.equal(app.mcp.status().listenStreams, 6)

  // A closed stream frees its client's slot.
  const one = await openListen(live, 'c', { 'x-forwarded-for': '10.0.0.3' })
  const reader = live.reader(one)
  await reader.waitFor(e => e.json?.method === 'notifications/subscriptions/acknowledged')
  await reader.cancel()
  for (let i = 0; i < 100 && app.mcp.status().listenStreams > 6; i++) await sleep(20)
  t.equal(app.mcp.status().listenStreams, 6, 'the closed stream left the count')
  await refused429(t, await openListen(live, 'a-again', { 'x-forwarded-for': '10.0.0.1' }), 'a-again', 'the slot freed was 10.0.0.3\'s, not 10.0.0.1\'s')
  const c2 = await openListen(live, 'c3', { 'x-forwarded-for': '10.0.0.3' })
  t.equal(c2.status, 200)
  await live.reader(c2).cancel()
})

t.test('listen.maxPerClient: an IPv6 client is its /64, as for tool limits and task slots', async (t) => {
  const app = await build(t, { plugin: { requestState: { secret: SECRET }, listen: { maxPerClient: 2 }, keepAliveIntervalMs: 0 }, fastify: { trustProxy: true } }, fixture)
  const live = await listen(t, app)
  // Two streams from two addresses of one /64 take its two slots; a third address of it is refused.
  await openMany(t, live, 1, 'v6-a', { 'x-forwarded-for': '2001:db8:0:1::a' })
  await openMany(t, live, 1, 'v6-b', { 'x-forwarded-for': '2001:db8:0:1:ffff:1:2:3' })
  await refused429(t, await openListen(live, 'v6-c', { 'x-forwarded-for': '2001:db8:0:1::c' }), 'v6-c', 'a third address of the same /64 → 429')
  await openMany(t, live, 1, 'v6-other', { 'x-forwarded-for': '2001:db8:0:2::a' })
})

t.test('listen.maxPerClient: per principal with auth.authenticate; one principal cannot take every slot', async (t) => {
  const plugin: McpPluginOptions = {
    requestState: { secret: SECRET },
    listen: { max: 5, maxPerClient: 2 },
    keepAliveIntervalMs: 0,
    auth: {
      authenticate: (req) => {
        const token = req.headers.authorization?.replace(/^Bearer /, '')
        return token === undefined ? null : { id: token }
      }
    }
  }
  const app = await build(t, { plugin }, fixture)
  const live = await listen(t, app)
  const as = (who: string): Record<string, string> => ({ authorization: `Bearer ${who}` })
  const alice = await openMany(t, live, 2, 'alice', as('alice'))
  await refused429(t, await openListen(live, 'alice-over', as('alice')), 'alice-over', 'alice\'s 3rd → 429')
  // Same address, another principal: its own count.
  const bob = await openMany(t, live, 2, 'bob', as('bob'))
  await openMany(t, live, 1, 'carol', as('carol'))
  // Full: a principal holding none takes the place of the oldest stream of one holding the most.
  await openMany(t, live, 1, 'dave', as('dave'))
  t.ok(await endedWithResult(alice[0]!, 'alice-0'), 'alice\'s oldest stream ended with its final result')
  await openMany(t, live, 1, 'erin', as('erin'))
  t.ok(await endedWithResult(bob[0]!, 'bob-0'), 'then bob\'s (he held the most)')
  t.equal(alice[1]!.closed || bob[1]!.closed, false, 'their other streams stay')
  // Everyone holds one now: the process-wide cap applies, with its own message.
  const full = await openListen(live, 'frank', as('frank'))
  t.equal(full.status, 429)
  if (full.status === 429) t.match((await full.json() as Record<string, any>).error.message, /on this server/)
  else await full.body?.cancel()
  t.equal(app.mcp.status().listenStreams, 5)
})

t.test('clients holding several streams fill the process (issue 47: 100 addresses × 10): a client holding none still gets one, in place of the oldest of those holding the most', async (t) => {
  const app = await build(t, { plugin: { requestState: { secret: SECRET }, listen: { max: 20, maxPerClient: 4 }, keepAliveIntervalMs: 0 }, fastify: { trustProxy: true } }, fixture)
  const live = await listen(t, app)
  const from = (i: number): Record<string, string> => ({ 'x-forwarded-for': `10.0.1.${i}` })
  const filled: SseReader[][] = []
  for (let i = 0; i < 5; i++) filled.push(await openMany(t, live, 4, `full${i}`, from(i)))
  t.equal(app.mcp.status().listenStreams, 20, 'five addresses × four streams fill the process')
  await refused429(t, await openListen(live, 'full0-over', from(0)), 'full0-over', 'a client at its own cap is still refused as such')
  // Newcomers (one stream each) take places while some client holds two or more.
  for (let i = 0; i < 15; i++) await openMany(t, live, 1, `new${i}`, from(100 + i))
  t.equal(app.mcp.status().listenStreams, 20)
  await until(() => filled.flat().filter(r => r.closed).length >= 15, { what: 'the displaced streams to end' })
  const left = filled.map(streams => streams.filter(r => !r.closed).length)
  t.same(left, [1, 1, 1, 1, 1], 'each filling client kept one stream: its newest')
  t.ok(filled.every(streams => !streams[3]!.closed), 'the newest of each is the one kept')
  const over = await openListen(live, 'one-too-many', from(200))
  t.equal(over.status, 429, 'everyone holds one: no place left for another')
  if (over.status === 429) t.match((await over.json() as Record<string, any>).error.message, /on this server/)
  else await over.body?.cancel()
})

t.test('resourceSubscriptions: at most 100 URIs of at most 2048 characters; more → 400 -32602', async (t) => {
  const app = await build(t, { plugin: { requestState: { secret: SECRET }, keepAliveIntervalMs: 0 } }, fixture)
  const live = await listen(t, app)
  const uris = Array.from({ length: MAX_LISTEN_URIS }, (_, i) => `test://r/${i}`)
  uris[0] = `test://${'x'.repeat(MAX_LISTEN_URI_LENGTH - 'test://'.length)}`
  const ok = await openListen(live, 'max', {}, { resourceSubscriptions: uris })
  t.equal(ok.status, 200, 'exactly at both bounds: accepted')
  const reader = live.reader(ok)
  const ack = await reader.waitFor(e => e.json?.method === 'notifications/subscriptions/acknowledged')
  t.same(ack.json?.params.notifications.resourceSubscriptions, uris, 'echoed as asked')
  await reader.cancel()

  const cases: Array<[string, string[], RegExp]> = [
    ['one URI too many', [...uris, 'test://one-more'], /at most 100 URIs/],
    ['one URI one character too long', [`test://${'x'.repeat(MAX_LISTEN_URI_LENGTH - 'test://'.length + 1)}`], /at most 2048 characters/],
    ['a flood of URIs', Array.from({ length: 100_000 }, (_, i) => `u${i}`), /at most 100 URIs/]
  ]
  for (const [what, list, message] of cases) {
    const res = await openListen(live, what, {}, { resourceSubscriptions: list })
    t.equal(res.status, 400, what)
    if (res.status !== 400) { await res.body?.cancel(); continue }
    const body = await res.json() as Record<string, any>
    t.equal(body.id, what)
    t.equal(body.error.code, -32602)
    t.match(body.error.message, message)
  }
  for (let i = 0; i < 100 && app.mcp.status().listenStreams > 0; i++) await sleep(20)
  t.equal(app.mcp.status().listenStreams, 0, 'nothing was opened')
})

t.test('a listen reader that stops reading is disconnected and its stream dropped from the counts', async (t) => {
  const app = await build(t, { plugin: { requestState: { secret: SECRET }, keepAliveIntervalMs: 0, listen: { maxPerClient: 1 } } }, fixture)
  const live = await listen(t, app)
  const uri = `test://${'u'.repeat(2000)}`
  const body = rpc('subscriptions/listen', { notifications: { resourceSubscriptions: [uri] } }, { id: 'paused' })
  // A raw HTTP client that reads the headers, then nothing: the server's buffer for it only grows.
  let req!: ClientRequest
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    req = httpRequest(live.url, { method: 'POST', headers: headersFor(body) }, resolve)
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
  t.teardown(() => { req.destroy() })
  t.equal(res.statusCode, 200)
  res.pause()
  t.equal(app.mcp.status().listenStreams, 1)
  // Each update is ~2 KiB on the wire: push well past the writer's 4 MiB bound plus what the
  // kernel's socket buffers take.
  for (let i = 0; i < 40_000 && app.mcp.status().listenStreams > 0; i++) {
    app.mcp.resourceUpdated(uri)
    if (i % 500 === 499) await sleep(1)
  }
  t.equal(app.mcp.status().listenStreams, 0, 'dropped from the count')
  // Reading again, the client drains what was buffered and then finds the connection closed.
  const closed = new Promise<boolean>(resolve => {
    const timer = setTimeout(() => resolve(false), 10_000)
    res.once('close', () => { clearTimeout(timer); resolve(true) })
  })
  res.on('error', () => {})
  res.resume()
  t.ok(await closed, 'the server closed the connection')
  const next = await openListen(live, 'next')
  t.equal(next.status, 200, 'its client\'s slot is free again')
  await live.reader(next).cancel()
})

t.test('listen.maxPerClient is validated', async (t) => {
  for (const bad of [0, -1, 1.5, '10', null]) {
    const app = Fastify({ logger: false })
    const err = await app.register(mcp, { listen: { maxPerClient: bad as number } }).ready().then(() => null, (e: unknown) => e) as { code?: string, message?: string } | null
    await app.close().catch(() => {})
    t.equal(err?.code, 'FST_ERR_MCP_INVALID_OPTION', `${JSON.stringify(bad)} is refused`)
    t.match(err?.message, '"listen.maxPerClient"')
  }
})
