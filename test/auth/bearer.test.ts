/**
 * The wire forms of lib/auth/bearer.ts: reading `Authorization` (RFC 6750 §2.1), the challenges
 * (`WWW-Authenticate` with `resource_metadata`), and the status, header and JSON-RPC body of each
 * refusal.
 */
import t from 'tap'
import {
  AuthError, bearerChallenge, insufficientScope, invalidToken, malformedHeader, missingToken, readBearer, verificationUnavailable
} from '../../lib/auth/bearer.js'
import { ErrorCode, errorReply, McpError } from '../../lib/jsonrpc/errors.js'

const MD = 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp'

t.test('readBearer', async t => {
  t.same(readBearer(undefined), { kind: 'none' })
  t.same(readBearer(''), { kind: 'none' })
  t.same(readBearer('Basic dXNlcjpwYXNz'), { kind: 'none' }, 'another scheme is no bearer token (no error code)')
  t.same(readBearer('Bearer abc.def-ghi_~+/=='), { kind: 'token', token: 'abc.def-ghi_~+/==' })
  t.same(readBearer('bearer   abc  '), { kind: 'token', token: 'abc' }, 'scheme case-insensitive, spaces tolerated')
  t.same(readBearer('Bearer'), { kind: 'malformed' })
  t.same(readBearer('Bearer '), { kind: 'malformed' })
  t.same(readBearer('Bearer a b'), { kind: 'malformed' }, 'two tokens')
  t.same(readBearer('Bearer a"b'), { kind: 'malformed' }, 'a character outside b64token')
  t.same(readBearer('Bearer ab=c'), { kind: 'malformed' }, '= only as padding')
})

t.test('bearerChallenge', async t => {
  t.equal(bearerChallenge({ resourceMetadata: MD }), `Bearer resource_metadata="${MD}"`)
  t.equal(bearerChallenge({}), 'Bearer')
  t.equal(bearerChallenge({ error: 'insufficient_scope', scopes: ['a', 'b:c'], resourceMetadata: MD }),
    `Bearer error="insufficient_scope", scope="a b:c", resource_metadata="${MD}"`)
  t.equal(bearerChallenge({ error: 'invalid_token', description: 'say "hi"\\\n' }), 'Bearer error="invalid_token", error_description="say hi"',
    'quotes, backslashes and control characters cannot break out of the quoted-string')
})

t.test('the refusals: status, challenge, JSON-RPC body', async t => {
  const missing = missingToken(MD)
  t.equal(missing.status, 401)
  t.equal(missing.reason, 'no_token')
  t.same(missing.headers, { 'www-authenticate': `Bearer resource_metadata="${MD}"` }, 'no error param without a token')
  t.same(missing.toJSON(), { code: ErrorCode.InvalidRequest, message: 'Unauthorized' })
  t.equal(missingToken(MD, ['mcp']).headers['www-authenticate'], `Bearer scope="mcp", resource_metadata="${MD}"`)

  const bad = malformedHeader(MD)
  t.equal(bad.status, 400)
  t.match(bad.headers['www-authenticate'], /^Bearer error="invalid_request", error_description="[^"]+", resource_metadata="/)
  t.match(bad.toJSON(), { code: ErrorCode.InvalidRequest, data: { error: 'invalid_request' } })

  const cause = new Error('jose said')
  const expired = invalidToken('expired', MD, cause)
  t.equal(expired.status, 401)
  t.equal(expired.cause, cause)
  t.equal(expired.headers['www-authenticate'], `Bearer error="invalid_token", error_description="The access token expired", resource_metadata="${MD}"`)
  t.same(expired.toJSON(), { code: ErrorCode.InvalidRequest, message: 'Unauthorized', data: { error: 'invalid_token', error_description: 'The access token expired' } })
  t.notMatch(JSON.stringify(expired.toJSON()), /jose said/, 'the verifier\'s own text never reaches the client')

  const scope = insufficientScope(['cart:read', 'cart:write'], MD)
  t.equal(scope.status, 403)
  t.equal(scope.headers['www-authenticate'],
    `Bearer error="insufficient_scope", error_description="The access token lacks a scope this request needs", scope="cart:read cart:write", resource_metadata="${MD}"`)
  t.match(scope.toJSON(), { code: ErrorCode.InvalidRequest, message: 'Forbidden: insufficient scope', data: { error: 'insufficient_scope', scope: 'cart:read cart:write' } })

  const down = verificationUnavailable(new Error('ECONNREFUSED'))
  t.equal(down.status, 503)
  t.same(down.headers, {}, 'no challenge: re-authorizing cannot help')
  t.same(down.toJSON(), { code: ErrorCode.ServerError, message: 'Access token verification is unavailable.' })

  t.ok(scope instanceof McpError, 'an McpError: the one error mapping keeps its status and body')
  const mapped = errorReply(scope, 7, { status: 500, log: { error: () => t.fail('not logged as a server fault') } })
  t.equal(mapped.status, 403)
  t.same(mapped.body, { jsonrpc: '2.0', id: 7, error: scope.toJSON() })
  t.ok(down instanceof AuthError)
})
