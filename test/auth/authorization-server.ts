/**
 * A real (small) authorization server for the auth tests: key pairs made with jose, a JWKS served
 * by a Fastify route on 127.0.0.1:0 (keys can be published, withdrawn, the endpoint broken or
 * made to hang; fetches are counted), and a token signer. Nothing of jose is mocked.
 */
import Fastify, { type FastifyInstance } from 'fastify'
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose'

export interface SigningKey {
  kid: string
  alg: string
  privateKey: CryptoKey
  publicKey: CryptoKey
  jwk: JWK
}

/** A key pair with its public JWK (`kid`, `alg`, `use: sig`). */
export async function makeKey (kid: string, alg = 'RS256'): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true })
  const jwk = { ...await exportJWK(publicKey), kid, alg, use: 'sig' }
  return { kid, alg, privateKey, publicKey, jwk }
}

export type JwksMode = 'ok' | 'error' | 'hang' | 'garbage'

export interface AuthorizationServer {
  /** `http://127.0.0.1:<port>` — the issuer. */
  issuer: string
  jwksUri: string
  /** The keys the JWKS publishes (mutable: rotate by pushing/removing). */
  published: SigningKey[]
  /** How the JWKS endpoint answers. */
  mode: JwksMode
  /** JWKS requests served so far. */
  fetches: number
  app: FastifyInstance
  close: () => Promise<void>
}

export async function startAuthorizationServer (keys: SigningKey[]): Promise<AuthorizationServer> {
  // Force-closes sockets on close: undici keeps connections alive, and a "hang" request is still open.
  const app = Fastify({ forceCloseConnections: true })
  const as = { published: [...keys], mode: 'ok' as JwksMode, fetches: 0 } as AuthorizationServer
  app.get('/jwks', async (_req, reply) => {
    as.fetches++
    switch (as.mode) {
      case 'error': return await reply.code(500).send({ error: 'down' })
      case 'garbage': return await reply.type('application/json').send('{"keys": "not an array"}')
      case 'hang': await new Promise(resolve => setTimeout(resolve, 1_000).unref()); return { keys: [] }
      default: return { keys: as.published.map(k => k.jwk) }
    }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  as.issuer = `http://127.0.0.1:${port}`
  as.jwksUri = `${as.issuer}/jwks`
  as.app = app
  as.close = async () => { await app.close() }
  return as
}

/** Claims defaults: `iss`, `aud`, `sub`, `iat`, `exp` in 5 minutes. */
export interface TokenSpec {
  key: SigningKey
  issuer: string
  audience: string | string[]
  claims?: JWTPayload
  /** Overrides of the protected header (`kid`, `alg`, `typ`). */
  header?: Record<string, unknown>
  /** Seconds from now; `null` omits the claim. */
  expIn?: number | null
  nbfIn?: number
}

export async function signToken (t: TokenSpec): Promise<string> {
  const now = Math.floor(Date.now() / 1000)
  const jwt = new SignJWT({ sub: 'user-1', ...t.claims })
    .setProtectedHeader({ alg: t.key.alg, kid: t.key.kid, ...t.header })
    .setIssuer(t.issuer)
    .setAudience(t.audience)
    .setIssuedAt(now)
  if (t.expIn !== null) jwt.setExpirationTime(now + (t.expIn ?? 300))
  if (t.nbfIn !== undefined) jwt.setNotBefore(now + t.nbfIn)
  return await jwt.sign(t.key.privateKey)
}
