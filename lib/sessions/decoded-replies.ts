/**
 * The data of the sessions a Redis store read last, beside the text it was decoded from: a
 * session read again unchanged (its text the same) costs a deep copy instead of a parse. Parsing a
 * session's reply is a visible share of a locked request; the copy a fraction of it
 * (docs/performance.md).
 *
 * Nothing here can go stale: an entry answers only a text equal to the one it was decoded from,
 * and JSON.parse gives the same value for the same text. Each caller gets its own copy; the
 * parsed value kept here is never handed out. Bounded: at most {@link MAX_DECODED_SESSIONS}
 * sessions (the one remembered longest goes first), of texts at most {@link MAX_DECODED_TEXT} characters (a longer
 * one is decoded every time).
 */
import { copyJson } from './json-copy.js'
import type { JsonValue } from './session-store.js'

/** Most sessions remembered (the one remembered longest is forgotten first). */
export const MAX_DECODED_SESSIONS = 128
/** Longest text (characters) remembered: a few KiB each, so the whole cache stays within a few MiB. */
export const MAX_DECODED_TEXT = 4096

interface Entry {
  text: string
  /** Null until the same text is read a second time: a session that changes on every request is never parsed twice. */
  parsed: Record<string, JsonValue> | null
}

/** See the module doc. */
export class DecodedReplies {
  readonly #entries = new Map<string, Entry>()

  /**
   * A fresh copy of what `decode(id, text)` returns, decoding only when this session's last text
   * was another one or could not be copied. What `decode` throws is thrown, and nothing is kept.
   */
  data (id: string, text: string, decode: (id: string, text: string) => Record<string, JsonValue>): Record<string, JsonValue> {
    const entry = this.#entries.get(id)
    if (entry === undefined || entry.text !== text) {
      const data = decode(id, text)
      if (text.length > MAX_DECODED_TEXT) {
        if (entry !== undefined) this.#entries.delete(id)
      } else if (entry !== undefined) {
        // Changed in place: a session whose text changes on every request costs no map churn.
        entry.text = text
        entry.parsed = null
      } else {
        this.#remember(id, { text, parsed: null })
      }
      return data
    }
    entry.parsed ??= decode(id, text)
    try {
      return copyJson(entry.parsed) as Record<string, JsonValue>
    } catch {
      // Nested deeper than the stack allows here (JSON.parse does not recurse).
      return decode(id, text)
    }
  }

  /** Drops what is kept of `id` (its session is gone). */
  forget (id: string): void {
    this.#entries.delete(id)
  }

  /** Sessions remembered (for tests). */
  get size (): number {
    return this.#entries.size
  }

  /** A session not remembered yet: the one remembered longest goes first when full. */
  #remember (id: string, entry: Entry): void {
    const entries = this.#entries
    if (entries.size >= MAX_DECODED_SESSIONS) entries.delete(entries.keys().next().value as string)
    entries.set(id, entry)
  }
}
