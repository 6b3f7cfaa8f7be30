/**
 * The `auth` option wired into the plugin: option validation, the metadata routes (and where they
 * go with a prefix), the 401/403 challenges, per-principal lists and hidden definitions on both
 * eras, cache scope, handles' update() of the access fields, and that `scopes` / `visible` never
 * reach a descriptor. Tokens come from the test's
 * authorization server (real keys, a real JWKS on 127.0.0.1).
 */
import t from 'tap'
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { hasScopes, type McpDecorator, type McpPluginOptions, type ResourceHandle, type ToolHandle } from '../../lib/index.js'
import { build, call, initialize, post, request } from '../helpers/handshake-app.js'
import { modernHeaders, rpc } from '../helpers/wire.js'
import { makeKey, signToken, startAuthorizationServer } from './authorization-server.js'

const RESOURCE = 'https://mcp.example.com/mcp'
const MD = 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp'
const key = await makeKey('k1')
const as = await startAuthorizationServer([key])
t.teardown(as.close)

const authOpts = (extra: Record<string, unknown> = {}): McpPluginOptions => ({
  auth: { resource: RESOURCE, authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri } },
  ...extra
})

function shop (m: McpDecorator): void {
  m.tool({ name: 'browse', description: 'Lists items' }, async () => 'items')
  m.tool({ name: 'checkout', description: 'Buys', input: Type.Object({}), scopes: ['cart:read', 'cart:write'] }, async (_a, ctx) => `bought for ${ctx.principal?.id}`)
  m.tool({ name: 'purge', description: 'Deletes all', scopes: ['admin'], visible: (p) => hasScopes(p, 'admin') }, async () => 'purged')
  m.resource({ uri: 'shop://secret', name: 'secret', description: 'Admins only', visible: (p) => hasScopes(p, 'admin') }, async (uri) => ({ uri, text: 's' }))
  m.resource({ uri: 'shop://catalog', name: 'catalog', description: 'Everyone', scopes: ['cart:read'] }, async (uri) => ({ uri, text: 'c' }))
  m.prompt({ name: 'admin-help', description: 'Admins only', visible: (p) => hasScopes(p, 'admin') }, async () => [])
}

const bearer = async (sub: string, scope: string, extra: Partial<Parameters<typeof signToken>[0]> = {}): Promise<Record<string, string>> =>
  ({ authorization: `Bearer ${await signToken({ key, issuer: as.issuer, audience: RESOURCE, claims: { sub, scope }, ...extra })}` })

t.test('options: the resource-server form of auth is exclusive with authenticate and wwwAuthenticate; its fields are named', async t => {
  const rs = { resource: RESOURCE, authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri } }
  await t.rejects(build(t, { auth: { ...rs, authenticate: () => null } as never }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /"auth": .*resource, authorizationServers, jwt with authenticate/ })
  await t.rejects(build(t, { auth: { ...rs, wwwAuthenticate: 'Bearer' } as never }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /"auth\.wwwAuthenticate"/ })
  await t.rejects(build(t, { auth: { ...rs, required: 'yes' } as never }), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /"auth\.required"/ })
  await t.rejects(build(t, { auth: { resource: 'http://example.com/mcp', authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri } } }),
    { code: 'FST_ERR_MCP_INVALID_OPTION', message: /"auth\.resource"/ })
})

t.test('the metadata at both well-known forms, with the declared scopes', async t => {
  const app = await build(t, authOpts(), shop)
  for (const url of ['/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource']) {
    const res = await app.inject(url)
    t.equal(res.statusCode, 200, url)
    t.same(res.json(), { resource: RESOURCE, authorization_servers: [as.issuer], scopes_supported: ['cart:read', 'cart:write', 'admin'], bearer_methods_supported: ['header'] })
  }
})

t.test('401 without a token (challenge names the metadata), invalid_token for a bad one, on POST and GET', async t => {
  const app = await build(t, authOpts(), shop)
  const anon = await post(app, rpc('tools/list'), { headers: modernHeaders(rpc('tools/list')) })
  t.equal(anon.statusCode, 401)
  t.equal(anon.headers['www-authenticate'], `Bearer resource_metadata="${MD}"`)
  const expired = await post(app, rpc('tools/list'), { headers: { ...modernHeaders(rpc('tools/list')), ...await bearer('a', '', { expIn: -3600 }) } })
  t.equal(expired.statusCode, 401)
  t.match(expired.headers['www-authenticate'], /^Bearer error="invalid_token", error_description="The access token expired", resource_metadata="/)
  t.match(expired.json(), { id: null, error: { code: -32600, data: { error: 'invalid_token' } } })
  const get = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': 'x', authorization: 'Bearer x.y.z' } })
  t.equal(get.statusCode, 401)
})

t.test('2026-07-28: lists per principal (private), 403 naming every scope, hidden = unknown', async t => {
  const app = await build(t, authOpts({ cache: { tools: { cacheScope: 'public' } } }), shop)
  const alice = await bearer('alice', 'cart:read')
  const send = async (body: Record<string, any>, auth: Record<string, string>): Promise<{ status: number, headers: Record<string, unknown>, json: Record<string, any> }> => {
    const res = await post(app, body, { headers: { ...modernHeaders(body), ...auth } })
    return { status: res.statusCode, headers: res.headers, json: res.json() }
  }
  const list = await send(rpc('tools/list'), alice)
  t.same(list.json.result.tools.map((x: { name: string }) => x.name), ['browse', 'checkout'])
  t.equal(list.json.result.cacheScope, 'private', 'a list that hides a tool is private even when configured public')

  const body = rpc('tools/call', { name: 'checkout', arguments: {} })
  const refused = await send(body, alice)
  t.equal(refused.status, 403)
  t.match(refused.headers['www-authenticate'], /error="insufficient_scope".*scope="cart:read cart:write", resource_metadata="/)
  t.equal(refused.json.id, body.id)
  const ok = await send(rpc('tools/call', { name: 'checkout', arguments: {} }), await bearer('alice', 'cart:read cart:write'))
  t.equal(ok.status, 200)
  t.match(ok.json.result.content, [{ text: 'bought for alice' }])

  const hidden = await send(rpc('tools/call', { name: 'purge', arguments: {} }, { id: 1 }), alice)
  const missing = await send(rpc('tools/call', { name: 'nosuch', arguments: {} }, { id: 1 }), alice)
  t.equal(hidden.status, missing.status)
  t.same(JSON.parse(JSON.stringify(hidden.json).replace('purge', 'X')), JSON.parse(JSON.stringify(missing.json).replace('nosuch', 'X')))
  const admin = await send(rpc('tools/call', { name: 'purge', arguments: {} }), await bearer('root', 'admin'))
  t.match(admin.json.result.content, [{ text: 'purged' }])

  const resources = await send(rpc('resources/list'), alice)
  t.same(resources.json.result.resources, [{ uri: 'shop://catalog', name: 'catalog', description: 'Everyone' }], 'no scopes or visible in descriptors')
  const secret = await send(rpc('resources/read', { uri: 'shop://secret' }, { id: 2 }), alice)
  const nothing = await send(rpc('resources/read', { uri: 'shop://none' }, { id: 2 }), alice)
  t.same(JSON.parse(JSON.stringify(secret.json).replaceAll('shop://secret', 'X')), JSON.parse(JSON.stringify(nothing.json).replaceAll('shop://none', 'X')))
  const read = await send(rpc('resources/read', { uri: 'shop://catalog' }), alice)
  t.equal(read.json.result.cacheScope, 'private', 'a read with a rule is private')
  const prompts = await send(rpc('prompts/list'), alice)
  t.same(prompts.json.result.prompts, [])
})

t.test('handshake era: the same decisions inside a session; a batch-free 403 under the id', async t => {
  const app = await build(t, authOpts(), shop)
  const alice = await bearer('alice', 'cart:read')
  const session = await initialize(app, { headers: alice })
  const list = await call(app, session, 'tools/list', {}, { headers: alice })
  t.same(list.result.tools.map((x: { name: string }) => x.name), ['browse', 'checkout'])
  const refused = await request(app, session, 'tools/call', { name: 'checkout', arguments: {} }, { headers: alice, id: 77 })
  t.equal(refused.statusCode, 403)
  t.match(refused.headers['www-authenticate'], /scope="cart:read cart:write"/)
  t.equal(refused.json().id, 77)
  const hidden = await call(app, session, 'tools/call', { name: 'purge', arguments: {} }, { headers: alice })
  t.match(hidden.error, { code: -32602, message: 'Invalid params: unknown tool "purge"' })
  const bob = await bearer('bob', 'cart:read')
  const stolen = await request(app, session, 'tools/list', {}, { headers: bob })
  t.equal(stolen.statusCode, 404, 'the session is bound to the verified sub')
})

t.test('a prefix: the endpoint moves, the metadata stays at the host root with the path inserted (RFC 9728 §3.1)', async t => {
  const resource = 'https://mcp.example.com/api/mcp'
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(mcp, { prefix: '/api', auth: { resource, authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri } } })
  shop(app.mcp)
  for (const url of ['/.well-known/oauth-protected-resource/api/mcp', '/.well-known/oauth-protected-resource']) {
    const res = await app.inject(url)
    t.equal(res.statusCode, 200, url)
    t.equal(res.json().resource, resource)
  }
  t.equal((await app.inject('/api/.well-known/oauth-protected-resource/mcp')).statusCode, 404, 'not under the endpoint\'s prefix')
  t.equal((await app.inject('/.well-known/oauth-protected-resource/mcp')).statusCode, 404, 'not for a path the resource does not have')
  const anon = await post(app, rpc('tools/list'), { path: '/api/mcp', headers: modernHeaders(rpc('tools/list')) })
  t.equal(anon.statusCode, 401)
  t.equal(anon.headers['www-authenticate'], 'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/api/mcp"')
  const body = rpc('tools/list')
  const ok = await post(app, body, { path: '/api/mcp', headers: { ...modernHeaders(body), ...await bearer('alice', 'cart:read', { audience: resource }) } })
  t.equal(ok.statusCode, 200, 'a token for this resource')
})

t.test('a prefix of the enclosing context cannot reach the host root: refused, naming the way out', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await t.rejects(async () => {
    await app.register(async (v1) => {
      await v1.register(mcp, { auth: { resource: 'https://mcp.example.com/v1/mcp', authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri } } })
    }, { prefix: '/v1' })
    await app.ready()
  }, { code: 'FST_ERR_MCP_INVALID_OPTION', message: /"auth".*context prefix "\/v1".*\/\.well-known\/oauth-protected-resource\/v1\/mcp.*prefix: "\/v1\// })
})

t.test('auth.resource naming another path than the endpoint is warned about at start-up', async t => {
  const lines: Array<Record<string, unknown>> = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (l: string) => { lines.push(JSON.parse(l)) } } } })
  t.teardown(() => app.close())
  await app.register(mcp, { prefix: '/api', auth: { resource: RESOURCE, authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri } } })
  await app.ready()
  t.match(lines, [{ level: 40, resource: RESOURCE, endpoint: '/api/mcp', msg: /auth\.resource names another path/ }])
})

t.test('handles: update() takes scopes and visible, validated; a refused update changes nothing', async t => {
  let report!: ToolHandle
  let secret!: ResourceHandle
  const app = await build(t, authOpts(), (m) => {
    report = m.tool({ name: 'report', description: 'Reports' }, async () => 'r')
    secret = m.resource({ uri: 'shop://report', name: 'report', description: 'Report' }, async (uri) => ({ uri, text: 'r' }))
  })
  const alice = await bearer('alice', 'cart:read')
  const send = async (body: Record<string, any>, auth = alice): Promise<{ status: number, headers: Record<string, unknown>, json: Record<string, any> }> => {
    const res = await post(app, body, { headers: { ...modernHeaders(body), ...auth } })
    return { status: res.statusCode, headers: res.headers, json: res.json() }
  }
  const names = async (): Promise<string[]> => (await send(rpc('tools/list'))).json.result.tools.map((x: { name: string }) => x.name)
  t.same(await names(), ['report'])
  report.update({ visible: (p) => hasScopes(p, 'admin') })
  t.same(await names(), [], 'hidden by update()')
  t.throws(() => { report.update({ scopes: ['two words'] }) }, { code: 'FST_ERR_MCP_INVALID_DEFINITION', message: /"report": scopes must be/ })
  t.throws(() => { report.update({ visible: true as never }) }, { code: 'FST_ERR_MCP_INVALID_DEFINITION', message: /visible must be a function/ })
  t.same(await names(), [], 'a refused update left it hidden')
  report.update({ visible: undefined, scopes: ['reports'] })
  t.same(await names(), ['report'], 'visible again, now scoped')
  const refused = await send(rpc('tools/call', { name: 'report', arguments: {} }))
  t.equal(refused.status, 403)
  t.match(refused.headers['www-authenticate'], /scope="reports"/)
  t.same((await app.inject('/.well-known/oauth-protected-resource/mcp')).json().scopes_supported, ['reports'], 'the metadata follows')
  report.disable()
  t.same((await app.inject('/.well-known/oauth-protected-resource/mcp')).json().scopes_supported, undefined, 'a disabled tool declares nothing')

  secret.update({ visible: () => false, description: 'Hidden report' })
  t.same((await send(rpc('resources/list'))).json.result.resources, [])
  const read = await send(rpc('resources/read', { uri: 'shop://report' }))
  t.match(read.json.error, { code: -32602, message: 'Resource not found' })
  secret.update({ visible: undefined })
  t.same((await send(rpc('resources/list'))).json.result.resources, [{ uri: 'shop://report', name: 'report', description: 'Hidden report' }], 'no access fields in the descriptor after update()')
})

t.test('2026-07-28: a hidden tool\'s parameter headers are not checked: it answers as an unknown tool', async t => {
  const app = await build(t, authOpts(), (m) => {
    m.tool({ name: 'vault', description: 'Per region', input: Type.Object({ region: Type.String({ 'x-mcp-header': 'Region' }) }), visible: (p) => hasScopes(p, 'admin') }, async () => 'v')
  })
  const alice = await bearer('alice', 'cart:read')
  const send = async (name: string): Promise<{ status: number, json: Record<string, any> }> => {
    const body = rpc('tools/call', { name, arguments: { region: 'eu' } }, { id: 5 })
    const res = await post(app, body, { headers: { ...modernHeaders(body), ...alice } })
    return { status: res.statusCode, json: res.json() }
  }
  const hidden = await send('vault')
  const missing = await send('nosuch')
  t.equal(hidden.status, missing.status)
  t.same(JSON.parse(JSON.stringify(hidden.json).replace('vault', 'X')), JSON.parse(JSON.stringify(missing.json).replace('nosuch', 'X')))
  const body = rpc('tools/call', { name: 'vault', arguments: { region: 'eu' } })
  const admin = await post(app, body, { headers: { ...modernHeaders(body), ...await bearer('root', 'admin') } })
  t.equal(admin.statusCode, 400, 'the admin, who sees it, is held to its headers')
})

t.test('prompts and completion: hidden is unknown on both eras', async t => {
  const app = await build(t, authOpts(), (m) => {
    m.prompt({ name: 'admin-help', description: 'Admins only', arguments: [{ name: 'topic' }], complete: { topic: () => ['billing'] }, visible: (p) => hasScopes(p, 'admin') }, async () => [])
    m.resourceTemplate({ uriTemplate: 'shop://orders/{id}', name: 'order', description: 'Orders', complete: { id: () => ['1'] }, visible: (p) => hasScopes(p, 'admin') }, async (uri) => ({ uri, text: 'o' }))
  })
  const alice = await bearer('alice', 'cart:read')
  const root = await bearer('root', 'admin')
  const modern = async (body: Record<string, any>, auth: Record<string, string>): Promise<Record<string, any>> =>
    (await post(app, body, { headers: { ...modernHeaders(body), ...auth } })).json()
  t.match((await modern(rpc('prompts/get', { name: 'admin-help' }), alice)).error, { code: -32602, message: 'Invalid params: unknown prompt "admin-help"' })
  t.match((await modern(rpc('completion/complete', { ref: { type: 'ref/prompt', name: 'admin-help' }, argument: { name: 'topic', value: '' } }), alice)).error,
    { code: -32602, message: 'Invalid params: unknown prompt "admin-help"' })
  t.match((await modern(rpc('completion/complete', { ref: { type: 'ref/resource', uri: 'shop://orders/{id}' }, argument: { name: 'id', value: '' } }), alice)).error,
    { code: -32602, message: 'Invalid params: unknown resource template "shop://orders/{id}"' })
  t.same((await modern(rpc('resources/templates/list'), alice)).result.resourceTemplates, [])
  t.equal((await modern(rpc('resources/templates/list'), alice)).result.cacheScope, 'private')
  t.match((await modern(rpc('resources/read', { uri: 'shop://orders/7' }), alice)).error, { code: -32602, message: 'Resource not found' })
  t.same((await modern(rpc('completion/complete', { ref: { type: 'ref/prompt', name: 'admin-help' }, argument: { name: 'topic', value: '' } }), root)).result.completion.values, ['billing'])

  const session = await initialize(app, { headers: alice })
  t.same((await call(app, session, 'prompts/list', {}, { headers: alice })).result.prompts, [])
  t.match((await call(app, session, 'prompts/get', { name: 'admin-help' }, { headers: alice })).error, { code: -32602, message: 'Invalid params: unknown prompt "admin-help"' })
  t.match((await call(app, session, 'resources/read', { uri: 'shop://orders/7' }, { headers: alice })).error, { code: -32002, message: 'Resource not found' })
  t.match((await call(app, session, 'completion/complete', { ref: { type: 'ref/prompt', name: 'admin-help' }, argument: { name: 'topic', value: '' } }, { headers: alice })).error,
    { code: -32602, message: 'Invalid params: unknown prompt "admin-help"' })
})

t.test('a 2025-03-26 batch: one 403 naming every scope its requests need, id null', async t => {
  const app = await build(t, authOpts(), shop)
  const alice = await bearer('alice', 'cart:read')
  const session = await initialize(app, { version: '2025-03-26', headers: alice })
  const batch = [
    { jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'browse', arguments: {} } },
    { jsonrpc: '2.0', id: 'b', method: 'resources/read', params: { uri: 'shop://catalog' } },
    { jsonrpc: '2.0', id: 'c', method: 'tools/call', params: { name: 'checkout', arguments: {} } }
  ]
  const res = await post(app, batch, { session, headers: alice })
  t.equal(res.statusCode, 403)
  t.match(res.headers['www-authenticate'], /error="insufficient_scope".*scope="cart:read cart:write", resource_metadata="/)
  t.match(res.json(), { id: null, error: { code: -32600, data: { scope: 'cart:read cart:write' } } })
  const allowed = await post(app, batch.slice(0, 2), { session, headers: alice })
  t.equal(allowed.statusCode, 200)
  t.equal((allowed.json() as unknown[]).length, 2)
})

t.test('a custom auth.authenticate whose principals carry scopes: the same gate, a plain Bearer challenge', async t => {
  const app = await build(t, { auth: { authenticate: (r) => ({ id: 'u', scopes: String(r.headers['x-scopes'] ?? '').split(' ') }) } }, shop)
  const body = rpc('tools/call', { name: 'checkout', arguments: {} })
  const refused = await post(app, body, { headers: { ...modernHeaders(body), 'x-scopes': 'cart:read' } })
  t.equal(refused.statusCode, 403)
  t.equal(refused.headers['www-authenticate'], 'Bearer error="insufficient_scope", error_description="The access token lacks a scope this request needs", scope="cart:read cart:write"')
  const ok = await post(app, body, { headers: { ...modernHeaders(body), 'x-scopes': 'cart:read cart:write' } })
  t.match(ok.json().result.content, [{ text: 'bought for u' }])
})
