/**
 * `lib/auth/`: the MCP endpoint as an OAuth 2.0 protected resource (MCP 2026-07-28
 * authorization) and per-definition access. `resource-server.ts` resolves the `auth` option
 * (token → principal, the challenges); `jwt.ts` verifies JWTs against a JWKS with jose;
 * `metadata.ts` is the RFC 9728 document and its routes; `access.ts` decides who sees and may
 * call a tool, resource or prompt; `bearer.ts` holds the wire forms (RFC 6750) and `AuthError`.
 * Imports only `context.ts` and `jsonrpc/` (it sits right of `features/`, which uses it).
 */
export { resolveAuth, type ResourceServerOptions, type ResolvedAuth, type VerifyToken, type FailOption } from './resource-server.js'
export { createJwtVerifier, scopesOf, principalOf, classifyJoseError, DEFAULT_ALGORITHMS, type AuthPrincipal, type JwtVerifier, type JwtVerifierOptions, type JwtOutcome } from './jwt.js'
export { registerProtectedResourceMetadata, metadataLocation, WELL_KNOWN_PRM, type ProtectedResourceMetadata, type ExtraMetadata, type MetadataLocation, type MetadataSource } from './metadata.js'
export {
  accessRuleOf, accessTarget, authorizeMessages, decideAccess, dependsOnPrincipal, hasScopes, isVisible, listCacheScope, principalScopes, visibleTo,
  type AccessDecision, type AccessFields, type AccessRule, type AccessRuleSource, type AccessTarget, type GateMessage
} from './access.js'
export {
  AuthError, bearerChallenge, insufficientScope, invalidToken, malformedHeader, missingToken, readBearer, verificationUnavailable,
  type AuthFailureReason, type BearerErrorCode, type BearerToken, type ChallengeParams
} from './bearer.js'
