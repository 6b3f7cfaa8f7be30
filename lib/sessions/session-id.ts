/**
 * Session ids. The plugin mints them from a CSPRNG as base64url text; ids that come back in the
 * `Mcp-Session-Id` header are checked against the spec's alphabet before any store sees them, and
 * the file store and lock additionally accept only a strict, path-safe shape.
 */
import { randomBytes } from 'node:crypto'

/**
 * What the MCP spec allows in a session id: visible ASCII (0x21–0x7E). The length cap keeps a
 * hostile header from becoming a huge Redis key.
 */
export const SESSION_ID_PATTERN = /^[\x21-\x7E]{1,256}$/

/**
 * What the file store and file lock accept before an id touches a path: base64url characters only
 * (no dot, no slash, no separator of any platform), 16 to 128 of them.
 */
export const FILE_SAFE_SESSION_ID_PATTERN = /^[A-Za-z0-9_-]{16,128}$/

/** Number of random bytes in a minted id: 192 bits, 32 base64url characters. */
const ID_BYTES = 24

/** Mints a session id: 32 base64url characters from the CSPRNG (valid for every store). */
export function generateSessionId (): string {
  return randomBytes(ID_BYTES).toString('base64url')
}

/** Whether `id` is a well-formed session id (visible ASCII, at most 256 characters). */
export function isValidSessionId (id: unknown): id is string {
  return typeof id === 'string' && SESSION_ID_PATTERN.test(id)
}

/** Whether `id` may be used in a file name (`^[A-Za-z0-9_-]{16,128}$`). */
export function isFileSafeSessionId (id: unknown): id is string {
  return typeof id === 'string' && FILE_SAFE_SESSION_ID_PATTERN.test(id)
}
