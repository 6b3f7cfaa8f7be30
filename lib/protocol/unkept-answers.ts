/**
 * What a client is told when the work of its request was not kept: one table from a record's
 * outcome (`state/outcome.ts`) and subject (a handshake-era session, a state handle, a keyed call's record) to the
 * JSON-RPC error, and the answer of each request of a unit of work (`state/unit-of-work.ts`):
 * `null` when its results stand. A request is answered by the records it worked on — the
 * session (every request of the POST) and the handles its own calls used — and when the unit
 * kept part of its work (a backend that cannot write several records at once, or changes saved
 * before a question to the client), the error says which part was kept and which was not.
 */
import { SessionEndedError } from '../bus/session-ended.js'
import { ErrorCode, errorResponse, type RequestId } from '../jsonrpc/errors.js'
import { resultResponse } from '../jsonrpc/messages.js'
import { LeaseLostError, type Outcome } from '../state/outcome.js'
import type { Part, Subject, UnitOutcome } from '../state/unit-of-work.js'
import { UNCONFIRMED_MESSAGE } from './unconfirmed.js'

/** An answer in place of the results: HTTP status, JSON-RPC code, message, data and headers. */
export interface UnkeptAnswer { status: number, code: number, message: string, data?: unknown, headers?: Record<string, string> }

/** A tool call's answer as a tool result with `isError` (a handle that ended under the call). */
export interface UnkeptToolResult { toolError: string }

/** Every 503 here is worth a retry soon (a lease lost, a backend failing over): `Retry-After: 1`. */
const RETRY = { 'retry-after': '1' }
const answer = (status: number, code: number, message: string, data?: unknown): UnkeptAnswer =>
  status === 503 ? { status, code, message, data, headers: RETRY } : { status, code, message }

/** The table: by outcome, by subject. */
const ANSWERS = {
  lost: {
    session: answer(503, ErrorCode.ServerError, 'Session lock was lost; the changes of this request were not saved.'),
    handle: answer(503, ErrorCode.ServerError, 'Handle lock was lost; the changes of this call were not saved.'),
    call: answer(503, ErrorCode.ServerError, 'The idempotency record\'s lock was lost; the call was stopped and not recorded.')
  },
  abandoned: {
    session: answer(503, ErrorCode.ServerError, 'The request was abandoned by its client; its changes were not saved.'),
    handle: answer(503, ErrorCode.ServerError, 'The call was abandoned by its client; its changes were not saved.'),
    call: answer(503, ErrorCode.ServerError, 'The call was abandoned by its client; it was not recorded.')
  },
  skipped: {
    session: answer(503, ErrorCode.ServerError, 'The changes of this request were not saved: another part of it could not be kept.'),
    handle: answer(503, ErrorCode.ServerError, 'The changes of this call were not saved: another part of the request could not be kept.'),
    call: answer(503, ErrorCode.ServerError, 'The call was not recorded: another part of the request could not be kept.')
  },
  failed: {
    session: answer(503, ErrorCode.ServerError, 'Session store is unavailable.'),
    handle: answer(503, ErrorCode.ServerError, 'State store is unavailable.'),
    call: answer(503, ErrorCode.ServerError, 'State store is unavailable.')
  },
  unknown: {
    session: answer(503, ErrorCode.ServerError, 'Session store did not confirm the save; whether the changes of this request were saved is unknown. ' +
      'A retry of a tool call with the same idempotency key says which: it answers the recorded result if they were, and runs the call if not.'),
    handle: answer(503, ErrorCode.ServerError, 'State store did not confirm the save; whether the changes of this call were saved is unknown. ' +
      'A retry with the same idempotency key says which: it answers the recorded result if they were, and runs the call if not.'),
    call: answer(503, ErrorCode.ServerError, 'State store did not confirm the save of the idempotency record.')
  },
  unconfirmed: {
    session: answer(503, ErrorCode.ServerError, UNCONFIRMED_MESSAGE, { reason: 'unconfirmed' }),
    handle: answer(503, ErrorCode.ServerError, UNCONFIRMED_MESSAGE, { reason: 'unconfirmed' }),
    call: answer(503, ErrorCode.ServerError, UNCONFIRMED_MESSAGE, { reason: 'unconfirmed' })
  },
  gone: {
    session: answer(404, ErrorCode.SessionNotFound, 'Session not found'),
    handle: null,
    call: null
  }
} as const

/** The answer for an outcome (see the module doc); `null` for a kept one, and for a handle gone. */
export function answerFor (outcome: Outcome, subject: Subject): UnkeptAnswer | null {
  switch (outcome.kind) {
    case 'kept':
    case 'unchanged': return null
    case 'gone': return ANSWERS.gone[subject]
    case 'not-kept': return ANSWERS[outcome.why === 'fenced' ? 'lost' : outcome.why][subject]
    case 'failed': return ANSWERS.failed[subject]
    case 'unknown': return ANSWERS.unknown[subject]
    case 'unconfirmed': return ANSWERS.unconfirmed[subject]
  }
}

/**
 * The answer for a request stopped while it ran (its results are not reported): its lease lost,
 * its session ended; `null` when it gets no response (cancelled, its client gone).
 */
export function stoppedAnswer (reason: unknown): UnkeptAnswer | null {
  if (reason instanceof LeaseLostError) return ANSWERS.lost[reason.what]
  if (reason instanceof SessionEndedError) return ANSWERS.gone.session
  return null
}

const kept = (p: Part): boolean => p.outcome.kind === 'kept' || p.outcome.kind === 'unchanged'

/** How a part is named in an answer's `data`: `session`, or `handle:<kind>`. */
function nameOf (p: Part): string {
  return p.subject === 'session' ? 'session' : `handle:${kindOf(p)}`
}

/**
 * The answer of one request (`member`: its JSON-RPC message; `undefined`: every request) of a
 * unit that ended with `outcome`: `null` when its results stand. A request is answered by the
 * session (every request's) and the handles its own calls used; what it is told is why the unit
 * did not keep them — the part that failed, not one skipped because of it.
 */
export function unitAnswer (outcome: UnitOutcome, member?: object): UnkeptAnswer | UnkeptToolResult | null {
  // A keyed call's own record (a call on no state) holds no changes of the call: the call's
  // result stands whatever became of it (a retry then runs again; the engine logged why).
  const parts = outcome.parts.some(p => p.subject === 'call') ? outcome.parts.filter(p => p.subject !== 'call') : outcome.parts
  const mine = (p: Part): boolean => p.subject === 'session' || member === undefined || p.members.includes(member)
  const failed = parts.find(p => !kept(p) && mine(p))
  if (failed === undefined) return null
  const cause = parts.find(p => !kept(p) && !skipped(p)) ?? failed
  if (cause.subject === 'handle' && cause.outcome.kind === 'gone') {
    if (mine(cause)) {
      // Written one by one, the parts before it may have been kept: the result says so.
      const keptNames = parts.filter(p => p.outcome.kind === 'kept').map(nameOf)
      const also = keptNames.length === 0 ? '' : ` The request's other changes were saved (${keptNames.join(', ')}).`
      return { toolError: `Unknown or expired ${kindOf(cause)} handle.${also}` }
    }
    return withParts(answer(503, ErrorCode.ServerError, `The changes of this request were not saved: the ${kindOf(cause)} handle another call of it used ended meanwhile.`), parts, outcome.keptBefore)
  }
  const base = answerFor(cause.outcome, cause.subject) ?? ANSWERS.skipped[failed.subject]
  if (parts.length < 2 && !outcome.keptBefore) return base
  return withParts(base, parts, outcome.keptBefore)
}

const skipped = (p: Part): boolean => p.outcome.kind === 'not-kept' && p.outcome.why === 'skipped'
const kindOf = (p: Part): string => p.key.split('~')[1]

/** `base`, saying which parts of the request were kept and which were not. */
function withParts (base: UnkeptAnswer, parts: readonly Part[], keptBefore: boolean): UnkeptAnswer {
  const keptNames = parts.filter(p => p.outcome.kind === 'kept').map(nameOf)
  const notKept = parts.filter(p => !kept(p)).map(nameOf)
  let message = base.message
  if (keptNames.length > 0) message += ` Kept: ${keptNames.join(', ')}; not kept: ${notKept.join(', ')}.`
  if (keptBefore) message += ' The changes made before the request asked the client were saved; those made after were not.'
  const data = { ...(base.data as object | undefined), kept: keptNames, notKept, keptBeforeQuestion: keptBefore }
  return { ...base, message, data }
}

/** A POST's responses once its unit of work ended, and the status and headers of a lone error. */
export interface UnkeptResponses {
  responses: unknown[]
  /** Set when a result was replaced by an error: its status and headers (a lone request's POST takes them). */
  status?: number
  headers?: Record<string, string>
  /** The errors given in place of results (for the spans). */
  errors: UnkeptAnswer[]
}

/**
 * Replaces each result whose request's work was not kept by what it is owed (see
 * {@link unitAnswer}); `members[i]` is the request `responses[i]` answers. Error responses stay.
 */
export function unkeptResponses (responses: readonly unknown[], members: ReadonlyArray<object | null>, outcome: UnitOutcome): UnkeptResponses {
  const out: UnkeptResponses = { responses: [], errors: [] }
  for (let i = 0; i < responses.length; i++) {
    const r = responses[i] as { id: RequestId, result?: unknown }
    const unkept = 'result' in r ? unitAnswer(outcome, members[i] ?? undefined) : null
    if (unkept === null) {
      out.responses.push(r)
    } else if ('toolError' in unkept) {
      out.responses.push(resultResponse(r.id, { content: [{ type: 'text', text: unkept.toolError }], isError: true }))
    } else {
      out.status = unkept.status
      out.headers = unkept.headers
      out.errors.push(unkept)
      out.responses.push(errorResponse(r.id, unkept.code, unkept.message, unkept.data))
    }
  }
  return out
}
