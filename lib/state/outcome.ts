/**
 * What a state scope's close did, as the protocol layer answers it: one typed outcome for
 * sessions and state handles alike, taken from what the store did (never from what the lock
 * thinks happened before or after). Each wire maps it to its answer in one table
 * (`protocol/unkept-answers.ts`).
 */
import { SessionEndedError } from '../bus/session-ended.js'
import { OutcomeUnknownError } from '../errors.js'
import { SessionLockError, SessionLockTimeoutError } from '../locks/errors.js'
import { isUnconfirmed } from '../redis/replica-ack.js'
import { SessionDataError } from '../sessions/session-store.js'
import type { SaveResult } from '../sessions/session-store.js'

/**
 * What a close did:
 * - `unchanged`: nothing to write (the lease was released or passed on);
 * - `ok`: the changes were written;
 * - `gone`: the state was destroyed meanwhile; nothing was written, nor re-created;
 * - `fenced`: the lease was lost and someone else changed the state; nothing was written;
 * - `lost`: the lease was known to be lost (or could not be taken back after a wait), so the
 *   save was not even tried: nothing was written;
 * - `abandoned`: the request's client left and the lease was released after the grace; nothing
 *   was written;
 * - `skipped`: not written because an earlier record of the same unit of work was not kept (a
 *   backend that cannot write several records at once);
 * - `failed`: the backend failed (`error`); `outcomeOf` (`outcome.ts`) tells a refusal from an
 *   unknown outcome. Either way the work must not be reported as done.
 * `releaseError`: releasing the lease failed (it then expires in the backend).
 *
 * A scope closed without keeping its changes (a save before a wait for the client that failed,
 * a lease that could not be taken back after it, a release after the grace) answers every later
 * close with that result: a handler that caught the error and returned is not told "unchanged".
 */
export type CloseResult =
  | { status: 'unchanged' | SaveResult | 'lost' | 'abandoned' | 'skipped', releaseError?: unknown }
  | { status: 'failed', error: unknown, releaseError?: unknown }

/**
 * - `kept`: the changes were written (a success answer);
 * - `unchanged`: nothing to write (a success answer, unless the work was stopped: see `why`);
 * - `not-kept`: nothing was written, and `why`: the lease was `lost` (or could not be taken
 *   back after a wait for the client, or its loss stopped the work), someone else changed the
 *   state meanwhile (`fenced`), the work was `abandoned` (its client left and the grace passed),
 *   or an earlier record of the request was not kept (`skipped`);
 * - `gone`: the state ended meanwhile; nothing was written, nor re-created;
 * - `unknown`: the save itself timed out or lost its connection: the store may or may not have
 *   written it (`error`);
 * - `unconfirmed`: the save was written on the primary but too few replicas acknowledged it
 *   (`waitReplicas`, docs/failover.md): it may or may not survive a failover (`error`);
 * - `failed`: the store refused the save (`error`): nothing was written.
 */
export type Outcome =
  | { kind: 'kept' | 'unchanged' | 'gone' }
  | { kind: 'not-kept', why: 'lost' | 'fenced' | 'abandoned' | 'skipped' }
  | { kind: 'unknown' | 'unconfirmed' | 'failed', error: unknown }

/**
 * Why a scope could not be opened (the work never ran): the lock wait timed out (`busy`: another
 * request holds the key), the lock failed (`lock-down`), the stored state cannot be decoded
 * (`unreadable`), the store failed (`store-down`), or too few replicas confirmed the lease
 * (`unconfirmed`, `waitReplicas`).
 */
export type Refusal = 'busy' | 'lock-down' | 'unreadable' | 'store-down' | 'unconfirmed'

/** The refusal of an error that `StateBackend.open()` rejected with. */
export function refusalOf (err: unknown): Refusal {
  if (isUnconfirmed(err)) return 'unconfirmed'
  if (err instanceof SessionLockTimeoutError) return 'busy'
  if (err instanceof SessionLockError) return 'lock-down'
  if (err instanceof SessionDataError) return 'unreadable'
  return 'store-down'
}

/** Why a request's work was stopped when a lease of it was lost (its `ctx.signal`'s reason). */
export class LeaseLostError extends Error {
  constructor (readonly what: 'session' | 'handle' | 'call' = 'session') { super(`${what} lock lost`) }
}

/**
 * Whether a save that threw may still have been written: the request was sent and no answer came
 * (a timeout, a connection closed under it), which the stores say with an `OutcomeUnknownError`
 * (the Redis and PostgreSQL code tells it by the driver error's type and code). Any other error
 * is the store refusing the save.
 */
export function outcomeUnknown (err: unknown): boolean {
  return err instanceof OutcomeUnknownError
}

export { SessionEndedError }

const KEPT: Outcome = { kind: 'kept' }
const UNCHANGED: Outcome = { kind: 'unchanged' }
const GONE: Outcome = { kind: 'gone' }
const LOST: Outcome = { kind: 'not-kept', why: 'lost' }
const FENCED: Outcome = { kind: 'not-kept', why: 'fenced' }
const ABANDONED: Outcome = { kind: 'not-kept', why: 'abandoned' }
const SKIPPED: Outcome = { kind: 'not-kept', why: 'skipped' }

/**
 * The outcome of a close; `stoppedBy` is why the work was stopped, if it was: a lease lost while it
 * ran makes an unchanged close a lost one (the work did not finish).
 */
export function outcomeOf (closed: CloseResult, stoppedBy?: unknown): Outcome {
  switch (closed.status) {
    case 'ok': return KEPT
    // Stopped before it finished: by the loss of a lease (nothing it did stands), or by the end of
    // its session (the record is gone).
    case 'unchanged': return stoppedBy instanceof LeaseLostError ? LOST : stoppedBy instanceof SessionEndedError ? GONE : UNCHANGED
    case 'gone': return GONE
    case 'fenced': return FENCED
    case 'lost': return LOST
    case 'abandoned': return ABANDONED
    case 'skipped': return SKIPPED
    case 'failed': return { kind: failedKind(closed.error), error: closed.error }
  }
}

function failedKind (err: unknown): 'unknown' | 'unconfirmed' | 'failed' {
  if (isUnconfirmed(err)) return 'unconfirmed'
  return outcomeUnknown(err) ? 'unknown' : 'failed'
}
