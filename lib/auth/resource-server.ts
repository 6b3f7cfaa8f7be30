/**
 * The `auth` option: the MCP endpoint as an OAuth 2.0 protected resource (MCP 2026-07-28
 * authorization). It validates the option, and gives the plugin what it reads at run time:
 *
 * - `authenticate(request)`: the bearer token → a principal (`null` without a token: the routes'
 *   existing `auth.required` path answers that 401, with `challenge` as its `WWW-Authenticate`);
 *   throws an `AuthError` for a malformed header (400), an invalid token (401 `invalid_token`),
 *   a principal lacking `requiredScopes` (403), or verification that cannot be done (503).
 * - `document()` and `metadataPaths`: the Protected Resource Metadata and where it is served
 *   (`registerProtectedResourceMetadata`), `resourceMetadata`: its URL, named in every challenge.
 * - `authorize(messages, principal, registry)`: the per-definition scope gate (`access.ts`).
 *
 * Tokens are checked by the JWT verifier (`jwt`: signature against the authorization server's
 * JWKS, issuer, audience = this resource, expiry) or by the user's `verify(token, request)`.
 * The token is never kept on the principal nor forwarded: handlers that call other APIs need
 * tokens of their own.
 */
import type { FastifyRequest } from 'fastify'
import type { McpPrincipal } from '../context.js'
import { authorizeMessages, principalScopes, type AccessRuleSource, type GateMessage } from './access.js'
import { insufficientScope, invalidToken, malformedHeader, missingToken, readBearer, verificationUnavailable, bearerChallenge } from './bearer.js'
import { createJwtVerifier, isLoopback, type JwtVerifier, type JwtVerifierOptions } from './jwt.js'
import { metadataLocation, type ExtraMetadata, type ProtectedResourceMetadata } from './metadata.js'

/** A user's own token check: a principal, `null` for a token it refuses; throw when it cannot tell (→ 503). */
export type VerifyToken = (token: string, request: FastifyRequest) => McpPrincipal | null | Promise<McpPrincipal | null>

/**
 * The `auth` option in its resource-server form (the other form is `AuthenticateOptions`).
 * Exactly one of `jwt` and `verify`.
 */
export interface ResourceServerOptions {
  /**
   * This endpoint's canonical absolute URL, as clients address it (e.g. `https://mcp.example.com/mcp`):
   * the `resource` of the metadata and the audience tokens must carry. https (http only on a
   * loopback host); no query or fragment. Never derived from the request's Host header.
   */
  resource: string
  /** Issuer identifiers of the authorization servers that issue tokens for it (at least one). */
  authorizationServers: string[]
  /**
   * Verify JWT access tokens against the JWKS at `jwksUri`. `issuer` defaults to
   * `authorizationServers`, `audience` to `resource`.
   */
  jwt?: Omit<JwtVerifierOptions, 'issuer' | 'audience'> & { issuer?: string | string[], audience?: string | string[] }
  /**
   * Or verify tokens yourself (opaque tokens, introspection). It MUST check that the token was
   * issued for `resource` (its audience). `null` → 401 `invalid_token`; a throw → 503.
   */
  verify?: VerifyToken
  /** Scopes every request needs (403 `insufficient_scope` without them). Default none. */
  requiredScopes?: string[]
  /**
   * `scopes_supported` of the metadata. Default: `requiredScopes` plus every scope the
   * definitions declare (omitted when there are none).
   */
  scopesSupported?: string[]
  /** More metadata fields (`resource_name`, `resource_documentation`, …). */
  metadata?: ExtraMetadata
  /** Also serve the metadata at the root `/.well-known/oauth-protected-resource`. Default true. */
  metadataAtRoot?: boolean
  /**
   * Reject a request without a token with 401 (the challenge names `resource_metadata`). Default
   * true. A request with an invalid token is refused either way.
   */
  required?: boolean
  /** Not here: a check of the app's own is the other form of `auth` (`auth.verify` is this form's own token check). */
  authenticate?: never
}

/** The resolved `auth` option (see the module doc). */
export interface ResolvedAuth {
  readonly resource: string
  /** The metadata URL every challenge names (`resource_metadata`). */
  readonly resourceMetadata: string
  /** Route paths of the metadata on this server. */
  readonly metadataPaths: readonly string[]
  readonly requiredScopes: readonly string[]
  /** `WWW-Authenticate` of a 401 for a request without a token. */
  readonly challenge: string
  /** The JWT verifier, when `jwt` is used (its `jwks` is jose's key cache). */
  readonly jwt: JwtVerifier | null
  /** The principal of a request's bearer token, `null` without one; throws `AuthError`. */
  authenticate: (request: FastifyRequest) => Promise<McpPrincipal | null>
  /** The metadata document; `declaredScopes`: the scopes the definitions declare. */
  document: (declaredScopes?: Iterable<string>) => ProtectedResourceMetadata
  /** The scope gate for the requests of one POST (throws `AuthError` 401/403). */
  authorize: (messages: Iterable<GateMessage>, principal: McpPrincipal | null, source: AccessRuleSource) => void
}

/** How option errors are reported (options.ts passes its `fail`: `FST_ERR_MCP_INVALID_OPTION`). */
export type FailOption = (name: string, why: string) => never

/** The keys of the resource-server form of `auth` (`required` is read by the plugin's options). */
export const RESOURCE_SERVER_KEYS: readonly string[] = ['resource', 'authorizationServers', 'jwt', 'verify', 'requiredScopes', 'scopesSupported',
  'metadata', 'metadataAtRoot', 'required']
const KNOWN = new Set(RESOURCE_SERVER_KEYS)
/** The keys of `auth.jwt` (`JwtVerifierOptions` without the two `auth` fills in, which it may override). */
const JWT_KEYS: readonly string[] = ['jwksUri', 'issuer', 'audience', 'algorithms', 'clockToleranceMs', 'typ', 'jwksCooldownMs',
  'jwksCacheMaxAgeMs', 'jwksTimeoutMs', 'jwksRetryMs']
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/
/** Path characters that are literal in a Fastify route (no `:` parameters, no `*`). */
const ROUTE_SAFE_PATH = /^[A-Za-z0-9\-._~/%]*$/

function httpsUrl (value: unknown, name: string, fail: FailOption): URL {
  if (typeof value !== 'string' || !URL.canParse(value)) fail(name, 'must be an absolute URL')
  const u = new URL(value)
  if (u.protocol !== 'https:' && !(u.protocol === 'http:' && isLoopback(u))) fail(name, 'must be an https URL (http only on a loopback host)')
  if (u.hash !== '' || value.includes('#')) fail(name, 'must not have a fragment')
  if (u.username !== '' || u.password !== '') fail(name, 'must not carry credentials')
  return u
}

function scopeList (value: unknown, name: string, fail: FailOption): string[] {
  if (!Array.isArray(value) || !value.every(s => typeof s === 'string' && SCOPE_TOKEN.test(s))) {
    fail(name, 'must be an array of scope tokens (no spaces, quotes or backslashes)')
  }
  return [...new Set(value as string[])]
}

function principalOk (p: unknown): p is McpPrincipal {
  return typeof p === 'object' && p !== null && typeof (p as McpPrincipal).id === 'string'
}

/** What {@link checkAuth} takes from the `auth` option, checked. */
interface CheckedAuth {
  resource: string
  authorizationServers: string[]
  requiredScopes: string[]
  scopesSupported: string[] | undefined
  jwt: JwtVerifier | null
}

/** Checks every field of the `auth` option (reporting through `fail`) and builds the JWT verifier. */
function checkAuth (raw: ResourceServerOptions, fail: FailOption): CheckedAuth {
  if (typeof raw !== 'object' || raw === null) fail('auth', 'must be an object')
  for (const k of Object.keys(raw)) if (!KNOWN.has(k)) fail(`auth.${k}`, 'is not an auth option')
  const resourceUrl = httpsUrl(raw.resource, 'auth.resource', fail)
  if (resourceUrl.search !== '' || raw.resource.includes('?')) fail('auth.resource', 'must not have a query')
  if (!ROUTE_SAFE_PATH.test(resourceUrl.pathname)) fail('auth.resource', 'path may only hold letters, digits, "-._~/%"')
  const resource = raw.resource
  if (!Array.isArray(raw.authorizationServers) || raw.authorizationServers.length === 0) fail('auth.authorizationServers', 'must be a non-empty array of issuer URLs')
  raw.authorizationServers.forEach((s, i) => httpsUrl(s, `auth.authorizationServers[${i}]`, fail))
  const authorizationServers = [...raw.authorizationServers]
  const requiredScopes = raw.requiredScopes === undefined ? [] : scopeList(raw.requiredScopes, 'auth.requiredScopes', fail)
  const scopesSupported = raw.scopesSupported === undefined ? undefined : scopeList(raw.scopesSupported, 'auth.scopesSupported', fail)
  if (raw.metadata !== undefined) {
    if (typeof raw.metadata !== 'object' || raw.metadata === null || Array.isArray(raw.metadata)) fail('auth.metadata', 'must be an object')
    for (const k of ['resource', 'authorization_servers', 'scopes_supported', 'bearer_methods_supported']) {
      if (k in raw.metadata) fail(`auth.metadata.${k}`, 'is set by the plugin (use auth.resource, auth.authorizationServers, auth.scopesSupported)')
    }
  }
  if (raw.metadataAtRoot !== undefined && typeof raw.metadataAtRoot !== 'boolean') fail('auth.metadataAtRoot', 'must be a boolean')
  if ((raw.jwt === undefined) === (raw.verify === undefined)) fail('auth', 'needs exactly one of jwt (verify JWTs against a JWKS) and verify (your own check)')
  if (raw.verify !== undefined && typeof raw.verify !== 'function') fail('auth.verify', 'must be a function (token, request) => principal | null')

  let jwt: JwtVerifier | null = null
  if (raw.jwt !== undefined) {
    if (typeof raw.jwt !== 'object' || raw.jwt === null) fail('auth.jwt', 'must be an object')
    for (const k of Object.keys(raw.jwt)) {
      if (!JWT_KEYS.includes(k)) fail(`auth.jwt.${k.slice(0, 64)}`, `is not an auth.jwt option (misspelt?); known: ${JWT_KEYS.join(', ')}`)
    }
    try {
      jwt = createJwtVerifier({ ...raw.jwt, issuer: raw.jwt.issuer ?? authorizationServers, audience: raw.jwt.audience ?? resource })
    } catch (err) {
      fail('auth.jwt', (err as Error).message)
    }
  }
  return { resource, authorizationServers, requiredScopes, scopesSupported, jwt }
}

/**
 * The principal a bearer token stands for: verified as a JWT against the JWKS, or by the user's
 * `verify`. 401 (`invalid_token`) for a token refused, 503 when it cannot be checked right now.
 */
async function principalOfToken (token: string, request: FastifyRequest, jwt: JwtVerifier | null, verify: VerifyToken | undefined, md: string): Promise<McpPrincipal> {
  if (jwt !== null) {
    const out = await jwt(token)
    if (!out.ok) {
      if (out.reason === 'unavailable') {
        // One error line per failed fetch (at most one per backoff); the requests refused meanwhile at debug.
        if (out.fetchFailure !== undefined) request.log.error({ err: out.fetchFailure }, 'MCP auth: access tokens cannot be verified (JWKS fetch failed)')
        else request.log.debug({ err: out.cause }, 'MCP auth: access token not verified (JWKS unavailable)')
        throw verificationUnavailable(out.cause)
      }
      request.log.debug({ reason: out.reason, err: out.cause }, 'MCP auth: access token refused')
      throw invalidToken(out.reason, md, out.cause)
    }
    return out.principal
  } else {
    let p: McpPrincipal | null
    try {
      p = await (verify as VerifyToken)(token, request)
    } catch (err) {
      request.log.error({ err }, 'MCP auth: the verify function failed')
      throw verificationUnavailable(err)
    }
    if (p === null) throw invalidToken('rejected', md)
    if (!principalOk(p)) throw new TypeError('auth.verify must return { id: string, scopes?: string[] } or null')
    return p
  }
}

/** Validates the `auth` option (reporting through `fail`) and returns its resolved form. */
export function resolveAuth (raw: ResourceServerOptions, fail: FailOption): ResolvedAuth {
  const { resource, authorizationServers, requiredScopes, scopesSupported, jwt } = checkAuth(raw, fail)
  const verify = raw.verify
  const location = metadataLocation(resource, raw.metadataAtRoot ?? true)
  const md = location.url
  const extra = { ...raw.metadata }

  async function authenticate (request: FastifyRequest): Promise<McpPrincipal | null> {
    const bearer = readBearer(request.headers.authorization)
    if (bearer.kind === 'none') {
      if (requiredScopes.length > 0) throw missingToken(md, requiredScopes)
      return null
    }
    if (bearer.kind === 'malformed') throw malformedHeader(md)
    const principal = await principalOfToken(bearer.token, request, jwt, verify, md)
    if (requiredScopes.length > 0) {
      const held = principalScopes(principal)
      if (!requiredScopes.every(s => held.has(s))) throw insufficientScope(requiredScopes, md)
    }
    return principal
  }

  function document (declaredScopes?: Iterable<string>): ProtectedResourceMetadata {
    const scopes = scopesSupported ?? [...new Set([...requiredScopes, ...(declaredScopes ?? [])])]
    const doc: ProtectedResourceMetadata = { ...extra, resource, authorization_servers: [...authorizationServers] }
    if (scopes.length > 0) doc.scopes_supported = scopes
    doc.bearer_methods_supported = ['header']
    return doc
  }

  return Object.freeze({
    resource,
    resourceMetadata: md,
    metadataPaths: Object.freeze([...location.paths]),
    requiredScopes: Object.freeze(requiredScopes),
    challenge: bearerChallenge({ resourceMetadata: md, scopes: requiredScopes }),
    jwt,
    authenticate,
    document,
    authorize: (messages: Iterable<GateMessage>, principal: McpPrincipal | null, source: AccessRuleSource) => {
      authorizeMessages(messages, principal, source, { resourceMetadata: md, alsoRequired: requiredScopes })
    }
  })
}
