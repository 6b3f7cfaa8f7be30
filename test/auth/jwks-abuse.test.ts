/**
 * What an anonymous client can do to the JWT path (issue 40, items 3 and 4): a token without `kid`
 * while the JWKS holds several keys (normal during a rotation) is tried against each candidate —
 * a valid one is accepted, a forged one is 401 `invalid_token` with no error line, never a 503.
 * While the JWKS fails, a failed fetch closes the door for a backoff: a flood of unknown `kid`s, or
 * of tokens at start-up, makes a handful of fetches and one error line per failed fetch, and the
 * keys are fetched again once the JWKS is back.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import mcp from '../../lib/index.js'
import { modernHeaders, rpc } from '../helpers/wire.js'
import { until } from '../helpers/time.js'
import { makeKey, signToken, startAuthorizationServer, type AuthorizationServer } from './authorization-server.js'

const RESOURCE = 'https://mcp.example.com/mcp'

interface Logged { app: FastifyInstance, lines: Array<Record<string, any>> }

async function appOn (t: Test, as: AuthorizationServer, jwt: Record<string, unknown> = {}): Promise<Logged> {
  const lines: Array<Record<string, any>> = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (l: string) => { lines.push(JSON.parse(l)) } } } })
  t.teardown(() => app.close())
  await app.register(mcp, { auth: { resource: RESOURCE, authorizationServers: [as.issuer], jwt: { jwksUri: as.jwksUri, ...jwt } } })
  app.mcp.tool({ name: 'who', description: 'Says who calls' }, async (_a, ctx) => `hello ${String(ctx.principal?.id)}`)
  await app.ready()
  return { app, lines }
}

async function callWho (app: FastifyInstance, token: string): Promise<{ status: number, body: Record<string, any>, challenge: unknown }> {
  const body = rpc('tools/call', { name: 'who', arguments: {} })
  const res = await app.inject({ method: 'POST', url: '/mcp', payload: body, headers: { ...modernHeaders(body), authorization: `Bearer ${token}` } })
  return { status: res.statusCode, body: res.json(), challenge: res.headers['www-authenticate'] }
}

const errorLines = (lines: Array<Record<string, any>>): Array<Record<string, any>> => lines.filter(l => l.level >= 50)

t.test('a token without kid against a two-key JWKS: valid → 200, forged → 401 invalid_token, no error line', async t => {
  const oldKey = await makeKey('old')
  const newKey = await makeKey('new')
  const as = await startAuthorizationServer([oldKey, newKey])
  t.teardown(as.close)
  const { app, lines } = await appOn(t, as)

  for (const key of [oldKey, newKey]) {
    const valid = await signToken({ key, issuer: as.issuer, audience: RESOURCE, claims: { sub: `by-${key.kid}` }, header: { kid: undefined } })
    t.notOk(JSON.parse(Buffer.from(valid.split('.')[0], 'base64url').toString()).kid, 'the token names no kid')
    const ok = await callWho(app, valid)
    t.equal(ok.status, 200, `a valid kid-less token signed by ${key.kid} is accepted`)
    t.match(ok.body, { result: { content: [{ text: `hello by-${key.kid}` }] } })
  }

  const stranger = await makeKey('stranger')
  const forged = await signToken({ key: stranger, issuer: as.issuer, audience: RESOURCE, claims: { sub: 'admin' }, header: { kid: undefined } })
  const refused = await callWho(app, forged)
  t.equal(refused.status, 401, 'a forged kid-less token is refused as the client\'s fault')
  t.match(refused.challenge, /error="invalid_token"/)
  t.match(refused.body, { error: { data: { error: 'invalid_token' } } })
  t.same(errorLines(lines), [], 'no error-level line for a forged token')
})

t.test('200 unknown-kid tokens against a failing JWKS: one fetch per backoff, one error line per failed fetch', async t => {
  const key = await makeKey('k1')
  const as = await startAuthorizationServer([key])
  t.teardown(as.close)
  // Cooldown 0: jose alone would re-fetch for every unknown kid. The backoff is longer than the test.
  const { app, lines } = await appOn(t, as, { jwksCooldownMs: 0, jwksRetryMs: 60_000 })
  t.equal((await callWho(app, await signToken({ key, issuer: as.issuer, audience: RESOURCE }))).status, 200, 'keys fetched while the JWKS is up')
  t.equal(as.fetches, 1)

  as.mode = 'error'
  const strangers = await Promise.all(Array.from({ length: 4 }, async (_, i) => await makeKey(`stranger-${i}`)))
  const statuses: number[] = []
  for (let round = 0; round < 10; round++) {
    const tokens = await Promise.all(Array.from({ length: 20 }, async (_, i) => await signToken({ key: strangers[i % 4], issuer: as.issuer, audience: RESOURCE })))
    statuses.push(...(await Promise.all(tokens.map(async tok => (await callWho(app, tok)).status))))
  }
  t.equal(statuses.length, 200)
  t.ok(statuses.every(s => s === 503), 'an unknown kid while the JWKS is down: 503 (cannot be told apart from a rotation)')
  t.ok(as.fetches - 1 <= 2, `a handful of fetches for 200 requests (made ${as.fetches - 1})`)
  t.equal(errorLines(lines).length, 1, 'one error line: the one failed fetch')
  t.match(errorLines(lines)[0], { msg: /JWKS fetch failed/ })
  t.equal((await callWho(app, await signToken({ key, issuer: as.issuer, audience: RESOURCE }))).status, 200, 'cached keys still verify meanwhile')
})

t.test('300 tokens at start-up against a failing JWKS: a handful of fetches, then the keys once it is back', async t => {
  const key = await makeKey('k1')
  const as = await startAuthorizationServer([key])
  t.teardown(as.close)
  as.mode = 'error'
  const { app, lines } = await appOn(t, as, { jwksRetryMs: 1_000 })
  const tok = await signToken({ key, issuer: as.issuer, audience: RESOURCE })
  const statuses = await Promise.all(Array.from({ length: 300 }, async () => (await callWho(app, tok)).status))
  t.ok(statuses.every(s => s === 503), 'no keys yet: 503')
  const fetched = as.fetches
  t.ok(fetched <= 3, `a handful of fetches for 300 requests (made ${fetched})`)
  t.equal(errorLines(lines).length, fetched, 'one error line per failed fetch, not per request')

  as.mode = 'ok'
  await until(async () => (await callWho(app, tok)).status === 200, { what: 'the keys fetched once the JWKS is back', every: 100, timeout: 20_000 })
  t.ok(as.fetches > fetched, 'fetched again after the backoff')
})
