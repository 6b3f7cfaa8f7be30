import t from 'tap'
import http from 'node:http'
import { build, call, initialize, listen, post, request } from '../../helpers/handshake-app.js'
import { ACCEPT } from '../../helpers/wire.js'

t.test('invalid JSON → 400 -32700 with id null', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  for (const body of ['{"jsonrpc":"2.0","id":1,', 'not json', '']) {
    const res = await post(app, body, { session: s })
    t.equal(res.statusCode, 400, JSON.stringify(body))
    t.same(res.json(), { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error: the body is not valid JSON' } })
  }
})

t.test('invalid JSON-RPC structure → 400 -32600 echoing the readable id', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  const cases: Array<[unknown, unknown]> = [
    [{ jsonrpc: '1.0', id: 11, method: 'ping' }, 11],
    [{ jsonrpc: '2.0', id: 'abc', method: 5 }, 'abc'],
    [{ jsonrpc: '2.0', id: 12, method: 'ping', params: [1, 2] }, 12],
    [{ jsonrpc: '2.0', id: 13 }, 13],
    [{ jsonrpc: '2.0', id: { x: 1 }, method: 'ping' }, null],
    [{ jsonrpc: '2.0', id: 14, result: 'not an object' }, 14],
    [42, null],
    ['"a string"', null]
  ]
  for (const [body, id] of cases) {
    const res = await post(app, body, { session: s })
    t.equal(res.statusCode, 400, JSON.stringify(body))
    const json = res.json()
    t.equal(json.error.code, -32600, `${JSON.stringify(body)} → -32600`)
    t.equal(json.id, id, `${JSON.stringify(body)} → id ${JSON.stringify(id)}`)
  }
})

t.test('unknown method → 200 + -32601', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  const res = await request(app, s, 'no/such/method', {}, { id: 'u1' })
  t.equal(res.statusCode, 200)
  t.same(res.json(), { jsonrpc: '2.0', id: 'u1', error: { code: -32601, message: 'Method not found: no/such/method' } })
  // A feature without registrations is not advertised and its methods are unknown.
  const prompts = await call(app, s, 'prompts/list', {}, { id: 'u2' })
  t.equal(prompts.error.code, -32601)
})

t.test('Accept without text/event-stream → 406', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  for (const accept of ['application/json', 'text/html', '']) {
    const res = await post(app, { jsonrpc: '2.0', id: 1, method: 'ping' }, { session: s, headers: { accept } })
    t.equal(res.statusCode, 406, `Accept: ${accept}`)
    t.equal(res.json().error.code, -32000)
  }
  const init = await post(app, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {} } }, { headers: { accept: 'application/json' } })
  t.equal(init.statusCode, 406, 'initialize too')
  t.equal(init.headers['mcp-session-id'], undefined, 'no session minted')
  const get = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'application/json', 'mcp-session-id': s.sid } })
  t.equal(get.statusCode, 406, 'GET without text/event-stream → 406')
})

t.test('non-JSON Content-Type → 415', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'application/jsonx']) {
    const res = await post(app, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }), { session: s, headers: { 'content-type': ct } })
    t.equal(res.statusCode, 415, ct)
    t.equal(res.json().error.code, -32600)
  }
  const withCharset = await post(app, { jsonrpc: '2.0', id: 1, method: 'ping' }, { session: s, headers: { 'content-type': 'application/json; charset=utf-8' } })
  t.equal(withCharset.statusCode, 200, 'parameters are allowed')
})

t.test('body over bodyLimit → 413', async (t) => {
  const app = await build(t, { bodyLimit: 1024 })
  const s = await initialize(app)
  const big = await request(app, s, 'tools/call', { name: 'echo', arguments: { text: 'x'.repeat(2000) } })
  t.equal(big.statusCode, 413)
  t.equal(big.json().error.code, -32600)
  const small = await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'x'.repeat(100) } })
  t.equal(small.result.content[0].text, 'x'.repeat(100))
})

t.test('Origin: present and disallowed → 403', async (t) => {
  const app = await build(t)
  const s = await initialize(app)
  const evil = await request(app, s, 'ping', undefined, { headers: { origin: 'http://evil.example.com' } })
  t.equal(evil.statusCode, 403)
  t.equal(evil.json().error.code, -32600)
  t.equal(evil.json().id, null)
  for (const origin of ['http://localhost:3000', 'http://127.0.0.1', 'https://[::1]:8443']) {
    t.equal((await request(app, s, 'ping', undefined, { headers: { origin } })).statusCode, 200, `${origin} allowed by default`)
  }
  const get = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': s.sid, origin: 'http://evil.example.com' } })
  t.equal(get.statusCode, 403, 'GET too')
  const del = await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid, origin: 'http://evil.example.com' } })
  t.equal(del.statusCode, 403, 'DELETE too')
  t.equal((await request(app, s, 'ping')).statusCode, 200, 'the refused DELETE did not end the session')
  const init = await post(app, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {} } }, { headers: { origin: 'http://evil.example.com' } })
  t.equal(init.statusCode, 403, 'initialize too')
})

t.test('allowedOrigins list', async (t) => {
  const app = await build(t, { allowedOrigins: ['https://app.example.com/'] })
  const s = await initialize(app, { headers: { origin: 'https://app.example.com' } })
  t.equal((await request(app, s, 'ping', undefined, { headers: { origin: 'https://app.example.com' } })).statusCode, 200)
  t.equal((await request(app, s, 'ping', undefined, { headers: { origin: 'http://localhost' } })).statusCode, 403, 'the list replaces the loopback default')
  t.equal((await request(app, s, 'ping')).statusCode, 200, 'no Origin → allowed')
})

function rawPost (port: number, host: string, body: unknown, extra: Record<string, string> = {}): Promise<{ status: number, body: string }> {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body)
    const req = http.request({
      host: '127.0.0.1',
      port,
      path: '/mcp',
      method: 'POST',
      headers: { host, accept: ACCEPT, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...extra }
    }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { text += c })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
    })
    req.on('error', reject)
    req.end(payload)
  })
}

t.test('DNS rebinding: Host is checked on a loopback bind', async (t) => {
  const app = await build(t)
  const live = await listen(t, app)
  const port = Number(new URL(live.url).port)
  const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {} } }
  const evil = await rawPost(port, 'evil.example.com', init)
  t.equal(evil.status, 403, 'Host: evil.example.com → 403')
  t.equal(JSON.parse(evil.body).error.code, -32600)
  const evilBoth = await rawPost(port, 'evil.example.com', init, { origin: 'http://evil.example.com' })
  t.equal(evilBoth.status, 403)
  for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, 'localhost']) {
    const ok = await rawPost(port, host, init, { origin: `http://${host}` })
    t.equal(ok.status, 200, `Host: ${host} → 200`)
  }
  // Through inject (no socket address, treated as loopback) the same rule applies.
  const injected = await post(app, init, { headers: { host: 'evil.example.com' } })
  t.equal(injected.statusCode, 403)
})

t.test('allowedHosts extends the accepted Host values', async (t) => {
  const app = await build(t, { allowedHosts: ['mcp.internal:8080'] })
  const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {} } }
  t.equal((await post(app, init, { headers: { host: 'mcp.internal' } })).statusCode, 200)
  t.equal((await post(app, init, { headers: { host: 'localhost:1234' } })).statusCode, 200)
  t.equal((await post(app, init, { headers: { host: 'evil.example.com' } })).statusCode, 403)
})

t.test('auth.authenticate', async (t) => {
  const users: Record<string, string> = { 'token-alice': 'alice', 'token-bob': 'bob' }
  let seenPrincipal: unknown
  const app = await build(t, {
    auth: {
      wwwAuthenticate: 'Bearer realm="mcp"',
      authenticate: (request) => {
        const token = String(request.headers.authorization ?? '').replace(/^Bearer /, '')
        return users[token] === undefined ? null : { id: users[token] }
      }
    }
  }, (m) => {
    m.tool({ name: 'whoami', description: 'Who am I' }, async (_a, ctx) => {
      seenPrincipal = ctx.request.mcpPrincipal
      return ctx.principal?.id ?? 'nobody'
    })
  })
  const anon = await post(app, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {} } })
  t.equal(anon.statusCode, 401)
  t.equal(anon.headers['www-authenticate'], 'Bearer realm="mcp"')
  t.equal(anon.json().error.code, -32600)
  t.equal(anon.headers['mcp-session-id'], undefined)

  const alice = { authorization: 'Bearer token-alice' }
  const bob = { authorization: 'Bearer token-bob' }
  const s = await initialize(app, { headers: alice })
  const who = await call(app, s, 'tools/call', { name: 'whoami', arguments: {} }, { headers: alice })
  t.equal(who.result.content[0].text, 'alice')
  t.same(seenPrincipal, { id: 'alice' }, 'request.mcpPrincipal is set')

  const noAuth = await request(app, s, 'ping')
  t.equal(noAuth.statusCode, 401, 'every request is authenticated, the session id is not a credential')
  const stolen = await request(app, s, 'ping', undefined, { headers: bob, id: 'b' })
  t.equal(stolen.statusCode, 404, 'another principal does not see the session')
  t.equal(stolen.json().id, 'b')
  const stolenGet = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': s.sid, ...bob } })
  t.equal(stolenGet.statusCode, 404)
  const stolenDelete = await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': s.sid, ...bob } })
  t.equal(stolenDelete.statusCode, 404)
  t.equal((await request(app, s, 'ping', undefined, { headers: alice })).statusCode, 200, 'the owner still can')
})

t.test('auth.authenticate with auth.required false: anonymous sessions are not usable by a principal', async (t) => {
  const app = await build(t, {
    auth: { required: false, authenticate: (request) => request.headers['x-user'] === undefined ? null : { id: String(request.headers['x-user']) } }
  })
  const s = await initialize(app)
  t.equal((await request(app, s, 'ping')).statusCode, 200, 'anonymous is allowed')
  t.equal((await request(app, s, 'ping', undefined, { headers: { 'x-user': 'mallory' } })).statusCode, 404)
})
