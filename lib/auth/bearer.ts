/**
 * Bearer tokens on the wire (RFC 6750): reading the token from `Authorization`, the
 * `WWW-Authenticate` challenges (with MCP's `resource_metadata`, RFC 9728 §5.1), and `AuthError`,
 * the one error every auth refusal is: an HTTP status, the challenge header, and the JSON-RPC
 * error the body carries.
 *
 * What a client gets (the body is a JSON-RPC error; `id` is `null` for refusals of the whole HTTP
 * request, which run before the body is read, and the request's id for a scope refusal of one
 * request):
 *
 * | case                                   | HTTP | challenge `error`      | JSON-RPC                                          |
 * |----------------------------------------|------|------------------------|---------------------------------------------------|
 * | no token (or another scheme)           | 401  | —                      | -32600 "Unauthorized"                             |
 * | `Authorization: Bearer` malformed      | 400  | `invalid_request`      | -32600 "Bad Request: malformed bearer token"      |
 * | token invalid, expired, foreign…       | 401  | `invalid_token`        | -32600 "Unauthorized", `data.error`               |
 * | token lacks a scope the request needs  | 403  | `insufficient_scope`   | -32600 "Forbidden: insufficient scope", `data`    |
 * | keys / verifier unreachable            | 503  | — (no challenge)       | -32000 "Access token verification is unavailable." |
 *
 * -32600 because the request is refused as a whole before any method runs (the code the plugin
 * already answers its 401 with); not -32001, which this plugin answers for an unknown session
 * (a client re-initializes on it, which would not help).
 */
import { ErrorCode, McpError } from '../jsonrpc/errors.js'

/** The `error` values of RFC 6750 §3.1. */
export type BearerErrorCode = 'invalid_request' | 'invalid_token' | 'insufficient_scope'

/** Why a request was refused, finer than the wire's `error` (for logs and tests). */
export type AuthFailureReason =
  | 'no_token'
  | 'malformed_header'
  | 'malformed'
  | 'expired'
  | 'not_yet_valid'
  | 'wrong_audience'
  | 'wrong_issuer'
  | 'bad_signature'
  | 'alg_not_allowed'
  | 'unknown_key'
  | 'missing_claim'
  | 'rejected'
  | 'insufficient_scope'
  | 'unavailable'

/** The parameters of a `Bearer` challenge. */
export interface ChallengeParams {
  /** The Protected Resource Metadata URL (`resource_metadata`); absent when auth is custom. */
  resourceMetadata?: string
  error?: BearerErrorCode
  /** `error_description`: fixed ASCII text (characters RFC 6750 forbids are dropped). */
  description?: string
  /** `scope`: every scope the request needs. */
  scopes?: readonly string[]
}

/** A quoted-string holding only what RFC 6750 allows inside one (%x20-21 / %x23-5B / %x5D-7E). */
function quoted (value: string): string {
  return `"${value.replace(/[^\x20\x21\x23-\x5B\x5D-\x7E]/g, '')}"`
}

/** The `WWW-Authenticate` value of a `Bearer` challenge. */
export function bearerChallenge (p: ChallengeParams): string {
  const parts: string[] = []
  if (p.error !== undefined) parts.push(`error=${quoted(p.error)}`)
  if (p.description !== undefined) parts.push(`error_description=${quoted(p.description)}`)
  if (p.scopes !== undefined && p.scopes.length > 0) parts.push(`scope=${quoted(p.scopes.join(' '))}`)
  if (p.resourceMetadata !== undefined) parts.push(`resource_metadata=${quoted(p.resourceMetadata)}`)
  return parts.length === 0 ? 'Bearer' : `Bearer ${parts.join(', ')}`
}

/** The fixed `error_description` of each reason (never the verifier's own text). */
const DESCRIPTIONS: Record<AuthFailureReason, string> = {
  no_token: 'No access token was sent',
  malformed_header: 'The Authorization header is not a well-formed bearer token',
  malformed: 'The access token is malformed',
  expired: 'The access token expired',
  not_yet_valid: 'The access token is not valid yet',
  wrong_audience: 'The access token was not issued for this resource',
  wrong_issuer: 'The access token was issued by an unexpected authorization server',
  bad_signature: 'The access token signature is invalid',
  alg_not_allowed: 'The access token is signed with an algorithm this resource does not accept',
  unknown_key: 'The access token is signed with an unknown key',
  missing_claim: 'The access token lacks a required claim',
  rejected: 'The access token is invalid',
  insufficient_scope: 'The access token lacks a scope this request needs',
  unavailable: 'Access token verification is unavailable'
}

/**
 * An auth refusal (see the module doc): `status`, the `headers` to send (the challenge), and the
 * JSON-RPC code, message and data of the body. `reason` says why, for logs.
 */
export class AuthError extends McpError {
  declare readonly status: 400 | 401 | 403 | 503
  declare readonly headers: Record<string, string>
  readonly reason: AuthFailureReason

  constructor (status: 400 | 401 | 403 | 503, reason: AuthFailureReason, code: number, message: string,
    data: Record<string, unknown> | undefined, headers: Record<string, string>, options?: { cause?: unknown }) {
    super(code, message, data, status, headers)
    this.name = 'AuthError'
    this.reason = reason
    if (options?.cause !== undefined) this.cause = options.cause
  }
}

/** 401 without an error code: the request carried no (bearer) token. */
export function missingToken (resourceMetadata: string | undefined, scopes: readonly string[] = []): AuthError {
  return new AuthError(401, 'no_token', ErrorCode.InvalidRequest, 'Unauthorized', undefined,
    { 'www-authenticate': bearerChallenge({ resourceMetadata, scopes }) })
}

/** 400 `invalid_request`: `Authorization: Bearer` without a well-formed token. */
export function malformedHeader (resourceMetadata: string | undefined): AuthError {
  const description = DESCRIPTIONS.malformed_header
  return new AuthError(400, 'malformed_header', ErrorCode.InvalidRequest, 'Bad Request: malformed bearer token',
    { error: 'invalid_request', error_description: description },
    { 'www-authenticate': bearerChallenge({ error: 'invalid_request', description, resourceMetadata }) })
}

/** 401 `invalid_token` for `reason`. */
export function invalidToken (reason: Exclude<AuthFailureReason, 'no_token' | 'malformed_header' | 'insufficient_scope' | 'unavailable'>,
  resourceMetadata: string | undefined, cause?: unknown): AuthError {
  const description = DESCRIPTIONS[reason]
  return new AuthError(401, reason, ErrorCode.InvalidRequest, 'Unauthorized',
    { error: 'invalid_token', error_description: description },
    { 'www-authenticate': bearerChallenge({ error: 'invalid_token', description, resourceMetadata }) }, { cause })
}

/**
 * 403 `insufficient_scope` naming `required` — every scope the request needs, not only the
 * missing ones: a client that asks its authorization server for just the missing ones would lose
 * the others.
 */
export function insufficientScope (required: readonly string[], resourceMetadata: string | undefined): AuthError {
  const description = DESCRIPTIONS.insufficient_scope
  const scope = required.join(' ')
  return new AuthError(403, 'insufficient_scope', ErrorCode.InvalidRequest, 'Forbidden: insufficient scope',
    { error: 'insufficient_scope', error_description: description, scope },
    { 'www-authenticate': bearerChallenge({ error: 'insufficient_scope', description, scopes: required, resourceMetadata }) })
}

/**
 * 503: the token could not be checked (the JWKS is unreachable or broken, a custom verifier
 * threw). The server's problem, not the client's: a 401 would send the client to re-authorize,
 * which cannot help and, repeated by every client, would flood the authorization server. No
 * challenge; `cause` is for the log.
 */
export function verificationUnavailable (cause: unknown): AuthError {
  return new AuthError(503, 'unavailable', ErrorCode.ServerError, 'Access token verification is unavailable.', undefined, {}, { cause })
}

/** What the `Authorization` header holds. */
export type BearerToken =
  | { kind: 'none' }
  | { kind: 'token', token: string }
  | { kind: 'malformed' }

/** RFC 6750 §2.1 `b64token`. */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/

/**
 * Reads a bearer token from an `Authorization` value. No header, or another scheme (`Basic …`), is
 * `none` (RFC 6750 §3.1: no error code for a request without authentication); `Bearer` with an
 * empty or ill-formed token is `malformed`. Tokens in the query string are never read (MCP
 * forbids them).
 */
export function readBearer (authorization: string | undefined): BearerToken {
  if (authorization === undefined) return { kind: 'none' }
  const value = authorization.trim()
  if (value === '') return { kind: 'none' }
  const space = value.search(/\s/)
  const scheme = space === -1 ? value : value.slice(0, space)
  if (scheme.toLowerCase() !== 'bearer') return { kind: 'none' }
  const token = space === -1 ? '' : value.slice(space).trim()
  if (!B64TOKEN.test(token)) return { kind: 'malformed' }
  return { kind: 'token', token }
}
