import t from 'tap'
import { build, registerError } from '../helpers/handshake-app.js'
import { headers, initializeBody } from '../helpers/wire.js'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

t.test('invalid options fail at register time, naming the option', async (t) => {
  const cases: Array<[string, unknown]> = [
    ['path', { path: 'mcp' }],
    ['path', { path: 42 }],
    ['serverInfo', { serverInfo: { name: 'x' } }],
    ['serverInfo', { serverInfo: 'x' }],
    ['instructions', { instructions: 7 }],
    ['sessions.gcDivisor', { sessions: { gcDivisor: 0 } }],
    ['sessions.gcProbability', { sessions: { gcProbability: -1 } }],
    ['sessions.gcProbability', { sessions: { gcProbability: Number.NaN } }],
    ['sessions.store', { sessions: { store: {} } }],
    ['sessions.lock', { sessions: { lock: { acquire () {} } } }],
    ['sessions.lock', { sessions: { lock: true } }],
    ['sessions.lock', { sessions: { lock: null } }],
    ['sessions.cancelGraceMs', { sessions: { cancelGraceMs: -1 } }],
    ['sessions.cancelGraceMs', { sessions: { cancelGraceMs: 1.5 } }],
    ['sessions.cancelGraceMs', { sessions: { cancelGraceMs: 3_600_001 } }],
    ['bodyLimit', { bodyLimit: 0 }],
    ['bodyLimit', { bodyLimit: 1.5 }],
    ['bodyLimit', { bodyLimit: '1mb' }],
    ['allowedOrigins', { allowedOrigins: 'http://localhost' }],
    ['allowedOrigins', { allowedOrigins: [1] }],
    ['allowedHosts', { allowedHosts: 'localhost' }],
    ['auth', { auth: 'yes' }],
    ['auth.authenticate', { auth: { authenticate: 'yes' } }],
    ['auth.required', { auth: { authenticate: () => null, required: 'yes' } }],
    ['auth.wwwAuthenticate', { auth: { authenticate: () => null, wwwAuthenticate: 1 } }],
    ['auth', { auth: { authenticate: () => null, verify: () => null } }],
    ['auth.realm', { auth: { authenticate: () => null, realm: 'x' } }],
    ['clientRequestTimeoutMs', { clientRequestTimeoutMs: 0 }],
    ['keepAliveIntervalMs', { keepAliveIntervalMs: -1 }],
    ['retryIntervalMs', { retryIntervalMs: -5 }],
    ['pageSize', { pageSize: 0 }],
    ['maxPendingClientRequests', { maxPendingClientRequests: 0 }],
    ['bus', { bus: {} }],
    ['eventLog.store', { eventLog: { store: {} } }]
  ]
  for (const [name, opts] of cases) {
    const err = await registerError(opts) as { code?: string, message?: string } | null
    t.equal(err?.code, 'FST_ERR_MCP_INVALID_OPTION', `${JSON.stringify(opts)} is refused`)
    t.match(err?.message, `"${name}"`, `the error names ${name}`)
  }
  // Valid edge values are accepted.
  t.equal(await registerError({ sessions: { gcProbability: 0, gcDivisor: 1 }, keepAliveIntervalMs: 0, retryIntervalMs: 0 }), null)
  t.equal(await registerError({ sessions: { lock: false, cancelGraceMs: 0 } }), null)
  t.equal(await registerError({ allowedOrigins: () => true, allowedHosts: ['example.com'] }), null)
})

t.test('unknown option keys and malformed Redis URLs fail app.ready(), naming them', async (t) => {
  const unknown = await registerError({ pth: '/x', sessions: { lok: {}, gcDivisor: 2 }, redisPrefx: 'a:' }) as Error & { code?: string }
  t.equal(unknown?.code, 'FST_ERR_MCP_INVALID_OPTION')
  t.match(unknown?.message, /"pth", "redisPrefx", "sessions\.lok": unknown options/)
  for (const url of ['not a url', 'http://127.0.0.1:6379']) {
    const err = await registerError({ redis: url }) as Error & { code?: string }
    t.equal(err?.code, 'FST_ERR_MCP_INVALID_OPTION', `${url}: refused before any connection`)
    t.match(err?.message, '"redis"')
  }
  t.equal(await registerError({ logLevel: 'warn', prefix: '/api' }), null, 'Fastify\'s own register options are known')
})

t.test('a misspelt key inside tasks, eventLog, telemetry or auth.jwt fails app.ready(), naming it', async (t) => {
  const auth = { resource: 'https://mcp.example.com/mcp', authorizationServers: ['https://auth.example.com'] }
  const cases: Array<[string, Record<string, unknown>]> = [
    ['tasks.tll', { tasks: { tll: 5000 } }],
    ['tasks.maxPerPrinciple', { tasks: { ttlMs: 5000, maxPerPrinciple: 3 } }],
    ['eventLog.maxEvent', { eventLog: { maxEvent: 10 } }],
    ['telemetry.sessionID', { telemetry: { sessionID: 'raw' } }],
    ['auth.jwt.jwksURI', { auth: { ...auth, jwt: { jwksURI: 'https://auth.example.com/jwks' } } }],
    ['auth.jwt.clockTolerance', { auth: { ...auth, jwt: { jwksUri: 'https://auth.example.com/jwks', clockTolerance: 5 } } }]
  ]
  for (const [key, opts] of cases) {
    const err = await registerError(opts) as Error & { code?: string }
    t.equal(err?.code, 'FST_ERR_MCP_INVALID_OPTION', `${key}: refused`)
    t.match(err?.message, `"${key}"`, `${key}: named`)
  }
  const known = { tasks: { ttlMs: 5000, pollIntervalMs: 500, maxPerPrincipal: 3 }, eventLog: { maxEvents: 10, ttlMs: 1000 }, telemetry: { sessionId: 'raw' } }
  t.equal(await registerError(known), null, 'the known keys pass')
  t.equal(await registerError({ auth: { ...auth, jwt: { jwksUri: 'https://auth.example.com/jwks', issuer: 'https://auth.example.com', clockToleranceMs: 5000 } } }), null, 'auth.jwt\'s known keys pass')
})

t.test('serverInfo defaults to the app\'s package.json name and version', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'mcp-app-'))
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'my-shop', version: '4.2.0' }))
  const cwd = process.cwd()
  process.chdir(dir)
  let app
  try {
    app = await build(t)
  } finally {
    process.chdir(cwd)
    rmSync(dir, { recursive: true, force: true })
  }
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: headers(), payload: initializeBody({ id: 1 }) })
  t.same(res.json().result.serverInfo, { name: 'my-shop', version: '4.2.0' })
})

t.test('invalid definitions throw FST_ERR_MCP_INVALID_DEFINITION', async (t) => {
  const app = await build(t, {}, () => {})
  const m = app.mcp
  const h = async (): Promise<string> => 'x'
  const code = { code: 'FST_ERR_MCP_INVALID_DEFINITION' }
  t.throws(() => m.tool({ name: 'has space', description: 'd' }, h), code, 'bad tool name')
  t.throws(() => m.tool({ name: '', description: 'd' }, h), code, 'empty tool name')
  t.throws(() => m.tool({ name: 'x'.repeat(65), description: 'd' }, h), code, 'tool name too long')
  t.throws(() => m.tool({ name: 'nodesc' } as never, h), code, 'missing description')
  t.throws(() => m.tool({ name: 'nohandler', description: 'd' }, undefined as never), code, 'missing handler')
  t.throws(() => m.tool({ name: 'notobject', description: 'd', input: { type: 'string' } }, h), code, 'input not an object schema')
  t.throws(() => m.tool({ name: 'badschema', description: 'd', input: { type: 'object', properties: { a: { type: 'nope' } } } }, h), code, 'invalid schema')
  m.tool({ name: 'ok.tool/v1-x_y', description: 'd' }, h)
  t.throws(() => m.tool({ name: 'ok.tool/v1-x_y', description: 'd' }, h), code, 'duplicate tool')
  t.throws(() => m.resource({ uri: 'not a uri', name: 'n', description: 'd' }, async (uri) => ({ uri, text: '' })), code, 'bad resource uri')
  t.throws(() => m.resource({ uri: 'test://a', name: 'n' } as never, async (uri) => ({ uri, text: '' })), code, 'resource without description')
  m.resource({ uri: 'test://a', name: 'n', description: 'd' }, async (uri) => ({ uri, text: '' }))
  t.throws(() => m.resource({ uri: 'test://a', name: 'n', description: 'd' }, async (uri) => ({ uri, text: '' })), code, 'duplicate resource')
  t.throws(() => m.resourceTemplate({ uriTemplate: 'test://{a b}', name: 'n', description: 'd' }, async (uri) => ({ uri, text: '' })), code, 'bad template')
  t.throws(() => m.prompt({ name: 'p' } as never, async () => []), code, 'prompt without description')
  t.throws(() => m.prompt({ name: 'p', description: 'd', arguments: [{ name: '' }] }, async () => []), code, 'prompt argument without name')
  m.prompt({ name: 'p', description: 'd' }, async () => [])
  t.throws(() => m.prompt({ name: 'p', description: 'd' }, async () => []), code, 'duplicate prompt')
})

t.test('decorations', async (t) => {
  const app = await build(t)
  let seen: unknown = 'unset'
  let principal: unknown = 'unset'
  app.get('/other', async (request) => {
    seen = request.mcpSession
    principal = request.mcpPrincipal
    return { ok: true }
  })
  t.ok(app.hasDecorator('mcp'))
  t.ok(app.hasRequestDecorator('mcpSession'))
  t.ok(app.hasRequestDecorator('mcpPrincipal'))
  t.type(app.mcp.tool, 'function')
  t.ok(app.mcp.tools.has('echo'))
  const res = await app.inject({ method: 'GET', url: '/other' })
  t.equal(res.statusCode, 200)
  t.equal(seen, null, 'request.mcpSession is null on a non-MCP route')
  t.equal(principal, null, 'request.mcpPrincipal is null on a non-MCP route')
})

t.test('the plugin does not change the body parsing of other routes', async (t) => {
  const app = await build(t)
  app.post('/json', async (request) => ({ got: request.body }))
  const res = await app.inject({ method: 'POST', url: '/json', payload: { a: 1 } })
  t.equal(res.statusCode, 200)
  t.same(res.json(), { got: { a: 1 } })
})

t.test('custom path', async (t) => {
  const app = await build(t, { path: '/rpc' })
  const res = await app.inject({
    method: 'POST',
    url: '/rpc',
    headers: headers(),
    payload: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {} } }
  })
  t.equal(res.statusCode, 200)
  t.equal((await app.inject({ method: 'POST', url: '/mcp', payload: {} })).statusCode, 404)
})
