/**
 * Read-only tools (`annotations.readOnlyHint: true`) run side by side: their calls read a
 * snapshot of the session or handle — the state as the last save left it, loaded without the lock —
 * and may not change it. Writers still take the lock one at a time, so they lose nothing.
 *
 * Why a lock-free load is a consistent snapshot: a writer's changes stay in its own handle until
 * its close, which writes them in one store call, and every bundled store makes one save visible
 * all at once (the memory store in one synchronous step, the file store by renaming a complete
 * file over the old one, the Redis store in one script). A load therefore sees the state before a
 * save or after it, never a part of it. A custom store must keep that promise for read-only tools.
 *
 * What a snapshot may not do is enforced, not trusted: its handle refuses `set` and `delete` with a
 * `ReadOnlyStateError` (thrown to the handler, so nothing is dropped in silence), and a read-only
 * tool's handler runs with the same refusal even where its request took the lock (a batch that
 * also writes).
 */
import type { Parsed } from '../jsonrpc/messages.js'
import type { SessionHandle } from '../sessions/session-handle.js'
import type { ScopeOptions, StateScope } from './state-scope.js'

/** How a snapshot is opened: the stored state, without the lock (no lease, nothing to release). */
export const SNAPSHOT: ScopeOptions = Object.freeze({ lock: false })

/**
 * Whether a POST may read a snapshot instead of taking the lock: it carries at least one request,
 * and every request in it is a `tools/call` of a tool of `tools` that is read-only. Answers and
 * notifications among them change no state; any other request (one writing call in a batch, a
 * `logging/setLevel`, an unknown tool) makes the whole POST take the lock.
 */
export function readsOnly (messages: readonly Parsed[], tools: ReadonlyMap<string, { readOnly: boolean }>): boolean {
  let requests = 0
  for (const m of messages) {
    if (m.kind !== 'request') continue
    const { method, params } = m.message
    const name = params?.name
    if (method !== 'tools/call' || typeof name !== 'string' || tools.get(name)?.readOnly !== true) return false
    requests++
  }
  return requests > 0
}

/**
 * Seals a scope opened as a snapshot: every write through its handle throws, whatever runs on it
 * (a tool replaced by a writing one between the POST's check and its run included).
 */
export function sealSnapshot (scope: StateScope, what: 'session' | 'handle' | 'call'): StateScope {
  scope.handle.seal(`this call reads a snapshot of the ${what} without its lock (read-only tools only), so it cannot change it`)
  return scope
}

/** Handles a read-only tool's handler sees (`ctx.session`, `ctx.handle`). */
export interface ToolState {
  readonly session: SessionHandle | null
  readonly handle: SessionHandle | null
}

/**
 * Runs a read-only tool's handler with `ctx.session` and `ctx.handle` refusing writes, then
 * restores what was in force (a batch's next request may write to the same session).
 */
export async function readOnlyRun<T> (tool: string, state: ToolState, run: () => T | Promise<T>): Promise<T> {
  const why = `tool "${tool}" is read-only (annotations.readOnlyHint: true); it reads a snapshot and cannot change state`
  const session = state.session
  const handle = state.handle
  const sessionBefore = session?.seal(why) ?? null
  const handleBefore = handle?.seal(why) ?? null
  try {
    return await run()
  } finally {
    session?.seal(sessionBefore)
    handle?.seal(handleBefore)
  }
}
