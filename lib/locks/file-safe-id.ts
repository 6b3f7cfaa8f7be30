/**
 * The ids a file-backed lock or store accepts before an id touches a path: base64url characters
 * only (no dot, no slash, no separator of any platform), 16 to 128 of them. Every session id the
 * plugin mints fits. Defined here, the lowest layer that needs it; `sessions/session-id.ts` gathers
 * it with the other session-id rules.
 */

/** `^[A-Za-z0-9_-]{16,128}$` */
export const FILE_SAFE_ID_PATTERN = /^[A-Za-z0-9_-]{16,128}$/

/** Whether `id` may be used in a file name (see {@link FILE_SAFE_ID_PATTERN}). */
export function isFileSafeId (id: unknown): id is string {
  return typeof id === 'string' && FILE_SAFE_ID_PATTERN.test(id)
}

/**
 * The key of a state record that is not a session (a state handle, a task): `~<kind>~<id>`, the
 * kind lower-case, the id as a session id. Session ids never start with `~` (the plugin mints
 * base64url, and the handshake wire refuses ids that start with it), so the two cannot collide.
 */
export const STATE_KEY_PATTERN = /^~[a-z][a-z0-9_]{0,31}~[A-Za-z0-9_-]{16,128}$/

/** Whether `key` is a session id or a state key a file-backed lock or store may use as a name. */
export function isFileSafeKey (key: unknown): key is string {
  return typeof key === 'string' && (FILE_SAFE_ID_PATTERN.test(key) || STATE_KEY_PATTERN.test(key))
}
