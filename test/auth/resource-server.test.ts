/**
 * The `auth` option (lib/auth/resource-server.ts) and the metadata routes (lib/auth/metadata.ts):
 * option validation through the plugin's `fail`, the Protected Resource Metadata document served
 * at both well-known forms by a real Fastify app, and `authenticate(request)` for each kind of
 * token, with the JWT verifier against a real JWKS and with a user's `verify`.
 */
import t from 'tap'
import Fastify, { type FastifyRequest } from 'fastify'
import type { McpPrincipal } from '../../lib/context.js'
import { AuthError } from '../../lib/auth/bearer.js'
import { metadataLocation, registerProtectedResourceMetadata } from '../../lib/auth/metadata.js'
import { resolveAuth, type ResourceServerOptions, type ResolvedAuth } from '../../lib/auth/resource-server.js'
import { makeKey, signToken, startAuthorizationServer } from './authorization-server.js'

const RESOURCE = 'https://mcp.example.com/mcp'
const MD = 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp'

const key = await makeKey('k1')
const as = await startAuthorizationServer([key])
t.teardown(as.close)

class OptionError extends Error {}
const fail = (name: string, why: string): never => { throw new OptionError(`${name}: ${why}`) }

function resolve (extra: Partial<ResourceServerOptions> = {}): ResolvedAuth {
  return resolveAuth({ resource: RESOURCE, authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri }, ...extra }, fail)
}

/** A request as `authenticate` reads it (headers and the logger), with the log lines kept. */
function request (authorization?: string): FastifyRequest & { lines: Array<[string, unknown]> } {
  const lines: Array<[string, unknown]> = []
  const log = { debug: (o: unknown) => lines.push(['debug', o]), error: (o: unknown) => lines.push(['error', o]) }
  return { headers: authorization === undefined ? {} : { authorization }, log, lines } as unknown as FastifyRequest & { lines: Array<[string, unknown]> }
}

async function refusal (p: Promise<unknown>): Promise<AuthError> {
  try { await p } catch (err) { if (err instanceof AuthError) return err; throw err }
  throw new Error('expected a refusal')
}

t.test('option validation names the option', async t => {
  const base: ResourceServerOptions = { resource: RESOURCE, authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri } }
  const bad = (o: unknown, re: RegExp): void => { t.throws(() => resolveAuth(o as ResourceServerOptions, fail), re, String(re)) }
  bad(null, /^auth: must be an object/)
  bad({ ...base, authorizationServer: 'x' }, /^auth\.authorizationServer: is not an auth option/)
  bad({ ...base, resource: 'mcp.example.com/mcp' }, /^auth\.resource: must be an absolute URL/)
  bad({ ...base, resource: 'http://mcp.example.com/mcp' }, /^auth\.resource: must be an https URL/)
  bad({ ...base, resource: `${RESOURCE}#x` }, /^auth\.resource: must not have a fragment/)
  bad({ ...base, resource: `${RESOURCE}?tenant=1` }, /^auth\.resource: must not have a query/)
  bad({ ...base, resource: 'https://mcp.example.com/:tenant/mcp' }, /^auth\.resource: path may only hold/)
  bad({ ...base, authorizationServers: [] }, /^auth\.authorizationServers: must be a non-empty array/)
  bad({ ...base, authorizationServers: ['http://idp.example.com'] }, /^auth\.authorizationServers\[0\]: must be an https URL/)
  bad({ ...base, jwt: undefined }, /^auth: needs exactly one of jwt/)
  bad({ ...base, verify: () => null }, /^auth: needs exactly one of jwt/)
  bad({ ...base, jwt: undefined, verify: 'x' }, /^auth\.verify: must be a function/)
  bad({ ...base, jwt: { jwksUri: as.jwksUri, algorithms: ['HS256'] } }, /^auth\.jwt: algorithms: "HS256" is not an asymmetric/)
  bad({ ...base, requiredScopes: ['a b'] }, /^auth\.requiredScopes: must be an array of scope tokens/)
  bad({ ...base, scopesSupported: 'a' }, /^auth\.scopesSupported/)
  bad({ ...base, metadata: { resource: 'x' } }, /^auth\.metadata\.resource: is set by the plugin/)
  bad({ ...base, metadataAtRoot: 'yes' }, /^auth\.metadataAtRoot: must be a boolean/)
  t.doesNotThrow(() => resolveAuth({ ...base, resource: 'http://127.0.0.1:3000/mcp' }, fail), 'http on loopback (development)')
})

t.test('resolved: metadata URL, paths, the 401 challenge; issuer and audience defaults', async t => {
  const auth = resolve()
  t.equal(auth.resource, RESOURCE)
  t.equal(auth.resourceMetadata, MD)
  t.same(auth.metadataPaths, ['/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource'])
  t.equal(auth.challenge, `Bearer resource_metadata="${MD}"`)
  t.equal(resolve({ requiredScopes: ['mcp'] }).challenge, `Bearer scope="mcp", resource_metadata="${MD}"`)
  t.same(metadataLocation('https://mcp.example.com', true), { url: 'https://mcp.example.com/.well-known/oauth-protected-resource', paths: ['/.well-known/oauth-protected-resource'] })
  t.same(metadataLocation('https://mcp.example.com/a/mcp', false).paths, ['/.well-known/oauth-protected-resource/a/mcp'])
  // Defaults: the issuer is the authorization server, the audience the resource.
  const ok = await auth.authenticate(request(`Bearer ${await signToken({ key, issuer: as.issuer, audience: RESOURCE })}`))
  t.equal(ok?.id, 'user-1')
})

t.test('the metadata document at both well-known forms', async t => {
  const auth = resolve({ scopesSupported: undefined, requiredScopes: ['mcp'], metadata: { resource_name: 'Shop', resource_documentation: 'https://docs.example.com' } })
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  registerProtectedResourceMetadata(app, { paths: auth.metadataPaths, document: () => auth.document(['cart:write', 'mcp']) })
  const expected = {
    resource: RESOURCE,
    authorization_servers: [as.issuer],
    scopes_supported: ['mcp', 'cart:write'],
    bearer_methods_supported: ['header'],
    resource_name: 'Shop',
    resource_documentation: 'https://docs.example.com'
  }
  for (const url of ['/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource']) {
    const res = await app.inject({ method: 'GET', url })
    t.equal(res.statusCode, 200, url)
    t.match(res.headers['content-type'], /^application\/json/)
    t.equal(res.headers['access-control-allow-origin'], '*', 'public: browser clients discover through it')
    t.same(res.json(), expected, url)
  }
  const head = await app.inject({ method: 'HEAD', url: '/.well-known/oauth-protected-resource/mcp' })
  t.equal(head.statusCode, 200)
  const pre = await app.inject({ method: 'OPTIONS', url: '/.well-known/oauth-protected-resource/mcp', headers: { origin: 'https://app.example', 'access-control-request-method': 'GET', 'access-control-request-headers': 'mcp-protocol-version' } })
  t.equal(pre.statusCode, 204)
  t.match(pre.headers['access-control-allow-headers'], /mcp-protocol-version/)
  t.equal((await app.inject({ method: 'GET', url: '/.well-known/oauth-protected-resource/other' })).statusCode, 404, 'only this resource\'s path')
  t.same(resolve({ scopesSupported: ['only'] }).document(['cart:write']).scopes_supported, ['only'], 'configured scopes_supported wins')
  t.notOk('scopes_supported' in resolve().document(), 'omitted when no scope is known')
})

t.test('metadataAtRoot: false serves only the path-inserted form', async t => {
  const auth = resolve({ metadataAtRoot: false })
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  registerProtectedResourceMetadata(app, { paths: auth.metadataPaths, document: () => auth.document() })
  t.equal((await app.inject('/.well-known/oauth-protected-resource/mcp')).statusCode, 200)
  t.equal((await app.inject('/.well-known/oauth-protected-resource')).statusCode, 404)
})

t.test('authenticate with the JWT verifier', async t => {
  const auth = resolve()
  const sign = async (extra: Partial<Parameters<typeof signToken>[0]> = {}): Promise<string> =>
    await signToken({ key, issuer: as.issuer, audience: RESOURCE, claims: { sub: 'alice', scope: 'cart:read' }, ...extra })

  t.equal(await auth.authenticate(request()), null, 'no token: anonymous (the routes decide whether that is a 401)')
  t.equal(await auth.authenticate(request('Basic dXNlcjpwYXNz')), null, 'another scheme: no bearer token')
  const p = await auth.authenticate(request(`Bearer ${await sign()}`))
  t.match(p, { id: 'alice', scopes: ['cart:read'], claims: { sub: 'alice' } })

  const malformed = await refusal(auth.authenticate(request('Bearer ')))
  t.equal(malformed.status, 400)

  const cases: Array<[string, Promise<string>, string]> = [
    ['expired', sign({ expIn: -3600 }), 'expired'],
    ['wrong audience', sign({ audience: 'https://other.example.com/mcp' }), 'wrong_audience'],
    ['wrong issuer', sign({ issuer: 'https://evil.example' }), 'wrong_issuer'],
    ['garbage', Promise.resolve('abc.def.ghi'), 'malformed']
  ]
  for (const [what, tok, reason] of cases) {
    const req = request(`Bearer ${await tok}`)
    const err = await refusal(auth.authenticate(req))
    t.equal(err.status, 401, what)
    t.equal(err.reason, reason, what)
    t.match(err.headers['www-authenticate'], new RegExp(`^Bearer error="invalid_token", error_description="[^"]+", resource_metadata="${MD.replace(/[.]/g, '\\.')}"$`), what)
    t.same(req.lines.map(l => l[0]), ['debug'], `${what}: a client error is logged at debug only`)
  }
})

t.test('requiredScopes apply to every request', async t => {
  const auth = resolve({ requiredScopes: ['mcp'] })
  const without = await refusal(auth.authenticate(request(`Bearer ${await signToken({ key, issuer: as.issuer, audience: RESOURCE, claims: { scope: 'other' } })}`)))
  t.equal(without.status, 403)
  t.match(without.headers['www-authenticate'], /error="insufficient_scope", .*scope="mcp"/)
  const anonymous = await refusal(auth.authenticate(request()))
  t.equal(anonymous.status, 401, 'no token and scopes needed: 401 with the scope to ask for')
  t.equal(anonymous.headers['www-authenticate'], `Bearer scope="mcp", resource_metadata="${MD}"`)
  t.equal((await auth.authenticate(request(`Bearer ${await signToken({ key, issuer: as.issuer, audience: RESOURCE, claims: { scope: 'mcp x' } })}`)))?.id, 'user-1')
})

t.test('an unreachable JWKS → 503, logged as the server\'s error', async t => {
  const gone = await startAuthorizationServer([key])
  const tok = await signToken({ key, issuer: gone.issuer, audience: RESOURCE })
  await gone.close()
  const auth = resolveAuth({ resource: RESOURCE, authorizationServers: [gone.issuer], jwt: { jwksUri: gone.jwksUri } }, fail)
  const req = request(`Bearer ${tok}`)
  const err = await refusal(auth.authenticate(req))
  t.equal(err.status, 503)
  t.same(err.headers, {})
  t.equal(req.lines[0]?.[0], 'error')
})

t.test('authenticate with the user\'s verify', async t => {
  const seen: string[] = []
  const auth = resolveAuth({
    resource: RESOURCE,
    authorizationServers: ['https://idp.example.com'],
    verify: async (token, req) => {
      seen.push(`${token}|${String(req.headers.authorization)}`)
      if (token === 'good') return { id: 'svc', scopes: ['cart:read'] } satisfies McpPrincipal
      if (token === 'broken') throw new Error('introspection endpoint down')
      if (token === 'weird') return { name: 'no id' } as unknown as McpPrincipal
      return null
    }
  }, fail)
  t.match(await auth.authenticate(request('Bearer good')), { id: 'svc', scopes: ['cart:read'] })
  t.equal(seen[0], 'good|Bearer good', 'the token and the request are handed over')
  const bad = await refusal(auth.authenticate(request('Bearer nope')))
  t.equal(bad.status, 401)
  t.equal(bad.reason, 'rejected')
  t.match(bad.headers['www-authenticate'], /error="invalid_token"/)
  const down = await refusal(auth.authenticate(request('Bearer broken')))
  t.equal(down.status, 503)
  await t.rejects(auth.authenticate(request('Bearer weird')), TypeError, 'a principal without id is a programming error')
  t.equal(auth.jwt, null)
})
