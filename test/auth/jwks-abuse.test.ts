/**
 * What an anonymous client can do to the JWT path (issue 40, items 3 and 4): a token without `kid`
 * while the JWKS holds several keys (normal during a rotation) is tried against each candidate —
 * a valid one is accepted, a forged one is 401 `invalid_token` with no error line, never a 503.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import mcp from '../../lib/index.js'
import { modernHeaders, rpc } from '../helpers/wire.js'
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
