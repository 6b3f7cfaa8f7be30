/**
 * Fresh 128-bit lease tokens, cut from a pooled random text: a randomBytes() call per acquisition
 * cost more than the rest of the acquire on the request path, and hex-encoding each token's 16
 * bytes (`Buffer#toString`, a call into C++) costs far more than a slice of 256 tokens' worth of
 * hex encoded at once (docs/performance.md). Shared by the Redis and PostgreSQL locks.
 */
import { randomBytes } from 'node:crypto'

const TOKEN_CHARS = 32
let tokenPool = ''
let tokenOffset = 0

/** A new random token: 32 hex characters. */
export function newLeaseToken (): string {
  if (tokenOffset + TOKEN_CHARS > tokenPool.length) { tokenPool = randomBytes(TOKEN_CHARS / 2 * 256).toString('hex'); tokenOffset = 0 }
  const token = tokenPool.slice(tokenOffset, tokenOffset + TOKEN_CHARS)
  tokenOffset += TOKEN_CHARS
  return token
}
