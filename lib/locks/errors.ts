/** Errors of the session lock contract. Their messages show ids cut (`shownId`): ids are secrets. */
import { shownId } from '../util/shown-id.js'

/** The lock backend failed, or the lock was misused (released twice, acquired twice). */
export class SessionLockError extends Error {
  readonly code: string
  constructor (message: string, options?: { cause?: unknown, code?: string }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'SessionLockError'
    this.code = options?.code ?? 'MCP_SESSION_LOCK_ERROR'
  }
}

/** The lock stayed busy for the whole acquire timeout. */
export class SessionLockTimeoutError extends SessionLockError {
  declare readonly sessionId: string
  readonly timeout: number
  constructor (sessionId: string, timeout: number) {
    super(`Timed out after ${(timeout / 1000).toFixed(3)}s waiting for the lock of session ${shownId(sessionId)}`,
      { code: 'MCP_SESSION_LOCK_TIMEOUT' })
    this.name = 'SessionLockTimeoutError'
    // Not enumerable: a logged error (pino's serializer copies own enumerable fields) never carries the whole id.
    Object.defineProperty(this, 'sessionId', { value: sessionId, enumerable: false })
    this.timeout = timeout
  }
}

/**
 * `code` values of the {@link SessionLockError}s the bundled locks throw (besides the default
 * `MCP_SESSION_LOCK_ERROR` of a backend failure and `MCP_SESSION_LOCK_TIMEOUT`).
 */
export const SessionLockErrorCodes = {
  /** `release()` of a lease that is not held (released twice). */
  NOT_HELD: 'MCP_SESSION_LOCK_NOT_HELD',
  /** `acquire()` by an owner that already holds that session's lock. */
  ALREADY_HELD: 'MCP_SESSION_LOCK_ALREADY_HELD',
  /** The lock was closed (waiters are rejected with it; a lease's signal aborts with it). */
  CLOSED: 'MCP_SESSION_LOCK_CLOSED',
  /** Reason of a lease's `signal` when the lease was lost (a Redis lease that ran out). */
  LEASE_LOST: 'MCP_SESSION_LEASE_LOST',
  /** An id the lock cannot use (the file lock accepts only path-safe ids). */
  INVALID_ID: 'MCP_SESSION_LOCK_INVALID_ID'
} as const

// Factories of the errors the bundled locks throw (one message per situation).

/** `release()` of a lease that is no longer held. */
export function notHeldError (id: string): SessionLockError {
  return new SessionLockError(`The lock of session ${shownId(id)} is not held.`, { code: SessionLockErrorCodes.NOT_HELD })
}

/** `acquire()` by an owner that holds the lock already: an error instead of a deadlock. */
export function alreadyHeldError (id: string): SessionLockError {
  return new SessionLockError(`The lock of session ${shownId(id)} is already held by this owner.`,
    { code: SessionLockErrorCodes.ALREADY_HELD })
}

/** Anything asked of a closed lock. */
export function closedError (): SessionLockError {
  return new SessionLockError('The session lock is closed.', { code: SessionLockErrorCodes.CLOSED })
}

/** The backend failed: the cause is kept, and its message appended so a log line shows it. */
export function backendError (id: string, cause: unknown): SessionLockError {
  const detail = cause instanceof Error ? cause.message : String(cause)
  return new SessionLockError(`Failed to acquire the lock of session ${shownId(id)} (${detail})`, { cause })
}
