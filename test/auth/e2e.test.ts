/**
 * End to end over real HTTP: a minimal Fastify app that uses the auth pieces the way the plugin's
 * wiring will (INTEGRATION.md): the metadata routes, `authenticate` in front of an MCP-like POST
 * route with the routes' existing `auth.required` 401, the AuthError → response mapping, the scope
 * gate before dispatch, hidden tools filtered from `tools/list` and answered as unknown. A client
 * discovers the authorization server from the 401 the way MCP clients do, gets a token (signed by
 * the test's authorization server) and calls tools. The app stands behind a TLS proxy at
 * `https://mcp.example.com` (its resource identifier); the client talks to it on 127.0.0.1 and
 * follows URLs by their path.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify'
import type { McpPrincipal } from '../../lib/context.js'
import { accessRuleOf, hasScopes, visibleTo, type AccessRule, type AccessRuleSource, type AccessFields } from '../../lib/auth/access.js'
import { AuthError } from '../../lib/auth/bearer.js'
import { registerProtectedResourceMetadata } from '../../lib/auth/metadata.js'
import { resolveAuth, type ResourceServerOptions, type ResolvedAuth } from '../../lib/auth/resource-server.js'
import { ErrorCode, errorReply, errorResponse } from '../../lib/jsonrpc/errors.js'
import { makeKey, signToken, startAuthorizationServer, type AuthorizationServer } from './authorization-server.js'

interface Tool { name: string, description: string, access: AccessRule | undefined, run: (p: McpPrincipal | null) => string }

/** The registry side of the wiring: tools with their access rules; the gate's rule source. */
class Tools implements AccessRuleSource {
  readonly tools = new Map<string, Tool>()
  add (def: { name: string, description: string } & AccessFields, run: Tool['run']): this {
    this.tools.set(def.name, { name: def.name, description: def.description, access: accessRuleOf(def), run })
    return this
  }

  accessRule: AccessRuleSource['accessRule'] = (target) => target.kind === 'tool' ? this.tools.get(target.name)?.access : undefined
  dependsOnPrincipal (): boolean { return [...this.tools.values()].some(x => x.access?.visible !== undefined) }
  declaredScopes (): string[] { return [...this.tools.values()].flatMap(x => [...x.access?.scopes ?? []]) }
}

/** The app: what the plugin does once wired, in miniature (same status and header decisions). */
async function mcpApp (auth: ResolvedAuth, tools: Tools, required = true): Promise<{ app: FastifyInstance, base: string }> {
  const app = Fastify()
  registerProtectedResourceMetadata(app, { paths: auth.metadataPaths, document: () => auth.document(tools.declaredScopes()) })
  const send = (reply: FastifyReply, status: number, body: unknown, headers?: Record<string, string>): void => {
    if (headers !== undefined) reply.headers(headers)
    reply.code(status).type('application/json').send(JSON.stringify(body))
  }
  // routes.ts answerError, with the one line the integration adds: an AuthError keeps its headers.
  const answerError = (err: Error, id: string | number | null, reply: FastifyReply): void => {
    if (err instanceof AuthError) { send(reply, err.status, errorResponse(id, err.code, err.message, err.data), err.headers); return }
    const { status, body } = errorReply(err, id, { status: 500, log: app.log })
    send(reply, status, body)
  }
  app.setErrorHandler((err: Error, _req, reply) => { answerError(err, null, reply) })
  app.post('/mcp', async (request, reply) => {
    // routes.ts authenticator, unchanged: `auth.authenticate` is the resolved `authenticate`, `auth.challenge` the `wwwAuthenticate`.
    const principal = await auth.authenticate(request)
    if (principal === null && required) {
      send(reply, 401, errorResponse(null, ErrorCode.InvalidRequest, 'Unauthorized'), { 'www-authenticate': auth.challenge })
      return reply
    }
    const msg = request.body as { id: number, method: string, params?: Record<string, unknown> }
    try {
      auth.authorize([msg], principal, tools) // the gate, before dispatch
      let result: Record<string, unknown>
      if (msg.method === 'tools/list') {
        result = {
          tools: visibleTo(tools.tools.values(), principal, x => x.access).map(x => ({ name: x.name, description: x.description })),
          ttlMs: 60_000,
          cacheScope: tools.dependsOnPrincipal() ? 'private' : 'public'
        }
      } else if (msg.method === 'tools/call') {
        const name = msg.params?.name as string
        const tool = tools.tools.get(name)
        // methods.ts callTool: hidden is answered exactly as unknown.
        if (tool === undefined || !(tool.access?.visible === undefined || tool.access.visible(principal) === true)) {
          send(reply, 200, errorResponse(msg.id, ErrorCode.InvalidParams, `Invalid params: unknown tool "${name}"`))
          return reply
        }
        result = { content: [{ type: 'text', text: tool.run(principal) }] }
      } else {
        send(reply, 200, errorResponse(msg.id, ErrorCode.MethodNotFound, `Method not found: ${msg.method}`))
        return reply
      }
      send(reply, 200, { jsonrpc: '2.0', id: msg.id, result })
    } catch (err) {
      answerError(err as Error, msg.id, reply)
    }
    return reply
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  return { app, base: `http://127.0.0.1:${port}` }
}

const key = await makeKey('k1')
const as: AuthorizationServer = await startAuthorizationServer([key])
t.teardown(as.close)

const RESOURCE = 'https://mcp.example.com/mcp'

function shopTools (): Tools {
  return new Tools()
    .add({ name: 'browse', description: 'Lists items' }, () => 'items')
    .add({ name: 'checkout', description: 'Buys the cart', scopes: ['cart:read', 'cart:write'] }, (p) => `bought for ${String(p?.id)}`)
    .add({ name: 'purge', description: 'Deletes everything', scopes: ['admin'], visible: (p) => hasScopes(p, 'admin') }, () => 'purged')
}

async function start (t: Test, opts: Partial<ResourceServerOptions> = {}, required = true): Promise<string> {
  const fail = (name: string, why: string): never => { throw new Error(`${name}: ${why}`) }
  const base: ResourceServerOptions = { resource: RESOURCE, authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri } }
  const auth = resolveAuth({ ...base, ...opts }, fail)
  const { app, base: url } = await mcpApp(auth, shopTools(), required)
  t.teardown(async () => { await app.close() })
  return url
}

interface Reply { status: number, challenge: string | null, body: { id: unknown, result?: Record<string, unknown>, error?: { code: number, message: string, data?: Record<string, unknown> } } }

let nextId = 1
async function rpc (base: string, method: string, params: Record<string, unknown> | undefined, token?: string, raw?: string): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (raw !== undefined) headers.authorization = raw
  else if (token !== undefined) headers.authorization = `Bearer ${token}`
  const res = await fetch(`${base}/mcp`, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }) })
  return { status: res.status, challenge: res.headers.get('www-authenticate'), body: await res.json() as Reply['body'] }
}

async function token (claims: Record<string, unknown>, extra: Partial<Parameters<typeof signToken>[0]> = {}): Promise<string> {
  return await signToken({ key, issuer: as.issuer, audience: RESOURCE, claims, ...extra })
}

/** The parameters of a Bearer challenge. */
function params (challenge: string | null): Record<string, string> {
  const out: Record<string, string> = {}
  for (const m of (challenge ?? '').matchAll(/(\w+)="([^"]*)"/g)) out[m[1]] = m[2]
  return out
}

t.test('discovery: 401 → resource_metadata → metadata → authorization server → token → call', async t => {
  const base = await start(t)
  const anon = await rpc(base, 'tools/list', {})
  t.equal(anon.status, 401)
  t.same(anon.body, { jsonrpc: '2.0', id: null, error: { code: ErrorCode.InvalidRequest, message: 'Unauthorized' } })
  const challenge = params(anon.challenge)
  t.match(anon.challenge, /^Bearer /)
  t.notOk('error' in challenge, 'no error code without a token')
  const mdUrl = new URL(challenge.resource_metadata)
  t.equal(mdUrl.href, 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp')
  const md = await fetch(`${base}${mdUrl.pathname}`).then(async r => await r.json() as Record<string, unknown>)
  t.same(md, {
    resource: RESOURCE,
    authorization_servers: [as.issuer],
    scopes_supported: ['cart:read', 'cart:write', 'admin'],
    bearer_methods_supported: ['header']
  })
  const root = await fetch(`${base}/.well-known/oauth-protected-resource`).then(async r => await r.json() as Record<string, unknown>)
  t.same(root, md, 'the root form serves the same document')
  t.equal((md.authorization_servers as string[])[0], as.issuer, 'the client would now run OAuth against it')

  const tok = await token({ sub: 'alice', scope: 'cart:read cart:write' })
  const list = await rpc(base, 'tools/list', {}, tok)
  t.equal(list.status, 200)
  t.same((list.body.result?.tools as Array<{ name: string }>).map(x => x.name), ['browse', 'checkout'], 'purge is hidden from alice')
  t.equal(list.body.result?.cacheScope, 'private', 'the list depends on who asks')
  const bought = await rpc(base, 'tools/call', { name: 'checkout', arguments: {} }, tok)
  t.same(bought.body.result, { content: [{ type: 'text', text: 'bought for alice' }] })
})

t.test('missing scope → 403 insufficient_scope naming every scope of the tool, under the request id', async t => {
  const base = await start(t)
  const tok = await token({ sub: 'bob', scope: 'cart:read' })
  const res = await rpc(base, 'tools/call', { name: 'checkout', arguments: {} }, tok)
  t.equal(res.status, 403)
  const c = params(res.challenge)
  t.equal(c.error, 'insufficient_scope')
  t.equal(c.scope, 'cart:read cart:write')
  t.equal(c.resource_metadata, 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp')
  t.equal(res.body.id, nextId - 1, 'answered under the request\'s id')
  t.match(res.body.error, { code: ErrorCode.InvalidRequest, message: 'Forbidden: insufficient scope', data: { error: 'insufficient_scope', scope: 'cart:read cart:write' } })
  t.equal((await rpc(base, 'tools/call', { name: 'browse' }, tok)).status, 200, 'a tool without scopes still works')
  // Step up: a token with the named scopes.
  const stepped = await rpc(base, 'tools/call', { name: 'checkout' }, await token({ sub: 'bob', scope: c.scope }))
  t.equal(stepped.status, 200)
})

t.test('a hidden tool answers exactly like one that does not exist', async t => {
  const base = await start(t)
  const tok = await token({ sub: 'bob', scope: 'cart:read cart:write' })
  const hidden = await rpc(base, 'tools/call', { name: 'purge' }, tok)
  const missing = await rpc(base, 'tools/call', { name: 'nosuch' }, tok)
  t.equal(hidden.status, missing.status)
  t.equal(hidden.status, 200)
  t.equal(hidden.challenge, null, 'no 403: that would tell it exists')
  t.equal(hidden.body.error?.code, missing.body.error?.code)
  t.equal(hidden.body.error?.message.replace('purge', 'X'), missing.body.error?.message.replace('nosuch', 'X'))
  const adminTok = await token({ sub: 'root', scope: 'admin' })
  t.same((await rpc(base, 'tools/call', { name: 'purge' }, adminTok)).body.result, { content: [{ type: 'text', text: 'purged' }] })
  const adminList = await rpc(base, 'tools/list', {}, adminTok)
  t.same((adminList.body.result?.tools as Array<{ name: string }>).map(x => x.name), ['browse', 'checkout', 'purge'])
})

t.test('bad tokens → 401 invalid_token; malformed header → 400; the client gets a reason, not jose\'s text', async t => {
  const base = await start(t)
  const cases: Array<[string, Promise<string>]> = [
    ['expired', token({ sub: 'a' }, { expIn: -3600 })],
    ['wrong audience', token({ sub: 'a' }, { audience: 'https://other.example.com/mcp' })],
    ['wrong issuer', token({ sub: 'a' }, { issuer: 'https://evil.example' })],
    ['unknown key', makeKey('stranger').then(async k => await signToken({ key: k, issuer: as.issuer, audience: RESOURCE }))]
  ]
  for (const [what, tok] of cases) {
    const res = await rpc(base, 'tools/list', {}, await tok)
    t.equal(res.status, 401, what)
    t.equal(params(res.challenge).error, 'invalid_token', what)
    t.equal(params(res.challenge).resource_metadata, 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp', what)
    t.match(res.body, { id: null, error: { code: ErrorCode.InvalidRequest, message: 'Unauthorized', data: { error: 'invalid_token' } } }, what)
  }
  const malformed = await rpc(base, 'tools/list', {}, undefined, 'Bearer a b')
  t.equal(malformed.status, 400)
  t.equal(params(malformed.challenge).error, 'invalid_request')
})

t.test('JWKS down → 503 without a challenge (cold verifier); a client cannot fix it by re-authorizing', async t => {
  const gone = await startAuthorizationServer([key])
  const tok = await signToken({ key, issuer: gone.issuer, audience: RESOURCE })
  await gone.close()
  const base = await start(t, { authorizationServers: [gone.issuer], jwt: { jwksUri: gone.jwksUri } })
  const res = await rpc(base, 'tools/list', {}, tok)
  t.equal(res.status, 503)
  t.equal(res.challenge, null)
  t.same(res.body, { jsonrpc: '2.0', id: null, error: { code: ErrorCode.ServerError, message: 'Access token verification is unavailable.' } })
})

t.test('auth.required false: anonymous may list; a scoped tool asks an anonymous caller to authenticate (401 + scope)', async t => {
  const base = await start(t, {}, false)
  const list = await rpc(base, 'tools/list', {})
  t.equal(list.status, 200)
  t.same((list.body.result?.tools as Array<{ name: string }>).map(x => x.name), ['browse', 'checkout'])
  const call = await rpc(base, 'tools/call', { name: 'checkout' })
  t.equal(call.status, 401)
  t.same(params(call.challenge), { scope: 'cart:read cart:write', resource_metadata: 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp' })
  const bad = await rpc(base, 'tools/list', {}, 'not.a.jwt')
  t.equal(bad.status, 401, 'an invalid token is never downgraded to anonymous')
})
