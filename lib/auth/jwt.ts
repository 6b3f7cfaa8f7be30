/**
 * Verifies bearer JWTs (RFC 9068 access tokens) with `jose` against the authorization server's
 * JWKS: signature with the key named by `kid` (a token without one: each key that fits, in turn) (jose's remote JWKS: cached for `cacheMaxAgeMs`, an
 * unknown `kid` re-fetches at most once per `cooldownMs`; a failed fetch is not retried before a
 * backoff, `jwks-fetch.ts`), an algorithm allow-list (asymmetric
 * only, so `none` and HS256-with-the-public-key are refused), issuer, audience (this resource),
 * `exp` / `nbf` with a clock tolerance, and the claims a principal needs (`sub`, `exp`).
 *
 * The outcome is a value, never a throw: a principal, or why not — the client's fault
 * (`invalid_token`, 401) or the server's (`unavailable`, 503: the JWKS is unreachable, answers
 * garbage, or holds no usable key). `fetchFailure` is set on the one outcome that reports a
 * failed fetch: the caller logs that one, not every request refused while the JWKS is down.
 */
import { createRemoteJWKSet, customFetch, errors, jwtVerify, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose'
import type { McpPrincipal } from '../context.js'
import type { AuthFailureReason } from './bearer.js'
import { JwksFetchGate } from './jwks-fetch.js'

/** A principal made from a verified access token. */
export interface AuthPrincipal extends McpPrincipal {
  /** `sub` (qualified by `iss` when several issuers are trusted: `<iss>#<sub>`). */
  id: string
  /** From `scope` (space-separated) and/or `scp` (array or space-separated). */
  scopes: string[]
  /** The verified claims. The token itself is not kept: it must never be passed on. */
  claims: Readonly<JWTPayload>
}

/** The asymmetric JWS algorithms accepted by default. */
export const DEFAULT_ALGORITHMS: readonly string[] = Object.freeze([
  'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'
])

/** Algorithms a JWKS-verified token may use: never `none`, never a shared-secret (HMAC) one. */
const ASYMMETRIC = /^(RS|PS|ES)(256|384|512)$|^ES256K$|^EdDSA$|^Ed25519$|^Ed448$|^ML-DSA-(44|65|87)$/

/** How tokens are verified. */
export interface JwtVerifierOptions {
  /** The JWKS of the authorization server(s) (its `jwks_uri`). */
  jwksUri: string
  /** Accepted `iss` values. */
  issuer: string | readonly string[]
  /** Accepted `aud` values: this resource's identifier. */
  audience: string | readonly string[]
  /** Allowed JWS algorithms. Default {@link DEFAULT_ALGORITHMS}; HMAC and `none` are refused. */
  algorithms?: readonly string[]
  /** Milliseconds of clock skew tolerated on `exp`, `nbf`, `iat`. Default 30,000. */
  clockToleranceMs?: number
  /** Required `typ` header (e.g. `at+jwt`, RFC 9068). Default: not checked. */
  typ?: string
  /** Milliseconds after a fetch before an unknown `kid` may fetch again. Default 30,000. */
  jwksCooldownMs?: number
  /** Milliseconds the fetched keys are used before they are fetched again. Default 600,000. */
  jwksCacheMaxAgeMs?: number
  /** Milliseconds a JWKS fetch may take. Default 5,000. */
  jwksTimeoutMs?: number
  /**
   * Milliseconds after a failed JWKS fetch before another may start, doubled at each failure in a
   * row up to `jwksCooldownMs` (or this, when larger). Meanwhile tokens that need a fetch are
   * answered 503 at once. Default 1,000.
   */
  jwksRetryMs?: number
}

/** What verifying a token gives. */
export type JwtOutcome =
  | { ok: true, principal: AuthPrincipal }
  | { ok: false, reason: Exclude<AuthFailureReason, 'no_token' | 'malformed_header' | 'insufficient_scope'>, cause: unknown, fetchFailure?: unknown }

/** A verifier: a token in, an outcome out. `jwks` is jose's key resolver (its cache state). */
export interface JwtVerifier {
  (token: string): Promise<JwtOutcome>
  readonly jwks: ReturnType<typeof createRemoteJWKSet>
}

/** The scopes of verified claims: `scope` (RFC 9068, space-separated) and `scp` (array or string). */
export function scopesOf (claims: JWTPayload): string[] {
  const out = new Set<string>()
  const add = (v: unknown): void => {
    if (typeof v === 'string') { for (const s of v.split(' ')) if (s !== '') out.add(s) } else if (Array.isArray(v)) {
      for (const s of v) if (typeof s === 'string' && s !== '' && !s.includes(' ')) out.add(s)
    }
  }
  add(claims.scope)
  add(claims.scp)
  return [...out]
}

/** The principal of verified claims (`sub` is required by the verifier). */
export function principalOf (claims: JWTPayload, qualifyByIssuer: boolean): AuthPrincipal {
  const sub = claims.sub as string
  return {
    id: qualifyByIssuer ? `${String(claims.iss)}#${sub}` : sub,
    scopes: scopesOf(claims),
    claims: Object.freeze({ ...claims })
  }
}

/** Which verification failure a jose error is (see the module doc for the split). */
export function classifyJoseError (err: unknown): JwtOutcome & { ok: false } {
  const fail = (reason: (JwtOutcome & { ok: false })['reason']): JwtOutcome & { ok: false } => ({ ok: false, reason, cause: err })
  if (err instanceof errors.JWTExpired) return fail('expired')
  if (err instanceof errors.JWTClaimValidationFailed) {
    if (err.reason === 'missing') return fail('missing_claim')
    switch (err.claim) {
      case 'aud': return fail('wrong_audience')
      case 'iss': return fail('wrong_issuer')
      case 'nbf': return fail('not_yet_valid')
      case 'iat': return fail('not_yet_valid')
      default: return fail('malformed')
    }
  }
  if (err instanceof errors.JWSSignatureVerificationFailed) return fail('bad_signature')
  if (err instanceof errors.JOSEAlgNotAllowed) return fail('alg_not_allowed')
  if (err instanceof errors.JWKSNoMatchingKey) return fail('unknown_key')
  // The token's own shape: not a JWS/JWT, an unsupported header, a `crit` we do not know.
  if (err instanceof errors.JWSInvalid || err instanceof errors.JWTInvalid || err instanceof errors.JOSENotSupported) return fail('malformed')
  // Everything else is about the key set, not the token: a timeout, a non-200, bad JSON, a JWKS
  // that holds no usable keys (JWKSInvalid), a network error (fetch's TypeError).
  return fail('unavailable')
}

/**
 * Validates the options (throws a `TypeError` naming the field) and returns the verifier. Nothing
 * is fetched until the first token arrives.
 */
export function createJwtVerifier (opts: JwtVerifierOptions): JwtVerifier {
  let jwksUrl: URL
  try { jwksUrl = new URL(opts.jwksUri) } catch { throw new TypeError('jwksUri must be an absolute URL') }
  if (jwksUrl.protocol !== 'https:' && !isLoopback(jwksUrl)) throw new TypeError('jwksUri must be an https URL (http only on loopback)')
  const issuers = typeof opts.issuer === 'string' ? [opts.issuer] : [...opts.issuer]
  if (issuers.length === 0 || !issuers.every(i => typeof i === 'string' && i !== '')) throw new TypeError('issuer must be a non-empty string or array of strings')
  const audiences = typeof opts.audience === 'string' ? [opts.audience] : [...opts.audience]
  if (audiences.length === 0 || !audiences.every(a => typeof a === 'string' && a !== '')) throw new TypeError('audience must be a non-empty string or array of strings')
  const algorithms = opts.algorithms === undefined ? [...DEFAULT_ALGORITHMS] : [...opts.algorithms]
  if (algorithms.length === 0) throw new TypeError('algorithms must not be empty')
  for (const alg of algorithms) {
    if (typeof alg !== 'string' || !ASYMMETRIC.test(alg)) throw new TypeError(`algorithms: ${JSON.stringify(alg)} is not an asymmetric JWS algorithm (none and HMAC are never accepted with a JWKS)`)
  }
  const clockToleranceMs = opts.clockToleranceMs ?? 30_000
  if (typeof clockToleranceMs !== 'number' || !Number.isFinite(clockToleranceMs) || clockToleranceMs < 0) throw new TypeError('clockToleranceMs must be a number ≥ 0')
  // jose takes the tolerance in seconds.
  const clockTolerance = clockToleranceMs / 1000
  if (opts.typ !== undefined && (typeof opts.typ !== 'string' || opts.typ === '')) throw new TypeError('typ must be a non-empty string')
  for (const k of ['jwksCooldownMs', 'jwksCacheMaxAgeMs', 'jwksTimeoutMs', 'jwksRetryMs'] as const) {
    const v = opts[k]
    if (v !== undefined && (typeof v !== 'number' || !Number.isInteger(v) || v < 0)) throw new TypeError(`${k} must be an integer ≥ 0`)
  }

  const cooldown = opts.jwksCooldownMs ?? 30_000
  const gate = new JwksFetchGate(opts.jwksRetryMs ?? 1_000, cooldown)
  const jwks = createRemoteJWKSet(jwksUrl, {
    cooldownDuration: cooldown,
    cacheMaxAge: opts.jwksCacheMaxAgeMs ?? 600_000,
    timeoutDuration: opts.jwksTimeoutMs ?? 5_000,
    [customFetch]: gate.fetch
  })
  const qualify = issuers.length > 1
  const verifyOptions = {
    issuer: issuers,
    audience: audiences,
    algorithms,
    clockTolerance,
    requiredClaims: ['sub', 'exp'],
    ...(opts.typ === undefined ? {} : { typ: opts.typ })
  }
  const verifier = async (token: string): Promise<JwtOutcome> => {
    let payload: JWTPayload
    try {
      payload = await verifyWithAnyKey(token, jwks as JWTVerifyGetKey, verifyOptions)
    } catch (err) {
      const out = classifyJoseError(err)
      if (out.reason === 'unavailable') out.fetchFailure = gate.takeFailure()
      return out
    }
    if (typeof payload.sub !== 'string' || payload.sub === '') return { ok: false, reason: 'missing_claim', cause: new Error('sub must be a non-empty string') }
    return { ok: true, principal: principalOf(payload, qualify) }
  }
  return Object.assign(verifier, { jwks })
}

/**
 * `jwtVerify` against the key set. A token without `kid` matches every key of its algorithm: while
 * keys rotate the set holds two or more, and jose throws `JWKSMultipleMatchingKeys`, which lists
 * the candidates. Each is tried in turn; none verifying is a bad signature (the client's fault),
 * never an unavailable key set.
 */
async function verifyWithAnyKey (token: string, jwks: JWTVerifyGetKey, options: JWTVerifyOptions): Promise<JWTPayload> {
  try {
    return (await jwtVerify(token, jwks, options)).payload
  } catch (err) {
    if (!(err instanceof errors.JWKSMultipleMatchingKeys)) throw err
    for await (const key of err) {
      try {
        return (await jwtVerify(token, key, options)).payload
      } catch (inner) {
        if (inner instanceof errors.JWSSignatureVerificationFailed) continue
        throw inner
      }
    }
    throw new errors.JWSSignatureVerificationFailed()
  }
}

/** `http:` is allowed for loopback hosts only (development, tests). */
export function isLoopback (url: URL): boolean {
  return url.hostname === 'localhost' || url.hostname === '127.0.0.1' || url.hostname === '[::1]'
}
