/**
 * Why a state scope (a session's or a handle's) could not be opened, mapped to the answer its
 * client gets: every case is a 503 the client may retry, each with its own text, because "busy"
 * asks for patience while "store unavailable" is the operator's problem.
 */
import type { FastifyBaseLogger } from 'fastify'
import { McpError } from '../jsonrpc/errors.js'
import { refusalOf } from '../state/outcome.js'

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

/**
 * Maps a failure to open a scope to its refusal and logs it: a lock wait that timed out is a
 * warning (load, not a fault), the rest are errors with their cause. An `McpError` is already an
 * answer and passes through. `subject` names the scope in the log line ("session", "handle");
 * `fields` say which one without logging a secret (a handle's id is a bearer token).
 */
export function openFailure (err: unknown, log: FastifyBaseLogger, refusals: OpenRefusals,
  subject: string, fields: Record<string, unknown>): McpError {
  if (err instanceof McpError) return err
  switch (refusalOf(err)) {
    case 'busy':
      log.warn(fields, `${subject} busy: lock wait timed out`)
      return refusals.busy()
    case 'lock-down':
      log.error({ err, ...fields }, `${subject} lock unavailable`)
      return refusals.lockDown()
    case 'unreadable':
      log.error({ err, ...fields }, `${subject} data cannot be read`)
      return refusals.unreadable()
    case 'store-down':
      log.error({ err, ...fields }, `${subject} store unavailable`)
      return refusals.storeDown()
  }
}
