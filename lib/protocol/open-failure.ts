/**
 * Why a state scope (a session's or a handle's) could not be opened, mapped to the answer its
 * client gets: every case is a 503 the client may retry, each with its own text, because "busy"
 * asks for patience while "store unavailable" is the operator's problem.
 */
import type { FastifyBaseLogger } from 'fastify'
import { McpError } from '../jsonrpc/errors.js'
import { refusalOf } from '../state/outcome.js'
import { OutageLog } from '../util/outage-log.js'
import { unconfirmedAnswer } from './unconfirmed.js'

export { OutageLog, OUTAGE_LOG_INTERVAL } from '../util/outage-log.js'

/**
 * `Retry-After` of a 503 for a backend that failed (a database restarting, a Redis failing over):
 * one second, so that clients come back soon rather than give up or hammer.
 */
export function backendRetry (): Record<string, string> {
  return { 'retry-after': '1' }
}

/** The refusals of one kind of scope, by what happened. */
export interface OpenRefusals {
  /** The lock wait timed out: another request holds the scope. */
  busy: () => McpError
  /** The lock itself failed (e.g. Redis is down). */
  lockDown: () => McpError
  /** The stored state cannot be decoded. */
  unreadable: () => McpError
  /** The store failed. */
  storeDown: () => McpError
}

/** The outage log of a backend (one per state backend: per plugin instance). */
const OUTAGES = new WeakMap<object, OutageLog>()

/** The {@link OutageLog} of `backend`. */
export function outagesOf (backend: object): OutageLog {
  let log = OUTAGES.get(backend)
  if (log === undefined) { log = new OutageLog(); OUTAGES.set(backend, log) }
  return log
}

/**
 * Maps a failure to open a scope to its refusal and logs it: a lock wait that timed out is a
 * warning (load, not a fault), unreadable data an error with its cause, a backend down goes to
 * `outages` (once per outage, see {@link OutageLog}). An `McpError` is already an answer and
 * passes through. `subject` names the scope in the log line ("session", "handle"); `fields` say
 * which one without logging a secret.
 */
export function openFailure (err: unknown, log: FastifyBaseLogger, refusals: OpenRefusals,
  subject: string, fields: Record<string, unknown>, outages: OutageLog = new OutageLog()): McpError {
  if (err instanceof McpError) return err
  const unconfirmed = unconfirmedAnswer(err)
  if (unconfirmed !== null) {
    log.warn({ err, ...fields }, `${subject} lease not confirmed by enough replicas`)
    return unconfirmed
  }
  switch (refusalOf(err)) {
    case 'busy':
      log.warn(fields, `${subject} busy: lock wait timed out`)
      return refusals.busy()
    case 'lock-down':
      outages.failed(`${subject} lock`, err, log, fields)
      return refusals.lockDown()
    case 'unreadable':
      log.error({ err, ...fields }, `${subject} data cannot be read`)
      return refusals.unreadable()
    case 'store-down':
      outages.failed(`${subject} store`, err, log, fields)
      return refusals.storeDown()
  }
}
