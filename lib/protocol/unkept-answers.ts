/**
 * What a client is told when the work of its request was not kept: one table from the scope's
 * outcome (`state/outcome.ts`) to the JSON-RPC error, for a session's request (handshake era) and
 * for a call on a state handle (both eras). `null`: the results stand.
 */
import { ErrorCode } from '../jsonrpc/errors.js'
import { outcomeOf, type Outcome } from '../state/outcome.js'
import type { CloseResult } from '../state/state-scope.js'
import { UNCONFIRMED_MESSAGE } from './unconfirmed.js'

/** An answer in place of the results: HTTP status, JSON-RPC code, message, data and headers. */
export interface UnkeptAnswer { status: number, code: number, message: string, data?: unknown, headers?: Record<string, string> }

type Subject = 'session' | 'handle'

/** Every 503 here is worth a retry soon (a lease lost, a backend failing over): `Retry-After: 1`. */
const RETRY = { 'retry-after': '1' }
const answer = (status: number, code: number, message: string, data?: unknown): UnkeptAnswer =>
  status === 503 ? { status, code, message, data, headers: RETRY } : { status, code, message }

/** The table: by outcome, by subject. */
const ANSWERS = {
  lost: {
    session: answer(503, ErrorCode.ServerError, 'Session lock was lost; the changes of this request were not saved.'),
    handle: answer(503, ErrorCode.ServerError, 'Handle lock was lost; the changes of this call were not saved.')
  },
  abandoned: {
    session: answer(503, ErrorCode.ServerError, 'The request was abandoned by its client; its changes were not saved.'),
    handle: answer(503, ErrorCode.ServerError, 'The call was abandoned by its client; its changes were not saved.')
  },
  failed: {
    session: answer(503, ErrorCode.ServerError, 'Session store is unavailable.'),
    handle: answer(503, ErrorCode.ServerError, 'State store is unavailable.')
  },
  unknown: {
    session: answer(503, ErrorCode.ServerError, 'Session store did not confirm the save; whether the changes of this request were saved is unknown.'),
    handle: answer(503, ErrorCode.ServerError, 'State store did not confirm the save; whether the changes of this call were saved is unknown.')
  },
  unconfirmed: {
    session: answer(503, ErrorCode.ServerError, UNCONFIRMED_MESSAGE, { reason: 'unconfirmed' }),
    handle: answer(503, ErrorCode.ServerError, UNCONFIRMED_MESSAGE, { reason: 'unconfirmed' })
  },
  gone: {
    session: answer(404, ErrorCode.SessionNotFound, 'Session not found'),
    handle: null
  }
} as const

/** The answer for an outcome (see the module doc). */
export function answerFor (outcome: Outcome, subject: Subject): UnkeptAnswer | null {
  switch (outcome.kind) {
    case 'kept':
    case 'unchanged': return null
    case 'gone': return ANSWERS.gone[subject]
    case 'not-kept': return ANSWERS[outcome.why === 'abandoned' ? 'abandoned' : 'lost'][subject]
    case 'failed': return ANSWERS.failed[subject]
    case 'unknown': return ANSWERS.unknown[subject]
    case 'unconfirmed': return ANSWERS.unconfirmed[subject]
  }
}

/** {@link answerFor} of a close; `stoppedBy` is why the work was stopped, if it was. */
export function unkeptOf (closed: CloseResult, subject: Subject, stoppedBy?: unknown): UnkeptAnswer | null {
  return answerFor(outcomeOf(closed, stoppedBy), subject)
}
