/**
 * Why a state scope (a session's or a handle's) could not be opened, mapped to the answer its
 * client gets: every case is a 503 the client may retry, each with its own text, because "busy"
 * asks for patience while "store unavailable" is the operator's problem.
 */
import type { FastifyBaseLogger } from 'fastify'
import { McpError } from '../jsonrpc/errors.js'
import { refusalOf } from '../state/outcome.js'
import { unconfirmedAnswer } from './unconfirmed.js'

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

/** How often an outage that lasts is logged again at error (ms). */
export const OUTAGE_LOG_INTERVAL = 60_000

interface Outage { since: number, logged: number, failures: number }

/**
 * The log of backend outages (the store or the lock down): the first failure at error with its
 * cause, then at most one error line per {@link OUTAGE_LOG_INTERVAL} while it lasts (with the
 * failures since it began; the others at debug, without a stack), and one warning when a state
 * scope opens again. A client in a retry loop during a Redis outage makes a handful of lines, not
 * a stack per request.
 */
export class OutageLog {
  readonly #down = new Map<string, Outage>()

  /** Logs one failure of `what` ("session store", "handle lock"). */
  failed (what: string, err: unknown, log: FastifyBaseLogger, fields: Record<string, unknown>): void {
    const now = Date.now()
    const o = this.#down.get(what)
    if (o === undefined) {
      this.#down.set(what, { since: now, logged: now, failures: 1 })
      log.error({ err, ...fields }, `${what} unavailable`)
      return
    }
    o.failures++
    if (now - o.logged >= OUTAGE_LOG_INTERVAL) {
      o.logged = now
      log.error({ err, ...fields, failures: o.failures, downMs: now - o.since }, `${what} still unavailable`)
    } else {
      log.debug({ ...fields, reason: err instanceof Error ? err.message : String(err) }, `${what} unavailable`)
    }
  }

  /** A scope opened: every outage logged ends with one line. */
  ok (log: FastifyBaseLogger): void {
    if (this.#down.size === 0) return
    const now = Date.now()
    for (const [what, o] of this.#down) log.warn({ failures: o.failures, downMs: now - o.since }, `${what} available again`)
    this.#down.clear()
  }
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
