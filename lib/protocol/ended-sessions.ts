/**
 * What goes when a handshake-era session ends, however it ended (DELETE, expiry found by the
 * store, `gc()`): its event-log streams (the log then refuses the late writes of streams still
 * running), and, on every instance, what the hub holds of it (waiting handlers, requests in flight,
 * the GET stream, followers of resumed streams, the bus subscription), told through the session's
 * bus channel. Each step is idempotent: a session ended twice (DELETE racing gc) costs a little.
 */
import type { EventLog } from '../bus/event-log.js'
import type { Hub } from '../bus/hub.js'
import type { SessionStore } from '../sessions/session-store.js'
import { shownId } from '../util/shown-id.js'

/** @internal What ending a session touches. */
export interface SessionEndDeps {
  eventLog: EventLog
  hub: Hub
}

/** Where failures of a cleanup are reported (a Fastify/pino logger fits). */
export interface EndLogger {
  warn (obj: object, msg: string): void
}

/**
 * @internal Removes what belongs to the ended session `sid`. A log failure is logged (its keys
 * expire with their ttl); a bus failure rejects (the caller decides: DELETE still answers 200, as
 * the session is gone, and logs; expiry logs).
 */
export async function endSession (d: SessionEndDeps, sid: string, log: EndLogger): Promise<void> {
  await d.eventLog.dropSession(sid).catch((err: unknown) => { log.warn({ err, sessionId: shownId(sid) }, 'event log cleanup failed') })
  await d.hub.topics.publish(sid, { t: 'ended', sid })
}

/**
 * @internal Ends the sessions among `ids` that a store removed on its own. Ids starting with `~`
 * are other state in the same store (handles, tasks), never sessions.
 */
export function endExpired (d: SessionEndDeps, ids: string[], log: EndLogger): void {
  for (const sid of ids) {
    if (sid.startsWith('~')) continue
    endSession(d, sid, log).catch((err: unknown) => { log.warn({ err, sessionId: shownId(sid) }, 'ending an expired session failed') })
  }
}

/**
 * @internal Listens to the store's reports of sessions it removed on its own (`onExpired`), and
 * ends them. Returns what stops listening; `null` when the store does not report (then only the
 * plugin's own gc runs say what they removed).
 */
export function watchExpiry (store: SessionStore, d: SessionEndDeps, log: EndLogger): (() => void) | null {
  if (typeof store.onExpired !== 'function') return null
  return store.onExpired((ids) => { endExpired(d, ids, log) })
}
