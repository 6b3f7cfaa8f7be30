/**
 * State handles (2026-07-28 "sessionless MCP via explicit state handles"): server-minted, opaque,
 * high-entropy ids of a named kind (`basket`), passed by the client as ordinary tool arguments.
 * A handle's state lives in the same store as sessions, under its own key (`~<kind>~<id>`, its own
 * hash tag on Redis Cluster), bound to the principal that created it, with an idle TTL of its
 * kind; a call that uses it runs in the same state scope as a session (lock → load → run → save →
 * release), so parallel calls on one handle are serialized across instances.
 *
 * Unknown, expired, ended and someone else's handles are all the same `null` here (no oracle);
 * ids that are not well-formed never reach the store or the lock.
 */
import { randomBytes } from 'node:crypto'
import type { JsonValue } from '../sessions/session-store.js'
import { PROTOCOL_PREFIX } from '../sessions/session-handle.js'
import type { StateBackend, StateScope } from './state-scope.js'
import type { Opening } from './unit-of-work.js'

/** Who uses a handle: what `auth` gave (its `id` is what handles are bound to), or `null`. */
export type HandlePrincipal = { readonly id: string } | null

/** What a handle kind is registered with. */
export interface HandleKindOptions {
  /** Idle lifetime of its handles in milliseconds: each use refreshes it. */
  ttl: number
}

/** A registered kind. */
export interface HandleKind extends HandleKindOptions {
  readonly name: string
}

/** Protocol keys of a handle's state (applications cannot set them). */
export const HANDLE_KEYS = {
  owner: `${PROTOCOL_PREFIX}owner`,
  kind: `${PROTOCOL_PREFIX}kind`
} as const

/** A kind's name: lower-case, 1–32 characters of `[a-z0-9_]`, starting with a letter. */
const KIND = /^[a-z][a-z0-9_]{0,31}$/

/** What a client may send as a handle id: what `mint` makes (32 base64url characters), bounded. */
const HANDLE_ID = /^[A-Za-z0-9_-]{16,128}$/

/** Number of random bytes in a minted handle id: 192 bits, 32 base64url characters. */
const ID_BYTES = 24

/** The store key of a handle. */
export function handleKey (kind: string, id: string): string {
  return `~${kind}~${id}`
}

/**
 * What is wrong with a kind's name or options (`minTtl`: the least TTL accepted, ms), or `null`.
 */
export function kindProblem (name: unknown, options: HandleKindOptions | undefined, minTtl = 1): string | null {
  if (typeof name !== 'string' || !KIND.test(name)) return `${JSON.stringify(name)}: a handle kind is 1–32 characters of [a-z0-9_], starting with a letter`
  // Tasks (`lib/tasks/`) keep their records under `~task~<id>` in the same store.
  if (name === 'task') return '"task" is reserved (task records use its keys)'
  // Keyed calls on no state keep their records under `~call~<digest>` (`protocol/keyed-calls.ts`).
  if (name === 'call') return '"call" is reserved (idempotency records use its keys)'
  const ttl = options?.ttl
  if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < minTtl) return `"${name}": ttl must be an integer number of milliseconds, at least ${minTtl}`
  return null
}

/** The owner recorded for a principal (anonymous: `null`). */
const ownerOf = (principal: HandlePrincipal): string | null => principal?.id ?? null

/** Whether an open scope is a handle of `kind` owned by `principal` (`undefined`: anyone's). */
function belongs (scope: StateScope, kind: string, principal: HandlePrincipal | undefined): boolean {
  const handle = scope.handle
  return handle.getProtocol(HANDLE_KEYS.kind) === kind && (principal === undefined || handle.getProtocol(HANDLE_KEYS.owner) === ownerOf(principal))
}

/** State handles on one state backend (see the module doc). */
export class StateHandles {
  readonly #backend: StateBackend
  readonly #kinds: Map<string, HandleKind>

  /** `kinds`: the registered kinds (the registry's; {@link define} adds to it). */
  constructor (backend: StateBackend, kinds: Map<string, HandleKind> = new Map()) {
    this.#backend = backend
    this.#kinds = kinds
  }

  /** The scopes the handles open on. */
  get backend (): StateBackend { return this.#backend }

  /**
   * Registers a kind (again: replaces its TTL).
   * @throws {TypeError} for a bad name or TTL.
   */
  define (name: string, options: HandleKindOptions): HandleKind {
    const problem = kindProblem(name, options)
    if (problem !== null) throw new TypeError(`handle kind ${problem}`)
    const kind = { name, ttl: options.ttl }
    this.#kinds.set(name, kind)
    return kind
  }

  /** The registered kind of that name, if any. */
  kind (name: string): HandleKind | undefined {
    return this.#kinds.get(name)
  }

  /**
   * Mints a handle of `kind` bound to `principal` (anonymous handles are `null`-owned: anyone
   * without a principal may use them), with initial application `data`; `owner`: the client key
   * it counts against in the store (see `CreateOptions.owner`). Resolves its id.
   * @throws {TypeError} for an unknown kind; the store's errors otherwise.
   */
  async create (kindName: string, principal: HandlePrincipal, data: Record<string, JsonValue> = {}, owner?: string): Promise<string> {
    const kind = this.#known(kindName)
    const id = randomBytes(ID_BYTES).toString('base64url')
    const record: Record<string, JsonValue> = { ...data, [HANDLE_KEYS.owner]: ownerOf(principal), [HANDLE_KEYS.kind]: kind.name }
    await this.#backend.store.create(handleKey(kind.name, id), record, { ttl: kind.ttl, ...(owner === undefined ? {} : { owner }) })
    return id
  }

  /**
   * What a call by `principal` opens to work on handle `id` of `kind` (`mode`: locked, or a
   * snapshot for a read-only tool), admitted only when the record is a handle of that kind and
   * the principal's; `null` for an id that is malformed or of an unknown kind (nothing to open).
   * Unknown, expired, ended, other kinds' and someone else's handles all open as `null` alike.
   */
  opening (kindName: string, id: unknown, principal: HandlePrincipal, mode: 'lock' | 'snapshot'): Opening | null {
    const kind = this.#kinds.get(kindName)
    if (kind === undefined || typeof id !== 'string' || !HANDLE_ID.test(id)) return null
    // A look first where the lease and the read are not one call: someone else's handle is then
    // never queued for, nor given a lock file. (Where they are, a foreign caller's lease is
    // released at once and leaves no key.)
    return { subject: 'handle', key: handleKey(kind.name, id), mode, admit: (scope) => belongs(scope, kind.name, principal), look: mode === 'lock' }
  }

  /**
   * Ends a handle (its state is gone; a call running on it saves nothing: `gone`). With a
   * principal, only its own; without (`undefined`), any (application code: an admin route).
   * Resolves whether it existed (and could be ended).
   */
  async end (kindName: string, id: unknown, principal?: HandlePrincipal): Promise<boolean> {
    const scope = await this.#peek(kindName, id, principal)
    if (scope === null) return false
    return await scope.destroy()
  }

  /**
   * Reads a handle's application keys out of band (no lock): `null` when it is unknown. With a
   * principal, only its own.
   */
  async read (kindName: string, id: unknown, principal?: HandlePrincipal): Promise<Record<string, JsonValue> | null> {
    const scope = await this.#peek(kindName, id, principal)
    if (scope === null) return null
    const out: Record<string, JsonValue> = {}
    for (const key of scope.handle.keys()) out[key] = scope.handle.get(key) as JsonValue
    return out
  }

  async #peek (kindName: string, id: unknown, principal: HandlePrincipal | undefined): Promise<StateScope | null> {
    const kind = this.#kinds.get(kindName)
    if (kind === undefined || typeof id !== 'string' || !HANDLE_ID.test(id)) return null
    const scope = await this.#backend.open(handleKey(kind.name, id), { lock: false })
    return scope !== null && belongs(scope, kind.name, principal) ? scope : null
  }

  #known (name: string): HandleKind {
    const kind = this.#kinds.get(name)
    if (kind === undefined) throw new TypeError(`unknown handle kind "${name}" (register it with app.mcp.handleKind)`)
    return kind
  }
}
