/**
 * Redis key builders. Every key of one session carries the same hash tag `{<sid>}`, so all of them
 * live in one Cluster slot and a single Lua script may touch the session and its lease together
 * (the "2 round trips per request" fast path).
 */

/** Default prefix of every key the plugin writes. */
export const DEFAULT_KEY_PREFIX = 'mcp:'

/**
 * Hash field holding a session's version. Application and protocol keys are stored as hash fields
 * under their own names, so the plugin reserves every field that starts with a NUL character for
 * itself; a session key of that shape is rejected by the Redis store.
 */
export const VERSION_FIELD = '\x00v'

/** Prefix of reserved hash fields (see {@link VERSION_FIELD}). */
export const RESERVED_FIELD_PREFIX = '\x00'

/**
 * Validates a key prefix. Braces are refused: a `{` in the prefix would become the hash tag and
 * put every session in one Cluster slot.
 */
export function assertKeyPrefix (prefix: unknown): asserts prefix is string {
  if (typeof prefix !== 'string') throw new TypeError('prefix must be a string.')
  if (prefix.includes('{') || prefix.includes('}')) throw new TypeError('prefix must not contain "{" or "}".')
}

/** The session hash: `${prefix}{${sid}}:s`. */
export function sessionKey (prefix: string, sid: string): string {
  return `${prefix}{${sid}}:s`
}

/** The session's lock lease (a string holding the random token): `${prefix}{${sid}}:lock`. */
export function lockKey (prefix: string, sid: string): string {
  return `${prefix}{${sid}}:lock`
}
