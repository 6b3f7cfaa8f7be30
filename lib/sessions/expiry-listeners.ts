/**
 * Who a store tells about the sessions it removed on its own (expired and found on access, swept,
 * evicted to stay within its bound, collected by `gc()`), so that the plugin removes what else
 * belongs to them (event-log streams, bus subscriptions, in-process entries). `destroy()` is not
 * reported: its caller knows.
 */

/** Told the ids of the sessions a store removed on its own. */
export type ExpiryListener = (ids: string[]) => void

/** The listeners of one store (see the module doc). */
export class ExpiryListeners {
  readonly #listeners = new Set<ExpiryListener>()

  /** Adds a listener; the function returned removes it. */
  add (listener: ExpiryListener): () => void {
    this.#listeners.add(listener)
    return () => { this.#listeners.delete(listener) }
  }

  /** Tells every listener (a listener that throws does not stop the others, nor the store). */
  report (ids: string[]): void {
    if (ids.length === 0) return
    for (const l of this.#listeners) {
      try { l(ids) } catch {}
    }
  }
}
