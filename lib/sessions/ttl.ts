/** The idle time-to-live every store accepts: its default and its validation. */

/** Default idle TTL of a session in milliseconds: one hour. */
export const DEFAULT_SESSION_TTL = 3_600_000

/**
 * Validates a session TTL in milliseconds.
 * @throws {RangeError} "ttl must be greater than 0."
 */
export function checkTtl (ttl: unknown): number {
  if (typeof ttl !== 'number' || !(ttl > 0) || !Number.isFinite(ttl)) throw new RangeError('ttl must be greater than 0.')
  return ttl
}
