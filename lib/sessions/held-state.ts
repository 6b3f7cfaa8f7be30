/**
 * Whether a record holds state, for a bounded store's choice of what goes first when it is full
 * (`MemorySessionStore`): a record that holds none can go without anyone losing anything a new
 * handshake or a new call would not give back.
 *
 * A record holds state when it was created with a key of the application (a handle's initial
 * data, a task's record: any key outside the plugin's `$mcp/` keys), or when anything was written
 * to it since (an application key, a log level, a subscription, a task's progress) — unless it
 * carries {@link SPENT_KEY}, which says that what it holds is past its use (a finished task whose
 * outcome its client has seen). A session nobody wrote to since its `initialize` holds none.
 */
import { PROTOCOL_PREFIX } from './session-handle.js'
import type { JsonValue } from './session-store.js'

/** The mark of a record whose data is past its use (set once, never removed: the record keeps its data). */
export const SPENT_KEY = `${PROTOCOL_PREFIX}spent`

/** Whether a record created with `data` holds state (see the module doc). */
export function createdHoldingState (data: Record<string, JsonValue>): boolean {
  if (data[SPENT_KEY] !== undefined) return false
  for (const key in data) if (!key.startsWith(PROTOCOL_PREFIX)) return true
  return false
}
