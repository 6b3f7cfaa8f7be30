/**
 * SIGTERM drains a demo process (examples/server.ts: `return503OnClosing: false`,
 * MCP_DRAIN_TIMEOUT_MS) on a private redis-server with the Redis store and lock:
 *
 * - a `counter_add {delayMs: 2000}` running when SIGTERM arrives answers 200 and its write is kept
 *   (read back through a new process on the same Redis), while a call arriving during the drain is
 *   refused with 503, `Retry-After`, `Connection: close` and a JSON-RPC error; the process exits
 *   and leaves no lease behind;
 * - a `slow_count` still streaming at the deadline ends with an error response as its last SSE
 *   event, not silence; the process logs the deadline once and exits.
 *
 * Exits are awaited with a generous bound (the drain timeout plus 15 s on a busy machine), never
 * timed against a threshold.
 */
import { Agent, request } from 'node:http'
import { Readable } from 'node:stream'
import t from 'tap'
import { Redis } from 'ioredis'
import { startRedisServer } from '../helpers/redis-server.js'
import { startDemo, type DemoProcess } from './fixtures/cluster.js'
import { callTool, counterIn, counterOf, initialize, readReply, send } from '../helpers/http-client.js'
import { SseReader } from '../helpers/sse.js'
import { until } from '../helpers/time.js'
import { headers, newId, type Session } from '../helpers/wire.js'

t.setTimeout(120_000)

const redisServer = await startRedisServer(t)
const redis = new Redis(redisServer.url)
t.teardown(async () => { await redis.quit().catch(() => redis.disconnect()) })
const base = { MCP_STORE: 'redis', MCP_LOCK: 'redis', REDIS_URL: redisServer.url }
const lockKey = (sid: string): string => `mcp:{${sid}}:lock`
const STOPPED = 'Server is shutting down: the request was stopped before it finished.'

/** Resolves once the process has exited (the bound only keeps a hung process from hanging the test). */
async function exited (p: DemoProcess, drainMs: number): Promise<void> {
  await until(() => p.exited, { timeout: drainMs + 15_000, what: `process ${p.pid} to exit` })
}

/** Resolves once the process logged a line matching `re`. */
async function logged (p: DemoProcess, re: RegExp): Promise<Record<string, any>> {
  let line: Record<string, any> | undefined
  await until(() => { line = p.logs.find(l => typeof l.msg === 'string' && re.test(l.msg)); return line !== undefined }, { what: `a log line ${String(re)}` })
  return line!
}

/** POSTs over `agent` (node:http), the answer as a fetch Response for the SSE reader. */
async function keptAlivePost (url: string, body: unknown, session: Session, agent: Agent): Promise<Response> {
  return await new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', agent, headers: headers(session) }, (res) => {
      resolve(new Response(Readable.toWeb(res) as ReadableStream, { status: res.statusCode }))
    })
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
}

t.test('SIGTERM: a running counter_add answers 200 and is kept; a call during the drain gets 503 + Retry-After', async t => {
  const [a, next] = await Promise.all([
    startDemo(t, { ...base, MCP_DRAIN_TIMEOUT_MS: '20000' }),
    startDemo(t, base)
  ])
  const s = await initialize(a.url)
  const running = callTool(a.url, s, 'counter_add', { by: 5, delayMs: 2000 })
  // The handler runs once its lease is taken.
  await until(async () => await redis.exists(lockKey(s.sid)) === 1, { what: 'the call to hold its lease' })
  const term = performance.now()
  a.signal('SIGTERM')
  await logged(a, /^draining/)

  const refused = await send(a.url, { jsonrpc: '2.0', id: 77, method: 'tools/call', params: { name: 'counter_add', arguments: {} } }, s)
  t.equal(refused.status, 503, 'a call arriving during the drain is refused')
  t.equal(refused.headers.get('retry-after'), '1')
  t.equal(refused.headers.get('connection'), 'close')
  t.same(await refused.json(), { jsonrpc: '2.0', id: 77, error: { code: -32000, message: 'Server is shutting down; retry on another instance.' } })

  const r = await running
  t.equal(r.status, 200, 'the running call completes')
  t.equal(counterIn(r), 5)
  await exited(a, 20_000)
  t.comment(`SIGTERM → exit: ${Math.round(performance.now() - term)} ms (the call had up to 2000 ms left)`)
  t.equal(await redis.exists(lockKey(s.sid)), 0, 'no lease left behind')
  t.equal(await counterOf(next.url, s), 5, 'the write is kept: read back through another process')
})

t.test('SIGTERM: a slow_count still streaming at the deadline ends with an error response; the process exits', async t => {
  const a = await startDemo(t, { ...base, MCP_DRAIN_TIMEOUT_MS: '500' })
  const s = await initialize(a.url)
  const id = newId()
  // Over a keep-alive agent that never drops an idle connection: the server must end it, or it
  // holds the process's close (fetch's own pool drops idle connections after 4 s).
  const agent = new Agent({ keepAlive: true })
  t.teardown(() => { agent.destroy() })
  const res = await keptAlivePost(a.url, {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name: 'slow_count', arguments: { steps: 1000, intervalMs: 100 }, _meta: { progressToken: 'p' } }
  }, s, agent)
  t.equal(res.status, 200)
  const sse = new SseReader(res, { timeout: 20_000 })
  await sse.waitForMessage(m => m.method === 'notifications/progress')
  const term = performance.now()
  a.signal('SIGTERM')
  await sse.waitClosed()
  t.same(sse.messages.at(-1), { jsonrpc: '2.0', id, error: { code: -32000, message: STOPPED } }, 'the stream ends with the error response')
  await exited(a, 500)
  t.comment(`SIGTERM → exit: ${Math.round(performance.now() - term)} ms (drain timeout 500 ms)`)
  t.equal(a.logs.filter(l => typeof l.msg === 'string' && l.msg.startsWith('drain deadline reached')).length, 1, 'the deadline is logged once')
  t.equal(await redis.exists(lockKey(s.sid)), 0, 'no lease left behind')
})

t.test('a JSON call still running at the deadline gets the error, not an empty 202', async t => {
  const a = await startDemo(t, { ...base, MCP_DRAIN_TIMEOUT_MS: '300' })
  const s = await initialize(a.url)
  const running = send(a.url, { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'counter_add', arguments: { delayMs: 30_000 } } }, s)
  await until(async () => await redis.exists(lockKey(s.sid)) === 1, { what: 'the call to hold its lease' })
  a.signal('SIGTERM')
  const r = await readReply(await running)
  t.equal(r.status, 503)
  t.same(r.last, { jsonrpc: '2.0', id: 5, error: { code: -32000, message: STOPPED } })
  await exited(a, 300)
})
