/**
 * What a client is told when the state its request needs could not be opened (the work never
 * ran): one table by refusal and subject. Every case is a 503 the client may retry, each with its
 * own text, because "busy" asks for patience while "store unavailable" is the operator's problem.
 * The state engine logs each refusal (`state/unit-report.ts`); this only answers it.
 */
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import type { Refusal } from '../state/outcome.js'
import type { Subject } from '../state/unit-of-work.js'
import { unconfirmedAnswer, unconfirmedRefusal } from './unconfirmed.js'

/**
 * `Retry-After` of a 503 for a backend that failed (a database restarting, a Redis failing over):
 * one second, so that clients come back soon rather than give up or hammer.
 */
export function backendRetry (): Record<string, string> {
  return { 'retry-after': '1' }
}

function unavailable (message: string, headers?: Record<string, string>): () => McpError {
  return () => new McpError(ErrorCode.ServerError, message, undefined, 503, headers)
}

/** The table: by refusal, by subject. */
const REFUSALS: Record<Exclude<Refusal, 'unconfirmed'>, Record<Subject, () => McpError>> = {
  busy: {
    session: unavailable('Another request of this session is still being processed.'),
    handle: unavailable('Another call on this handle is still being processed.'),
    call: unavailable('Another call with this idempotency key is still being processed.')
  },
  'lock-down': {
    session: unavailable('Session lock is unavailable.', backendRetry()),
    handle: unavailable('State lock is unavailable.', backendRetry()),
    call: unavailable('State lock is unavailable.', backendRetry())
  },
  'store-down': {
    session: unavailable('Session store is unavailable.', backendRetry()),
    handle: unavailable('State store is unavailable.', backendRetry()),
    call: unavailable('State store is unavailable.', backendRetry())
  },
  /** The stored record cannot be decoded; it can be served again once repaired or expired. */
  unreadable: {
    session: unavailable('Session data cannot be read.'),
    handle: unavailable('Handle data cannot be read.'),
    call: unavailable('The idempotency record cannot be read.')
  }
}

/**
 * The answer to a refusal to open (see the module doc); `cause` tells an unconfirmed lease
 * (nothing was done) from an unconfirmed write (it may or may not have been kept).
 */
export function refusalAnswer (refusal: Refusal, subject: Subject, cause?: unknown): McpError {
  if (refusal === 'unconfirmed') return unconfirmedAnswer(cause) ?? unconfirmedRefusal()
  return REFUSALS[refusal][subject]()
}
