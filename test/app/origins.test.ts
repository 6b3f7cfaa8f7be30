/**
 * One place to list origins, and the Host check behind a reverse proxy on the same machine.
 *
 * - An Origin the app's CORS plugin approved for this request (it echoed it in
 *   Access-Control-Allow-Origin before the route ran) is allowed without `allowedOrigins`.
 * - A request forwarded by a proxy the app trusts (`trustProxy`) is not held to the loopback Host
 *   list; with `allowedHosts` set, its forwarded host (`request.host`) is checked against it.
 * - The DNS-rebinding attack (a page under an attacker's name resolved to 127.0.0.1) still gets
 *   403, even when it forges the forwarding headers: its browser sends its Origin on POST and
 *   DELETE, and GET needs a session id.
 */
import t from 'tap'
import http from 'node:http'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import cors from '@fastify/cors'
import mcp, { type McpPluginOptions } from '../../lib/index.js'
import { ACCEPT, headers, initializeBody } from '../helpers/wire.js'

interface Built { app: FastifyInstance }

async function build (t: { teardown (fn: () => unknown): void }, o: {
  fastify?: FastifyServerOptions,
  plugin?: McpPluginOptions,
  before?: (app: FastifyInstance) => Promise<void>
} = {}): Promise<Built> {
  const app = Fastify({ logger: false, ...o.fastify })
  t.teardown(() => app.close())
  await o.before?.(app)
  await app.register(mcp, o.plugin ?? {})
  app.mcp.tool({ name: 'echo', description: 'Echoes' }, async () => 'ok')
  return { app }
}

const INIT = JSON.stringify(initializeBody({ id: 1 }))

async function init (app: FastifyInstance, extra: Record<string, string>, remoteAddress = '127.0.0.1'): Promise<number> {
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: headers(null, extra), payload: INIT, remoteAddress })
  return res.statusCode
}

t.test('CORS: an origin @fastify/cors approved is allowed without allowedOrigins', async (t) => {
  const { app } = await build(t, { before: async (app) => { await app.register(cors, { origin: ['https://app.example.com'] }) } })
  t.equal(await init(app, { origin: 'https://app.example.com' }), 200, 'approved by CORS → allowed')
  t.equal(await init(app, { origin: 'https://evil.example.com' }), 403, 'not approved → 403')
  t.equal(await init(app, { origin: 'http://localhost:5173' }), 200, 'the loopback default still applies')
  // The preflight is the CORS plugin's own answer.
  const pre = await app.inject({ method: 'OPTIONS', url: '/mcp', headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST' } })
  t.equal(pre.headers['access-control-allow-origin'], 'https://app.example.com')
})

t.test('CORS with origin "*" approves no particular origin: the MCP list still decides', async (t) => {
  const { app } = await build(t, { before: async (app) => { await app.register(cors) } })
  t.equal(await init(app, { origin: 'https://evil.example.com' }), 403)
})

t.test('CORS approval and allowedOrigins add up', async (t) => {
  const { app } = await build(t, {
    before: async (app) => { await app.register(cors, { origin: ['https://app.example.com'] }) },
    plugin: { allowedOrigins: ['https://admin.example.com'] }
  })
  t.equal(await init(app, { origin: 'https://app.example.com' }), 200)
  t.equal(await init(app, { origin: 'https://admin.example.com' }), 200)
  t.equal(await init(app, { origin: 'https://evil.example.com' }), 403)
})

const proxied = { host: 'shop.example.com', 'x-forwarded-for': '203.0.113.7', 'x-forwarded-host': 'shop.example.com', 'x-forwarded-proto': 'https' }

t.test('behind a trusted proxy on the same machine: a forwarded request is allowed', async (t) => {
  const { app } = await build(t, { fastify: { trustProxy: '127.0.0.1' } })
  t.equal(await init(app, proxied), 200, 'Host: shop.example.com via the proxy')
  t.equal(await init(app, { host: 'shop.example.com', 'x-forwarded-for': '203.0.113.7' }), 200, 'a proxy that keeps Host and sends only X-Forwarded-For')
  t.equal(await init(app, { ...proxied, origin: 'https://shop.example.com' }), 403, 'a browser\'s Origin still needs to be allowed')
  t.equal(await init(app, { host: 'shop.example.com' }), 403, 'not forwarded → the loopback Host check')
  t.equal(await init(app, proxied, '10.0.0.9'), 403, 'forwarding headers from an untrusted peer do not count')
})

t.test('without trustProxy, forwarding headers change nothing', async (t) => {
  const { app } = await build(t)
  t.equal(await init(app, proxied), 403)
})

t.test('behind a trusted proxy with allowedHosts: the forwarded host is checked', async (t) => {
  const { app } = await build(t, { fastify: { trustProxy: true }, plugin: { allowedHosts: ['shop.example.com'] } })
  t.equal(await init(app, proxied), 200)
  t.equal(await init(app, { ...proxied, 'x-forwarded-host': 'other.example.com' }), 403, 'another forwarded host → 403')
  t.equal(await init(app, { ...proxied, host: 'internal:3000', 'x-forwarded-host': 'shop.example.com' }), 200, 'the forwarded host counts, not the proxy\'s Host')
})

t.test('the Host check of one plugin instance never passes a Host for another', async (t) => {
  // The check remembers the last Host it passed (a client repeats it on every request): that
  // memory belongs to one instance's check, and a refused Host is never remembered.
  const open = await build(t, { plugin: { allowedHosts: ['shop.example.com'] } })
  const strict = await build(t)
  t.equal(await init(open.app, { host: 'shop.example.com' }), 200, 'allowed where it is listed')
  t.equal(await init(strict.app, { host: 'shop.example.com' }), 403, 'still refused where it is not')
  t.equal(await init(strict.app, { host: 'shop.example.com' }), 403, 'and again: a refusal is not remembered as a pass')
  t.equal(await init(strict.app, { host: 'localhost:3000' }), 200, 'the default loopback list')
  t.equal(await init(open.app, { host: 'evil.example.com' }), 403, 'another Host on the listing instance')
  t.equal(await init(open.app, { host: 'shop.example.com:443' }), 200, 'the listed Host with a port, after a refusal')
})

function rawRequest (port: number, method: string, extra: Record<string, string>, body?: string): Promise<{ status: number, body: string }> {
  return new Promise((resolve, reject) => {
    const h: Record<string, string | number> = { accept: method === 'GET' ? 'text/event-stream' : ACCEPT, ...extra }
    if (body !== undefined) { h['content-type'] = 'application/json'; h['content-length'] = Buffer.byteLength(body) }
    const req = http.request({ host: '127.0.0.1', port, path: '/mcp', method, headers: h }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { text += c })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

t.test('on a real loopback socket: the proxy case is allowed, the rebinding attack is not', async (t) => {
  const { app } = await build(t, {
    fastify: { trustProxy: 'loopback' },
    before: async (app) => { await app.register(cors, { origin: ['https://shop.example.com'] }) }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as { port: number }).port
  // The proxy (nginx on this machine) forwards the shop's browser traffic.
  const viaProxy = await rawRequest(port, 'POST', { ...proxied, origin: 'https://shop.example.com' }, INIT)
  t.equal(viaProxy.status, 200, 'forwarded, Origin approved by CORS')
  // A page at http://attacker.example:PORT whose name was rebound to 127.0.0.1: same-origin for the
  // browser, so it may add any X-Forwarded-* header without a preflight, but not change Origin.
  const attacker = `attacker.example:${port}`
  const plain = await rawRequest(port, 'POST', { host: attacker, origin: `http://${attacker}` }, INIT)
  t.equal(plain.status, 403, 'the rebinding attack: 403')
  const forged = await rawRequest(port, 'POST', { host: attacker, origin: `http://${attacker}`, 'x-forwarded-for': '203.0.113.7', 'x-forwarded-host': 'shop.example.com' }, INIT)
  t.equal(forged.status, 403, 'with forged forwarding headers: still 403 (Origin)')
  const del = await rawRequest(port, 'DELETE', { host: attacker, origin: `http://${attacker}`, 'x-forwarded-for': '203.0.113.7', 'mcp-session-id': 'x'.repeat(32) })
  t.equal(del.status, 403, 'DELETE carries Origin too')
  // A same-origin GET carries no Origin; it reaches nothing without a live session id.
  const get = await rawRequest(port, 'GET', { host: attacker, 'x-forwarded-for': '203.0.113.7' })
  t.equal(get.status, 405, 'GET without a session: nothing to read')
  const guessed = await rawRequest(port, 'GET', { host: attacker, 'x-forwarded-for': '203.0.113.7', 'mcp-session-id': 'A'.repeat(32) })
  t.equal(guessed.status, 404, 'GET with a guessed session id: 404')
})
