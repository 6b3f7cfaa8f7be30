/**
 * Sealed `requestState` for multi-round-trip requests (2026-07-28). The client echoes it back
 * unchanged, so it is attacker-controlled: it is HMAC-SHA256-sealed with a secret every instance
 * shares, and binds the principal, the method, a digest of the params and an expiry. Anything that
 * fails verification is refused before the handler runs.
 *
 * A rotation gives several secrets: the first seals, each opens (a state sealed with the previous
 * secret, in flight while the instances change over, still opens). The others are tried only when
 * the first's MAC does not match, so a state of the current secret costs one HMAC as before.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'

/** What a sealed state carries. */
export interface StatePayload {
  /** Principal id (or null). */
  p: string | null
  /** Method. */
  m: string
  /** Digest of the params (without `_meta`, `inputResponses`, `requestState`). */
  d: string
  /** Expiry, ms since epoch. */
  e: number
  /** The handler's own state (`ctx.state`). */
  s: Record<string, unknown>
}

/** JSON with sorted keys, so equal params give equal digests whatever their key order. */
function canonical (value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`
  if (typeof value === 'object' && value !== null) {
    const keys = Object.keys(value).sort()
    return `{${keys.map(k => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(',')}}`
  }
  return JSON.stringify(value) ?? 'null'
}

/** Digest of the params that define "the same request" across rounds. */
export function paramsDigest (params: Record<string, unknown>): string {
  const { _meta: _m, inputResponses: _i, requestState: _r, ...rest } = params
  return createHash('sha256').update(canonical(rest)).digest('base64url')
}

/** The longest `requestState` accepted back (and so the longest one sealed), in characters. */
export const MAX_REQUEST_STATE = 65_536

/**
 * Why a well-formed state fails verification, as the log says it: a client seldom forges one, while
 * instances behind one balancer with different (or random, unset) secrets refuse each other's.
 */
export const SECRET_MISMATCH = 'the instance that sealed it has another requestState.secret (set the same one on every instance), or the state was altered'

/** Seals and opens request states with one secret. */
export class StateSealer {
  /** The keys: the first seals, each opens. */
  readonly #keys: readonly Buffer[]
  readonly ttl: number

  /** `secret`: one, or a list whose first seals and every one opens; none: a random key. */
  constructor (secret: string | Buffer | readonly string[] | undefined, ttl: number) {
    const secrets = secret === undefined ? [] : Array.isArray(secret) ? secret : [secret as string | Buffer]
    this.#keys = secrets.length === 0 ? [randomBytes(32)] : secrets.map(s => createHash('sha256').update(s).digest())
    this.ttl = ttl
  }

  #mac (body: string, key = this.#keys[0] as Buffer): Buffer {
    return createHmac('sha256', key).update(body).digest()
  }

  /** Whether `mac` is the MAC of `body` under one of the keys. */
  #verified (body: string, mac: Buffer): boolean {
    for (const key of this.#keys) {
      const want = this.#mac(body, key)
      if (mac.length === want.length && timingSafeEqual(mac, want)) return true
    }
    return false
  }

  /**
   * @throws {RangeError} when the sealed state would be longer than {@link MAX_REQUEST_STATE}:
   * `open` would refuse it, so the client could never finish the request. Failing the round that
   * made it points at the handler whose `ctx.state` is too big.
   */
  seal (payload: Omit<StatePayload, 'e'>): string {
    const body = Buffer.from(JSON.stringify({ ...payload, e: Date.now() + this.ttl })).toString('base64url')
    const sealed = `${body}.${this.#mac(body).toString('base64url')}`
    if (sealed.length > MAX_REQUEST_STATE) {
      throw new RangeError(`ctx.state is too large to seal into requestState (${sealed.length} characters sealed, at most ${MAX_REQUEST_STATE}); ` +
        'keep large data server-side and put a handle in ctx.state')
    }
    return sealed
  }

  /** Verifies a state; returns its payload, or a reason it is refused (and, for the log, its likely cause). */
  open (state: unknown, expect: { p: string | null, m: string, d: string }): { ok: true, payload: StatePayload } | { ok: false, reason: string, likelyCause?: string } {
    if (typeof state !== 'string') return { ok: false, reason: 'requestState must be a string' }
    if (state.length > MAX_REQUEST_STATE) return { ok: false, reason: 'requestState is too long' }
    const dot = state.indexOf('.')
    if (dot <= 0) return { ok: false, reason: 'requestState is malformed' }
    const body = state.slice(0, dot)
    const mac = Buffer.from(state.slice(dot + 1), 'base64url')
    if (!this.#verified(body, mac)) return { ok: false, reason: 'requestState failed verification', likelyCause: SECRET_MISMATCH }
    let payload: StatePayload
    try {
      payload = JSON.parse(Buffer.from(body, 'base64url').toString()) as StatePayload
    } catch {
      return { ok: false, reason: 'requestState is malformed' }
    }
    if (typeof payload.e !== 'number' || payload.e < Date.now()) return { ok: false, reason: 'requestState expired' }
    if (payload.p !== expect.p) return { ok: false, reason: 'requestState belongs to another principal' }
    if (payload.m !== expect.m || payload.d !== expect.d) return { ok: false, reason: 'requestState belongs to another request' }
    if (typeof payload.s !== 'object' || payload.s === null) return { ok: false, reason: 'requestState is malformed' }
    return { ok: true, payload }
  }
}
