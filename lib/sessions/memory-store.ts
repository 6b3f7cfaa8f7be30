/**
 * `MemorySessionStore`: the default store, for one process. Bounded and small per session: one
 * record per session holding each key's JSON text, no per-session timer or closure.
 *
 * When full, a record that holds no state goes first (`held-state.ts`: a session nobody wrote to
 * since its `initialize`, a finished task whose outcome its client has seen), whoever made it;
 * a record that holds state goes only when none is left. Within each class, a record of the owner
 * holding the most records of that class goes (`owner-index.ts`; the plugin gives every session,
 * handle and task the key of the client that made it): its never-used one first (created and not
 * loaded or saved since: an `initialize` whose client never came back), else its least recently
 * used; among owners holding as many, the least recently active. Anyone can create sessions
 * (`initialize` is anonymous unless `auth` says otherwise) and touch them cheaply, so a
 * flood must push out its own records, and never a record holding state while an empty one is
 * left. Records without an owner are one owner together.
 *
 * One map finds a session by id; two lists through the records order them: `#fresh` (never used,
 * in creation order) and `#used` (in last-access order: every access moves the session to the
 * end). In both the sessions that expire first are at the front: expiry is checked lazily on
 * access, and one unref()ed sweep timer, and gc(), only walk the expired heads. Every operation is
 * O(1); moving a session to the end of `#used` relinks it (a map delete and insert shrank and
 * regrew the map's table with many sessions in use at once).
 */
// Imported: the global `performance` is a lazy getter, called on every access.
import { performance } from 'node:perf_hooks'
import { LinkedList, type Linked } from '../util/linked-list.js'
import { ExpiryListeners, type ExpiryListener } from './expiry-listeners.js'
import { SPENT_KEY, createdHoldingState } from './held-state.js'
import { copyJson } from './json-copy.js'
import { OwnerIndex, type Owned } from './owner-index.js'
import {
  encodeSessionValue,
  type CreateOptions, type JsonValue, type SaveResult, type SessionChanges, type SessionRecord, type SessionStore,
  type SessionStoreOptions
} from './session-store.js'
import { DEFAULT_SESSION_TTL, checkTtl } from './ttl.js'
import { shownId } from '../util/shown-id.js'

/** Options of {@link MemorySessionStore}. */
export interface MemorySessionStoreOptions extends SessionStoreOptions {
  /**
   * Most sessions kept (default 10,000). When full, a record that holds no state is evicted before
   * any that holds state; among them, a record of the owner (`create`'s `owner`) holding the most:
   * its oldest never-used one (created, never loaded or saved since), else its least recently used.
   */
  max?: number
  /** Milliseconds between sweeps of expired sessions (default 60,000; 0 = only lazily and gc()). */
  sweepInterval?: number
}

interface StoredSession extends Linked<StoredSession>, Owned {
  readonly id: string
  /** In `#used` (loaded or saved since its creation), else in `#fresh`. */
  used: boolean
  /** Holds state (`held-state.ts`): counted in `#kept`, else in `#spare`. */
  kept: boolean
  /** Each key's JSON text: values are copied in and out, and behave exactly as behind Redis. */
  fields: Record<string, string>
  /**
   * The whole session as one JSON object text, made on the first load after a change: that load
   * is one JSON.parse (fresh objects for the caller) instead of one per key.
   */
  snapshot: string | null
  /**
   * The snapshot parsed, made on the second load after a change (in its place) and never handed
   * out: a session read more often than it changes is copied, several times cheaper than parsed.
   */
  parsed: Record<string, JsonValue> | null
  version: number
  /** `performance.now()` of the last create/load/save. */
  touched: number
  /** An idle TTL of its own (`create`'s `ttl` option); else the store's. */
  ttl?: number
  /** The idle TTL until its first load or save (`create`'s `unusedTtl` option); cleared then. */
  unusedTtl?: number
}

/** The memory store's `#loadNow` (set by the class's static block; see {@link memoryLoadNow}). */
let readNow: (store: MemorySessionStore, id: string) => SessionRecord | null
/** The memory store's `#saveAllNow` (see {@link memorySaveAllNow}). */
let saveAllNow: (store: MemorySessionStore, writes: ReadonlyArray<{ id: string, changes: SessionChanges }>) => Array<SaveResult | 'skipped'>

/** Sessions in this process's memory. */
export class MemorySessionStore implements SessionStore {
  readonly ttl: number
  /** Most sessions kept. */
  readonly max: number
  readonly #sessions = new Map<string, StoredSession>()
  /** Sessions created and never loaded or saved since, in creation order. */
  readonly #fresh = new LinkedList<StoredSession>()
  /** Sessions loaded or saved since their creation, in last-access order. */
  readonly #used = new LinkedList<StoredSession>()
  /** Records with a TTL of their own: while there are any, a sweep walks every record. */
  #ownTtls = 0
  /** Who each record holding no state counts against: what goes first when full. */
  readonly #spare = new OwnerIndex()
  /** Who each record holding state counts against: what goes when no record is spare. */
  readonly #kept = new OwnerIndex()
  #sweeper: NodeJS.Timeout | undefined
  readonly #expiry = new ExpiryListeners()

  /** @throws {RangeError} for a non-positive `ttl` or `max`, or a negative `sweepInterval`. */
  constructor (options: MemorySessionStoreOptions = {}) {
    const { ttl = DEFAULT_SESSION_TTL, max = 10_000, sweepInterval = 60_000 } = options
    this.ttl = checkTtl(ttl)
    if (!Number.isInteger(max) || max < 1) throw new RangeError('max must be an integer greater than or equal to 1.')
    if (typeof sweepInterval !== 'number' || !(sweepInterval >= 0)) {
      throw new RangeError('sweepInterval must be greater than or equal to 0.')
    }
    this.max = max
    if (sweepInterval > 0 && Number.isFinite(sweepInterval)) {
      this.#sweeper = setInterval(() => { this.#sweep() }, sweepInterval).unref()
    }
  }

  /** Sessions held right now, expired ones not yet swept included. */
  get size (): number {
    return this.#sessions.size
  }

  async create (id: string, data: Record<string, JsonValue>, options: CreateOptions = {}): Promise<void> {
    const ttl = options.ttl === undefined ? undefined : checkTtl(options.ttl)
    const fields: Record<string, string> = Object.create(null)
    for (const key of Object.keys(data)) fields[key] = encodeSessionValue(key, data[key])
    if (this.#live(id) !== undefined) throw new Error(`Session ${shownId(id)} already exists`)
    while (this.size >= this.max) {
      const victim = (this.#spare.victim() ?? this.#kept.victim()) as StoredSession
      this.#drop(victim)
      this.#expiry.report([victim.id])
    }
    const session: StoredSession = {
      id,
      used: false,
      kept: createdHoldingState(data),
      prev: null,
      next: null,
      fields,
      snapshot: null,
      parsed: null,
      version: 0,
      touched: performance.now(),
      owner: null,
      ownerUsed: false,
      ownerPrev: null,
      ownerNext: null
    }
    if (ttl !== undefined && ttl !== this.ttl) session.ttl = ttl
    if (options.unusedTtl !== undefined) session.unusedTtl = checkTtl(options.unusedTtl)
    if (session.ttl !== undefined || session.unusedTtl !== undefined) this.#ownTtls++
    this.#sessions.set(id, session)
    this.#fresh.push(session)
    this.#ownersOf(session).add(session, options.owner ?? '')
  }

  async load (id: string): Promise<SessionRecord | null> {
    return this.#loadNow(id)
  }

  static {
    readNow = (store, id) => store.#loadNow(id)
    saveAllNow = (store, writes) => store.#saveAllNow(writes)
  }

  /** {@link load} without a promise (see {@link memoryLoadNow}). */
  #loadNow (id: string): SessionRecord | null {
    // One clock read for the expiry check and the touch.
    const now = performance.now()
    const session = this.#live(id, now)
    if (session === undefined) return null
    this.#touch(session, now)
    return { data: dataOf(session), version: session.version }
  }

  async save (id: string, changes: SessionChanges): Promise<SaveResult> {
    const encoded = encodeChanges(changes)
    const now = performance.now()
    const session = this.#live(id, now)
    if (session === undefined) return 'gone'
    this.#apply(session, encoded, changes.delete, now)
    return 'ok'
  }

  #apply (session: StoredSession, encoded: Array<[string, string]>, deleted: string[], now: number): void {
    for (const [key, json] of encoded) session.fields[key] = json
    for (const key of deleted) delete session.fields[key]
    session.snapshot = null
    session.parsed = null
    session.version++
    // Written to: it holds state from now on, unless it says it is spent.
    const kept = session.fields[SPENT_KEY] === undefined && (session.kept || encoded.length > 0 || deleted.length > 0)
    if (kept !== session.kept) this.#reclass(session, kept)
    this.#touch(session, now)
  }

  /** Several saves at once, all or none: every record must be live (see {@link memorySaveAllNow}). */
  #saveAllNow (writes: ReadonlyArray<{ id: string, changes: SessionChanges }>): Array<SaveResult | 'skipped'> {
    const now = performance.now()
    const encoded = writes.map(w => encodeChanges(w.changes))
    const sessions = writes.map(w => this.#live(w.id, now))
    if (sessions.some(x => x === undefined)) return sessions.map(x => x === undefined ? 'gone' : 'skipped')
    sessions.forEach((session, i) => { this.#apply(session as StoredSession, encoded[i], writes[i].changes.delete, now) })
    return writes.map(() => 'ok' as const)
  }

  async destroy (id: string): Promise<boolean> {
    // An expired session is dropped (and reported) by #live already.
    const session = this.#live(id)
    if (session !== undefined) this.#drop(session)
    return session !== undefined
  }

  async exists (id: string): Promise<boolean> {
    return this.#live(id) !== undefined
  }

  async gc (): Promise<string[]> {
    return this.#sweep()
  }

  onExpired (listener: ExpiryListener): () => void {
    return this.#expiry.add(listener)
  }

  /** Stops the sweep timer. The sessions stay readable. */
  async close (): Promise<void> {
    clearInterval(this.#sweeper)
    this.#sweeper = undefined
  }

  /** The session unless missing or expired (an expired one is dropped on the way). */
  #live (id: string, now = performance.now()): StoredSession | undefined {
    const session = this.#sessions.get(id)
    if (session === undefined) return undefined
    if (this.#expired(session, now)) {
      this.#drop(session)
      this.#expiry.report([id])
      return undefined
    }
    return session
  }

  #expired (session: StoredSession, now: number): boolean {
    const ttl = session.ttl ?? this.ttl
    return now - session.touched > (session.unusedTtl === undefined ? ttl : Math.min(ttl, session.unusedTtl))
  }

  /** A load or save: the session is used, and the most recently used. */
  #touch (session: StoredSession, now: number): void {
    session.touched = now
    // The session accessed last is at the end already.
    if (this.#used.tail === session) return
    if (session.used) {
      this.#used.remove(session)
    } else {
      this.#fresh.remove(session)
      // Used now: the store's (or its own) TTL applies from here on.
      if (session.unusedTtl !== undefined) {
        session.unusedTtl = undefined
        if (session.ttl === undefined) this.#ownTtls--
      }
    }
    session.used = true
    this.#used.push(session)
    this.#ownersOf(session).touch(session)
  }

  /** The owners `session` counts among: of records holding state or not. */
  #ownersOf (session: StoredSession): OwnerIndex {
    return session.kept ? this.#kept : this.#spare
  }

  /** `session` now holds state (`kept`) or no longer does: it counts among the others. */
  #reclass (session: StoredSession, kept: boolean): void {
    const key = session.owner?.key ?? ''
    this.#ownersOf(session).remove(session)
    session.kept = kept
    this.#ownersOf(session).add(session, key, session.used)
  }

  /** Forgets `session`, which is held. */
  #drop (session: StoredSession): void {
    if (session.ttl !== undefined || session.unusedTtl !== undefined) this.#ownTtls--
    this.#sessions.delete(session.id)
    if (session.used) this.#used.remove(session)
    else this.#fresh.remove(session)
    this.#ownersOf(session).remove(session)
  }

  /**
   * Drops the expired heads of both lists (see the file comment) and returns the ids dropped. With
   * records of other TTLs the order says nothing about expiry: then every record is looked at.
   */
  #sweep (): string[] {
    const removed: string[] = []
    const now = performance.now()
    for (const list of [this.#fresh, this.#used]) {
      let session = list.head
      while (session !== null) {
        const next: StoredSession | null = session.next
        if (this.#expired(session, now)) {
          this.#drop(session)
          removed.push(session.id)
        } else if (this.#ownTtls === 0) {
          break
        }
        session = next
      }
    }
    this.#expiry.report(removed)
    return removed
  }
}

/** `{"key":value,…}` from each key's JSON text. */
function snapshotOf (fields: Record<string, string>): string {
  let text = ''
  for (const key in fields) text += `${text === '' ? '{' : ','}${JSON.stringify(key)}:${fields[key] as string}`
  return text === '' ? '{}' : `${text}}`
}

/** Fresh objects holding the session's keys (see {@link StoredSession.snapshot} and `parsed`). */
function dataOf (session: StoredSession): Record<string, JsonValue> {
  // JSON.parse defines own properties: a key named "__proto__" stays a plain key.
  if (session.parsed === null) {
    if (session.snapshot === null) {
      session.snapshot = snapshotOf(session.fields)
      return JSON.parse(session.snapshot) as Record<string, JsonValue>
    }
    session.parsed = JSON.parse(session.snapshot) as Record<string, JsonValue>
    session.snapshot = null
  }
  try {
    return copyJson(session.parsed) as Record<string, JsonValue>
  } catch {
    // Nested deeper than the stack allows here (JSON.parse does not recurse): parse the text.
    return JSON.parse(snapshotOf(session.fields)) as Record<string, JsonValue>
  }
}

/** The changes' values as JSON texts. @throws {TypeError} for a value JSON cannot carry. */
function encodeChanges (changes: SessionChanges): Array<[string, string]> {
  const encoded: Array<[string, string]> = []
  for (const key of Object.keys(changes.set)) encoded.push([key, encodeSessionValue(key, changes.set[key])])
  return encoded
}

/**
 * Several saves of the memory store in one synchronous step, all or none: each `ok`, or — a record
 * gone — `gone` for it and `skipped` for the rest, nothing written. For the memory pairing
 * (`state/pairings/memory-pairing.ts`) only.
 * @throws {TypeError} for a value JSON cannot carry (nothing written).
 * @internal
 */
export function memorySaveAllNow (store: MemorySessionStore, writes: ReadonlyArray<{ id: string, changes: SessionChanges }>): Array<SaveResult | 'skipped'> {
  return saveAllNow(store, writes)
}

/**
 * The memory store's `load()` without a promise, for the memory pairing
 * (`state/pairings/memory-pairing.ts`) only.
 * @internal
 */
export function memoryLoadNow (store: MemorySessionStore, id: string): SessionRecord | null {
  return readNow(store, id)
}
