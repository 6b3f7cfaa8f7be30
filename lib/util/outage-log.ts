/**
 * The log of a backend's outages (a store, a lock, the message bus down): one error line when it
 * starts, a reminder at most once a minute while it lasts, one line when it ends.
 */

/** What an outage is reported to (a Fastify/pino logger fits). */
export interface OutageLogger {
  error (obj: object, msg: string): void
  warn (obj: object, msg: string): void
  debug (obj: object, msg: string): void
}

/** How often an outage that lasts is logged again at error (ms). */
export const OUTAGE_LOG_INTERVAL = 60_000

interface Outage { since: number, logged: number, failures: number }

/**
 * The log of backend outages: the first failure at error with its cause, then at most one error
 * line per {@link OUTAGE_LOG_INTERVAL} while it lasts (with the failures since it began; the others
 * at debug, without a stack), and one warning when the backend answers again ({@link ok}). A client in a retry loop during a Redis outage makes a handful of lines, not
 * a stack per request.
 */
export class OutageLog {
  readonly #down = new Map<string, Outage>()

  /** Logs one failure of `what` ("session store", "handle lock"). */
  failed (what: string, err: unknown, log: OutageLogger, fields: Record<string, unknown>): void {
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

  /** The backend answered (a scope opened, a bus operation went through): every outage logged ends with one line. */
  ok (log: OutageLogger): void {
    if (this.#down.size === 0) return
    const now = Date.now()
    for (const [what, o] of this.#down) log.warn({ failures: o.failures, downMs: now - o.since }, `${what} available again`)
    this.#down.clear()
  }
}
