/**
 * The state engine's log lines: one per subject and outcome of a close that did not go as
 * planned, and one per refusal to open (a lock wait that timed out is a warning, unreadable data
 * an error with its cause, a backend down goes to the subject's outage log: once per outage).
 * Sessions and handles share every line; what names the record differs: a session by its cut id,
 * a handle by its kind (a handle id is a bearer secret of whoever holds it).
 */
import { OutageLog, type OutageLogger } from '../util/outage-log.js'
import { shownId } from '../util/shown-id.js'
import type { CloseResult, Refusal } from './outcome.js'
import { LeaseLostError } from './outcome.js'

/**
 * What a unit of work holds: a handshake-era session, a state handle, or the idempotency record
 * of a keyed call on no state (`~call~<digest>`).
 */
export type Subject = 'session' | 'handle' | 'call'

/** What the engine logs to (a Fastify/pino logger fits). */
export interface UnitLogger extends OutageLogger {
  info (obj: object, msg: string): void
}

/** The log fields naming a record without its secret. */
export function fieldsOf (subject: Subject, key: string): Record<string, unknown> {
  if (subject === 'session') return { sessionId: shownId(key) }
  // A call record's name is a digest of its key: its start names it without helping a guess.
  return subject === 'handle' ? { handleKind: key.split('~')[1] } : { callRecord: key.slice(6, 14) }
}

/** The outage logs of one engine, a subject each ("session store", "handle lock", …). */
export type Outages = Record<Subject, OutageLog>

export function newOutages (): Outages {
  return { session: new OutageLog(), handle: new OutageLog(), call: new OutageLog() }
}

/**
 * Logs what a close that did not write means (the caller decides what the client is told);
 * `stoppedBy` is why the work was stopped, if it was.
 */
export function reportClose (subject: Subject, key: string, closed: CloseResult, log: UnitLogger, stoppedBy?: unknown): void {
  const fields = fieldsOf(subject, key)
  switch (closed.status) {
    case 'unchanged':
      // Stopped by the loss before it changed anything: nothing to drop, but its client is told 503.
      if (stoppedBy instanceof LeaseLostError) log.warn({ ...fields, result: 'lost' }, `${subject} lock lost; the work was stopped before it changed anything`)
      break
    case 'gone':
      if (subject === 'session') log.warn({ ...fields, result: 'gone' }, 'session ended meanwhile; changes dropped')
      else log.info({ ...fields, result: 'gone' }, 'handle ended during the call; changes dropped')
      break
    case 'fenced': log.warn({ ...fields, result: 'fenced' }, `${subject} lock lost and the ${subject} changed meanwhile; changes dropped`); break
    case 'lost': log.warn({ ...fields, result: 'lost' }, `${subject} lock lost; changes dropped`); break
    case 'abandoned': log.warn({ ...fields, result: 'abandoned' }, 'the request\'s client left and its lease was released after the grace; changes dropped'); break
    case 'skipped': log.warn({ ...fields, result: 'skipped' }, `${subject} changes not saved: an earlier part of the request was not kept`); break
    case 'failed': log.error({ err: closed.error, ...fields }, `${subject} save failed`)
  }
  if (closed.releaseError !== undefined) {
    log.warn({ err: closed.releaseError, ...fields }, `${subject} lock release failed; it expires in the backend`)
  }
}

/** Logs a refusal to open (see the module doc). */
export function reportRefusal (subject: Subject, key: string, refusal: Refusal, err: unknown, log: UnitLogger, outages: Outages): void {
  const fields = fieldsOf(subject, key)
  switch (refusal) {
    case 'busy': log.warn(fields, `${subject} busy: lock wait timed out`); break
    case 'unconfirmed': log.warn({ err, ...fields }, `${subject} lease not confirmed by enough replicas`); break
    case 'lock-down': outages[subject].failed(`${subject} lock`, err, log, fields); break
    case 'unreadable': log.error({ err, ...fields }, `${subject} data cannot be read`); break
    case 'store-down': outages[subject].failed(`${subject} store`, err, log, fields)
  }
}
