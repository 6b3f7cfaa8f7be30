/**
 * The session handle a request sees (`request.mcpSession`, `ctx.session`): application keys with
 * `get/set/has/delete`, plus the protocol keys the plugin keeps. It records what this request
 * changed so that a save writes back only those keys.
 */
import type { JsonValue, SessionChanges, SessionRecord } from './session-store.js'

/** Keys starting with this prefix belong to the plugin; applications cannot set them. */
export const PROTOCOL_PREFIX = '$mcp/'

/** Protocol keys kept in every session. */
export const K = {
  version: `${PROTOCOL_PREFIX}version`,
  clientInfo: `${PROTOCOL_PREFIX}clientInfo`,
  capabilities: `${PROTOCOL_PREFIX}capabilities`,
  principal: `${PROTOCOL_PREFIX}principal`,
  logLevel: `${PROTOCOL_PREFIX}logLevel`,
  subscriptions: `${PROTOCOL_PREFIX}subscriptions`,
  initialized: `${PROTOCOL_PREFIX}initialized`,
  /** When the session was created (epoch ms), for `mcp.server.session.duration`. */
  created: `${PROTOCOL_PREFIX}created`
} as const

/** The most of a refused key an error message repeats (keys are the application's, of any length). */
const SHOWN_KEY = 64

/**
 * A write refused: the work runs as a read-only tool (`annotations.readOnlyHint: true`), which
 * reads a snapshot of the state without its lock, so nothing it sets could be kept safely.
 * Thrown by `set`/`delete` before anything changes.
 */
export class ReadOnlyStateError extends TypeError {
  readonly code = 'FST_ERR_MCP_READ_ONLY_STATE'
  constructor (op: string, key: string, why: string) {
    const shown = key.length <= SHOWN_KEY ? key : `${key.slice(0, SHOWN_KEY)}…`
    super(`Cannot ${op} "${shown}": ${why}`)
    this.name = 'ReadOnlyStateError'
  }
}

function checkAppKey (key: string): void {
  if (typeof key !== 'string' || key.length === 0) throw new TypeError('session keys must be non-empty strings')
  if (key.startsWith(PROTOCOL_PREFIX)) throw new TypeError(`session keys starting with "${PROTOCOL_PREFIX}" are reserved`)
}

/** One request's view of a session. */
export class SessionHandle {
  /** The session id (`Mcp-Session-Id`). */
  readonly id: string
  #data: Record<string, JsonValue>
  #version: number
  // Made on the first change: most requests change nothing.
  #set: Map<string, JsonValue> | null = null
  #deleted: Set<string> | null = null
  /** Why writes are refused right now (see {@link seal}), or `null`. */
  #readOnly: string | null = null

  constructor (id: string, record: SessionRecord) {
    this.id = id
    this.#data = record.data
    this.#version = record.version
  }

  /** The store version this handle was read at. */
  get version (): number { return this.#version }

  /** Reads an application key (`undefined` when absent). Mutating the result does not save it: call `set`. */
  get<T = JsonValue> (key: string): T | undefined {
    checkAppKey(key)
    return this.#data[key] as T | undefined
  }

  /** Sets an application key to a JSON value (stored as a copy). */
  set (key: string, value: unknown): void {
    checkAppKey(key)
    this.#put(key, value)
  }

  /** Whether an application key is set. */
  has (key: string): boolean {
    checkAppKey(key)
    return Object.hasOwn(this.#data, key)
  }

  /** Removes an application key. Resolves whether it was present. */
  delete (key: string): boolean {
    checkAppKey(key)
    return this.#remove(key)
  }

  /** Application keys of the session. */
  keys (): string[] {
    return Object.keys(this.#data).filter(k => !k.startsWith(PROTOCOL_PREFIX))
  }

  /** @internal Reads a protocol key. */
  getProtocol<T = JsonValue> (key: string): T | undefined {
    return this.#data[key] as T | undefined
  }

  /** @internal Sets a protocol key. */
  setProtocol (key: string, value: unknown): void {
    this.#put(key, value)
  }

  /** @internal Removes a protocol key. */
  deleteProtocol (key: string): void {
    this.#remove(key)
  }

  /** @internal The protocol keys starting with `prefix` (itself under {@link PROTOCOL_PREFIX}). */
  protocolKeys (prefix: string): string[] {
    const out: string[] = []
    for (const key in this.#data) if (key.startsWith(prefix)) out.push(key)
    return out
  }

  /**
   * @internal Refuses every write from now on with a {@link ReadOnlyStateError} saying `why`
   * (`null`: writes allowed again). Returns what was in force before, to restore it.
   */
  seal (why: string | null): string | null {
    const before = this.#readOnly
    this.#readOnly = why
    return before
  }

  /** @internal Whether this request changed anything. */
  get dirty (): boolean {
    return (this.#set !== null && this.#set.size > 0) || (this.#deleted !== null && this.#deleted.size > 0)
  }

  /** @internal The keys this request changed, for the save. */
  changes (): SessionChanges {
    return { set: this.#set === null ? {} : Object.fromEntries(this.#set), delete: this.#deleted === null ? [] : [...this.#deleted] }
  }

  /** @internal After a save: the changes are written. */
  markSaved (): void {
    this.#set = null
    this.#deleted = null
    this.#version++
  }

  /**
   * @internal After re-acquiring the lock: take the newest stored state, and re-apply this
   * request's unsaved changes on top of it.
   */
  reload (record: SessionRecord): void {
    const data = record.data
    if (this.#set !== null) for (const [k, v] of this.#set) data[k] = v
    if (this.#deleted !== null) for (const k of this.#deleted) delete data[k]
    this.#data = data
    this.#version = record.version
  }

  #put (key: string, value: unknown): void {
    if (this.#readOnly !== null) throw new ReadOnlyStateError('set', key, this.#readOnly)
    if (value === undefined) { this.#remove(key); return }
    const text = JSON.stringify(value)
    if (text === undefined) throw new TypeError(`session key "${key}" must hold a JSON value`)
    const copy = JSON.parse(text) as JsonValue
    this.#data[key] = copy
    ;(this.#set ??= new Map()).set(key, copy)
    this.#deleted?.delete(key)
  }

  #remove (key: string): boolean {
    if (this.#readOnly !== null) throw new ReadOnlyStateError('delete', key, this.#readOnly)
    const had = Object.hasOwn(this.#data, key)
    delete this.#data[key]
    this.#set?.delete(key)
    ;(this.#deleted ??= new Set()).add(key)
    return had
  }
}
