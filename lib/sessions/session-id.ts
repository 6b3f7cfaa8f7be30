/**
 * Session ids. The plugin mints them from a CSPRNG as base64url text; ids that come back in the
 * `Mcp-Session-Id` header are checked against the spec's alphabet before any store sees them, and
 * the file store and lock additionally accept only a strict, path-safe shape.
 */
import { randomBytes } from 'node:crypto'
import { FILE_SAFE_ID_PATTERN, isFileSafeId } from '../locks/file-safe-id.js'

/**
 * What the MCP spec allows in a session id: visible ASCII (0x21–0x7E). The length cap keeps a
 * hostile header from becoming a huge Redis key.
 */
export const SESSION_ID_PATTERN = /^[\x21-\x7E]{1,256}$/

/** The pattern's length cap and the complement of its class, for {@link isValidSessionId}. */
const MAX_SESSION_ID_LENGTH = 256
const NOT_SESSION_ID_CHAR = /[^\x21-\x7E]/

/** What the file store and file lock accept before an id touches a path: `^[A-Za-z0-9_-]{16,128}$`. */
export const FILE_SAFE_SESSION_ID_PATTERN = FILE_SAFE_ID_PATTERN

/** Number of random bytes in a minted id: 192 bits, 32 base64url characters. */
const ID_BYTES = 24

/** Mints a session id: 32 base64url characters from the CSPRNG (valid for every store). */
export function generateSessionId (): string {
  return randomBytes(ID_BYTES).toString('base64url')
}

/**
 * Whether `id` is a well-formed session id (visible ASCII, at most 256 characters): what
 * {@link SESSION_ID_PATTERN} matches. The length is compared and a character outside the class
 * searched for: every handshake-era request checks its header (twice), and the anchored, counted
 * pattern costs more per character than the search (a loop over the character codes costs as much
 * as the pattern).
 */
export function isValidSessionId (id: unknown): id is string {
  return typeof id === 'string' && id.length !== 0 && id.length <= MAX_SESSION_ID_LENGTH && !NOT_SESSION_ID_CHAR.test(id)
}

/** Whether `id` may be used in a file name (`^[A-Za-z0-9_-]{16,128}$`). */
export const isFileSafeSessionId: (id: unknown) => id is string = isFileSafeId
