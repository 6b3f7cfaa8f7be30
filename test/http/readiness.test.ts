/**
 * The readiness route (`readinessRoute`, docs/production.md#health-and-readiness): off unless
 * asked for; 200 `{ ready: true }` while the store answers; 503 `{ ready: false, reason }` with
 * Retry-After while the store fails or hangs (bounded) and while `app.close()` drains the
 * instance; a flood of probes asks the store once at a time, never once per probe.
 */
import t from 'tap'
import Fastify from 'fastify'
import type { AddressInfo } from 'node:net'
import mcp, { MemorySessionStore } from '../../lib/index.js'
import { PROBE_FRESH } from '../../lib/http/readiness.js'
import { build, noTools } from '../helpers/handshake-app.js'
import { until } from '../helpers/time.js'
import { headers, initializeBody } from '../helpers/wire.js'

/** A memory store whose `exists` fails, hangs or answers, and counts its calls. */
class ProbedStore extends MemorySessionStore {
  mode: 'ok' | 'fail' | 'hang' = 'ok'
  asked = 0
  override async exists (id: string): Promise<boolean> {
    this.asked++
    if (this.mode === 'fail') throw new Error('store down')
    if (this.mode === 'hang') return await new Promise<boolean>(() => {})
    return await super.exists(id)
  }
}

t.test('off by default; a bad path is refused at start', async t => {
  const app = await build(t, {}, noTools)
  t.equal((await app.inject({ method: 'GET', url: '/ready' })).statusCode, 404)
  const bad = Fastify({ logger: false })
  await t.rejects((async () => { await bad.register(mcp, { readinessRoute: 'ready' }); await bad.ready() })(), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /readinessRoute/ })
})

t.test('the store answering, failing, hanging, back', async t => {
  const store = new ProbedStore()
  const app = await build(t, { sessions: { store }, readinessRoute: '/ready' }, noTools)
  const ready = await app.inject({ method: 'GET', url: '/ready' })
  t.equal(ready.statusCode, 200)
  t.same(ready.json(), { ready: true })
  t.equal(ready.headers['cache-control'], 'no-store')

  store.mode = 'fail'
  await until(async () => (await app.inject({ method: 'GET', url: '/ready' })).statusCode === 503, { what: 'the failure to be seen' })
  const down = await app.inject({ method: 'GET', url: '/ready' })
  t.same(down.json(), { ready: false, reason: 'store_unavailable' })
  t.ok(Number(down.headers['retry-after']) >= 1, 'Retry-After')

  store.mode = 'hang'
  await new Promise(resolve => setTimeout(resolve, PROBE_FRESH + 50))
  const hung = await app.inject({ method: 'GET', url: '/ready' })
  t.same([hung.statusCode, hung.json()], [503, { ready: false, reason: 'store_unavailable' }], 'a store that does not answer: not ready, the probe bounded')

  store.mode = 'ok'
  await until(async () => (await app.inject({ method: 'GET', url: '/ready' })).statusCode === 200, { what: 'the store to be seen back' })
  t.pass('ready again')
})

t.test('a flood of probes asks the store once at a time', async t => {
  const store = new ProbedStore()
  const app = await build(t, { sessions: { store }, readinessRoute: '/ready' }, noTools)
  const before = store.asked
  const answers = await Promise.all(Array.from({ length: 200 }, async () => await app.inject({ method: 'GET', url: '/ready' })))
  t.ok(answers.every(a => a.statusCode === 200))
  t.ok(store.asked - before <= 2, `${store.asked - before} store calls for 200 probes`)
})

t.test('draining: not ready from the start of app.close()', async t => {
  const app = await build(t, { readinessRoute: '/ready', drainTimeoutMs: 5000 }, noTools, { return503OnClosing: false })
  let release!: () => void
  const held = new Promise<void>(resolve => { release = resolve })
  let entered!: () => void
  const inside = new Promise<void>(resolve => { entered = resolve })
  app.mcp.tool({ name: 'hold', description: 'Runs until released' }, async () => { entered(); await held; return 'done' })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  t.equal((await fetch(`${base}/ready`)).status, 200, 'ready before')
  const init = await fetch(`${base}/mcp`, { method: 'POST', headers: headers(), body: JSON.stringify(initializeBody()) })
  const session = { sid: init.headers.get('mcp-session-id') as string, version: (await init.json() as { result: { protocolVersion: string } }).result.protocolVersion }
  const running = fetch(`${base}/mcp`, {
    method: 'POST',
    headers: headers(session),
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'hold', arguments: {} } })
  })
  await inside
  const closing = app.close()
  await until(() => app.mcp.status().draining, { what: 'the drain to start' })
  const res = await fetch(`${base}/ready`)
  t.equal(res.status, 503, 'not ready while draining')
  t.same(await res.json(), { ready: false, reason: 'draining' })
  t.ok(Number(res.headers.get('retry-after')) >= 1)
  release()
  t.equal((await running).status, 200, 'the running request finished')
  await closing
})
