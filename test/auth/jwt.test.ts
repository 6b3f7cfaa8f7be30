/**
 * The JWT verifier (lib/auth/jwt.ts) against a real JWKS served on 127.0.0.1 and tokens signed
 * with jose: a valid token gives the principal with its scopes; each way a token can be wrong is
 * refused with its own reason; an unreachable or broken JWKS is `unavailable` (the server's
 * problem: 503), while keys already fetched keep working; a key published later is picked up
 * once jose's cooldown has passed, and not before.
 */
import t from 'tap'
import { base64url, exportSPKI, SignJWT, UnsecuredJWT } from 'jose'
import { createJwtVerifier, scopesOf, type JwtOutcome, type JwtVerifierOptions } from '../../lib/auth/jwt.js'
import { makeKey, signToken, startAuthorizationServer } from './authorization-server.js'
import { until } from '../helpers/time.js'

const RESOURCE = 'https://mcp.example.com/mcp'

const key1 = await makeKey('key-1')
const as = await startAuthorizationServer([key1])
t.teardown(as.close)

function verifier (extra: Partial<JwtVerifierOptions> = {}): ReturnType<typeof createJwtVerifier> {
  return createJwtVerifier({ jwksUri: as.jwksUri, issuer: as.issuer, audience: RESOURCE, ...extra })
}

async function token (extra: Partial<Parameters<typeof signToken>[0]> = {}): Promise<string> {
  return await signToken({ key: key1, issuer: as.issuer, audience: RESOURCE, ...extra })
}

function reasonOf (out: JwtOutcome): string {
  return out.ok ? 'ok' : out.reason
}

t.test('a valid token gives the principal: sub, scopes from scope and scp, the claims', async t => {
  const v = verifier()
  const out = await v(await token({ claims: { sub: 'alice', scope: 'cart:read cart:write', scp: ['admin'], client_id: 'c1' } }))
  t.ok(out.ok)
  if (!out.ok) return
  t.equal(out.principal.id, 'alice')
  t.same(out.principal.scopes, ['cart:read', 'cart:write', 'admin'])
  t.equal(out.principal.claims.client_id, 'c1')
  t.equal(out.principal.claims.aud, RESOURCE)
  t.notOk('token' in out.principal, 'the raw token is not kept on the principal')
  t.ok(Object.isFrozen(out.principal.claims))
})

t.test('scopesOf: scope string, scp array or string, junk ignored', async t => {
  t.same(scopesOf({ scope: ' a  b ' }), ['a', 'b'])
  t.same(scopesOf({ scp: ['x', 'y', 3, '', 'has space'] }), ['x', 'y'])
  t.same(scopesOf({ scp: 'p q' }), ['p', 'q'])
  t.same(scopesOf({ scope: 42 }), [])
  t.same(scopesOf({}), [])
})

t.test('an audience list accepts any of its members; several issuers qualify the id by issuer', async t => {
  const v = createJwtVerifier({ jwksUri: as.jwksUri, issuer: [as.issuer, 'https://other.example'], audience: [RESOURCE, `${RESOURCE}/`] })
  const out = await v(await token({ audience: `${RESOURCE}/` }))
  t.ok(out.ok)
  if (out.ok) t.equal(out.principal.id, `${as.issuer}#user-1`, 'the same sub from two issuers is two principals')
})

t.test('wrong audience (another resource, or none of ours in a list)', async t => {
  const v = verifier()
  t.equal(reasonOf(await v(await token({ audience: 'https://other.example.com/mcp' }))), 'wrong_audience')
  t.equal(reasonOf(await v(await token({ audience: ['https://a.example', 'https://b.example'] }))), 'wrong_audience')
  // A token for this server's origin, not for the endpoint: audiences are compared exactly.
  t.equal(reasonOf(await v(await token({ audience: 'https://mcp.example.com' }))), 'wrong_audience')
})

t.test('wrong issuer', async t => {
  t.equal(reasonOf(await verifier()(await token({ issuer: 'https://evil.example' }))), 'wrong_issuer')
})

t.test('expiry and not-before, with the clock tolerance', async t => {
  const v = verifier({ clockToleranceMs: 30_000 })
  t.equal(reasonOf(await v(await token({ expIn: -10 }))), 'ok', 'expired 10 s ago: within the 30 s skew')
  t.equal(reasonOf(await v(await token({ expIn: -120 }))), 'expired', 'expired 2 min ago')
  t.equal(reasonOf(await v(await token({ nbfIn: 10 }))), 'ok', 'valid in 10 s: within the skew')
  t.equal(reasonOf(await v(await token({ nbfIn: 120 }))), 'not_yet_valid', 'valid in 2 min')
  const strict = verifier({ clockToleranceMs: 0 })
  t.equal(reasonOf(await strict(await token({ expIn: -10 }))), 'expired', 'no tolerance: 10 s late is expired')
})

t.test('claims a principal needs: sub and exp', async t => {
  const v = verifier()
  t.equal(reasonOf(await v(await token({ expIn: null }))), 'missing_claim', 'a token that never expires is refused')
  const noSub = await new SignJWT({}).setProtectedHeader({ alg: 'RS256', kid: 'key-1' })
    .setIssuer(as.issuer).setAudience(RESOURCE).setExpirationTime('5m').sign(key1.privateKey)
  t.equal(reasonOf(await v(noSub)), 'missing_claim')
})

t.test('a bad signature: signed by another key under our kid, or a tampered payload', async t => {
  const v = verifier()
  const impostor = await makeKey('key-1')
  t.equal(reasonOf(await v(await signToken({ key: impostor, issuer: as.issuer, audience: RESOURCE }))), 'bad_signature')
  const [h, , s] = (await token()).split('.')
  const forged = base64url.encode(JSON.stringify({ sub: 'admin', iss: as.issuer, aud: RESOURCE, exp: Math.floor(Date.now() / 1000) + 300, scope: 'admin' }))
  t.equal(reasonOf(await v(`${h}.${forged}.${s}`)), 'bad_signature')
})

t.test('alg none is refused', async t => {
  const v = verifier()
  const unsecured = new UnsecuredJWT({ sub: 'admin' }).setIssuer(as.issuer).setAudience(RESOURCE).setExpirationTime('5m').encode()
  t.equal(reasonOf(await v(unsecured)), 'alg_not_allowed')
  // The same with a kid (some libraries look the key up first).
  const [, payload] = unsecured.split('.')
  const withKid = `${base64url.encode(JSON.stringify({ alg: 'none', kid: 'key-1' }))}.${payload}.`
  t.equal(reasonOf(await v(withKid)), 'alg_not_allowed')
})

t.test('algorithm confusion: HS256 keyed with the public key is refused', async t => {
  const v = verifier()
  const pem = await exportSPKI(key1.publicKey)
  for (const secret of [new TextEncoder().encode(pem), new TextEncoder().encode(JSON.stringify(key1.jwk))]) {
    const forged = await new SignJWT({ sub: 'admin', scope: 'admin' })
      .setProtectedHeader({ alg: 'HS256', kid: 'key-1' })
      .setIssuer(as.issuer).setAudience(RESOURCE).setExpirationTime('5m').sign(secret)
    t.equal(reasonOf(await v(forged)), 'alg_not_allowed')
  }
})

t.test('an algorithm outside the allow-list is refused even with a valid signature', async t => {
  const ps = await makeKey('ps-key', 'PS256')
  as.published.push(ps)
  t.teardown(() => { as.published = as.published.filter(k => k !== ps) })
  const v = verifier({ algorithms: ['RS256'] })
  t.equal(reasonOf(await v(await signToken({ key: ps, issuer: as.issuer, audience: RESOURCE }))), 'alg_not_allowed')
  t.equal(reasonOf(await verifier()(await signToken({ key: ps, issuer: as.issuer, audience: RESOURCE }))), 'ok', 'allowed by default')
})

t.test('a token signed by a key the JWKS does not hold', async t => {
  const v = verifier()
  const stranger = await makeKey('stranger')
  t.equal(reasonOf(await v(await signToken({ key: stranger, issuer: as.issuer, audience: RESOURCE }))), 'unknown_key')
})

t.test('malformed tokens', async t => {
  const v = verifier()
  const good = await token()
  for (const bad of ['not-a-jwt', 'a.b.c', 'eyJhbGciOiJSUzI1NiJ9.e30', good.slice(0, -5)]) {
    t.equal(reasonOf(await v(bad)), 'malformed', bad.slice(0, 20))
  }
  t.equal(reasonOf(await v(`${good}A`)), 'bad_signature', 'a signature one character longer')
  const typed = verifier({ typ: 'at+jwt' })
  t.equal(reasonOf(await typed(await token())), 'malformed', 'typ required and absent')
  t.equal(reasonOf(await typed(await token({ header: { typ: 'at+jwt' } }))), 'ok')
})

t.test('JWKS unreachable or broken → unavailable (503: the server\'s problem, not the client\'s)', async t => {
  const down = await startAuthorizationServer([key1])
  const tok = await signToken({ key: key1, issuer: down.issuer, audience: RESOURCE })
  const make = (): ReturnType<typeof createJwtVerifier> => createJwtVerifier({ jwksUri: down.jwksUri, issuer: down.issuer, audience: RESOURCE, jwksTimeoutMs: 200 })

  down.mode = 'error'
  t.equal(reasonOf(await make()(tok)), 'unavailable', 'JWKS answers 500')
  down.mode = 'garbage'
  t.equal(reasonOf(await make()(tok)), 'unavailable', 'JWKS answers something that is not a key set')
  down.mode = 'hang'
  t.equal(reasonOf(await make()(tok)), 'unavailable', 'JWKS does not answer within the timeout')

  down.mode = 'ok'
  const warm = createJwtVerifier({ jwksUri: down.jwksUri, issuer: down.issuer, audience: RESOURCE, jwksCooldownMs: 0 })
  t.equal(reasonOf(await warm(tok)), 'ok', 'keys fetched while it was up')
  await down.close()
  const cold = createJwtVerifier({ jwksUri: down.jwksUri, issuer: down.issuer, audience: RESOURCE })
  t.equal(reasonOf(await cold(tok)), 'unavailable', 'connection refused')
  t.equal(reasonOf(await warm(tok)), 'ok', 'cached keys still verify while the JWKS is down')
  const stranger = await makeKey('stranger-2')
  t.equal(reasonOf(await warm(await signToken({ key: stranger, issuer: down.issuer, audience: RESOURCE }))), 'unavailable',
    'an unknown kid while the JWKS is down cannot be told apart from a rotated key: unavailable, not invalid')
})

t.test('key rotation: a new kid is picked up after the cooldown, and not before; keys are cached', async t => {
  const rot = await startAuthorizationServer([key1])
  t.teardown(rot.close)
  // Keys made up front: RSA generation can take longer than the cooldown on a busy machine.
  const key2 = await makeKey('key-2')
  const stranger = await makeKey('stranger-3')
  const v = createJwtVerifier({ jwksUri: rot.jwksUri, issuer: rot.issuer, audience: RESOURCE, jwksCooldownMs: 1_000 })
  const old = await signToken({ key: key1, issuer: rot.issuer, audience: RESOURCE })
  const fresh = await signToken({ key: key2, issuer: rot.issuer, audience: RESOURCE })
  const strange = await signToken({ key: stranger, issuer: rot.issuer, audience: RESOURCE })
  const cooledDown = async (): Promise<void> => { await until(() => !v.jwks.coolingDown, { what: 'the JWKS cooldown' }) }

  t.equal(reasonOf(await v(old)), 'ok')
  t.equal(reasonOf(await v(old)), 'ok')
  t.equal(rot.fetches, 1, 'the second token used the cached keys')

  t.equal(reasonOf(await v(fresh)), 'unknown_key', 'not published yet')
  rot.published.push(key2)
  t.ok(v.jwks.coolingDown, 'still within the cooldown')
  t.equal(reasonOf(await v(fresh)), 'unknown_key', 'published, but within the cooldown: no fetch')
  t.equal(rot.fetches, 1, 'unknown kids within the cooldown do not hit the JWKS')
  await cooledDown()
  t.equal(reasonOf(await v(fresh)), 'ok', 'after the cooldown the unknown kid fetches once and verifies')
  t.equal(rot.fetches, 2)
  t.equal(reasonOf(await v(old)), 'ok', 'the old key still verifies while published')
  t.equal(rot.fetches, 2)

  rot.published = rot.published.filter(k => k !== key1)
  await cooledDown()
  t.equal(reasonOf(await v(strange)), 'unknown_key', 'an unknown kid after the cooldown re-fetches the set')
  t.equal(rot.fetches, 3)
  t.equal(reasonOf(await v(old)), 'unknown_key', 'a withdrawn key stops verifying once the set is re-fetched')
  t.equal(reasonOf(await v(fresh)), 'ok')
})

t.test('options are validated', async t => {
  const base = { jwksUri: as.jwksUri, issuer: as.issuer, audience: RESOURCE }
  t.throws(() => createJwtVerifier({ ...base, jwksUri: 'not a url' }), /jwksUri/)
  t.throws(() => createJwtVerifier({ ...base, jwksUri: 'http://idp.example/jwks' }), /https/)
  t.throws(() => createJwtVerifier({ ...base, algorithms: ['HS256'] }), /asymmetric/)
  t.throws(() => createJwtVerifier({ ...base, algorithms: ['none'] }), /asymmetric/)
  t.throws(() => createJwtVerifier({ ...base, algorithms: [] }), /empty/)
  t.throws(() => createJwtVerifier({ ...base, issuer: [] }), /issuer/)
  t.throws(() => createJwtVerifier({ ...base, audience: '' }), /audience/)
  t.throws(() => createJwtVerifier({ ...base, clockToleranceMs: -1 }), /clockToleranceMs/)
  t.throws(() => createJwtVerifier({ ...base, jwksCooldownMs: 1.5 }), /jwksCooldownMs/)
})
