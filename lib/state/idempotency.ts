/**
 * Idempotency records: what a keyed `tools/call` did, kept in the state record the call runs on
 * (its session, or its state handle) as one protocol key, `$mcp/idem/<digest>`. Set like any key
 * the call changes, it is written by the same fenced save as the call's changes — the same Redis
 * script, the same PostgreSQL statement, the same file write — so both are kept or neither: a
 * retry finds the record exactly when the changes were kept, even across a lost reply, a lost
 * lease or a crash between the save and the answer. A call on no state keeps its record in a
 * record of its own (`~call~<digest>`, `protocol/keyed-calls.ts`).
 *
 * The digest names the key without revealing it (the key is a secret of the client, like an id):
 * SHA-256 over the principal, the tool and the key. Beside the result a record keeps a hash of
 * the call's arguments in a canonical form (keys sorted), so the same key with other arguments
 * is told apart. A state keeps its `maxPerState` newest records; a result over `maxResultBytes`
 * is recorded as applied without its result, and its replay says so.
 */
import { createHash } from 'node:crypto'
import { PROTOCOL_PREFIX, type SessionHandle } from '../sessions/session-handle.js'

/** The protocol keys of idempotency records. */
export const IDEMPOTENCY_PREFIX = `${PROTOCOL_PREFIX}idem/`

/** The `_meta` key of `tools/call` params a client may carry its idempotency key in. */
export const KEY_META = 'fastify-mcp-http/idempotencyKey'

/** `_meta` key marking a result as the replay of a recorded one. */
export const REPLAY_META = 'fastify-mcp-http/idempotentReplay'

/** How records are kept (the `idempotency` option, resolved). */
export interface IdempotencyLimits {
  /** Records one state keeps (the newest). */
  maxPerState: number
  /** The largest result recorded (bytes of its JSON); a larger one is recorded as applied, without it. */
  maxResultBytes: number
}

/** The `idempotency` option, resolved. */
export interface ResolvedIdempotency extends IdempotencyLimits {
  /** How long the record of a call on no state lives (ms). */
  ttlMs: number
  /** Identical calls without a key absorbed within `windowMs` (`tools`: only these; `null`: every tool), or off. */
  dedupe: { windowMs: number, tools: ReadonlySet<string> | null } | null
}

/** A call's identity: the digest of its key, and the hash of its arguments. */
export interface CallKey {
  /** SHA-256 of (principal, tool, key), base64url: the record's name. */
  readonly digest: string
  /** SHA-256 of the arguments' canonical JSON, base64url. */
  readonly args: string
  /**
   * Set for an identical call absorbed without a key (`dedupe`): a record older than this many
   * ms no longer answers it.
   */
  readonly windowMs?: number
}

/** A stored record: arguments hash, when (epoch ms), the result or `t` (applied, result not kept). */
interface StoredRecord {
  h: string
  at: number
  r?: Record<string, unknown>
  t?: 1
}

/** What a state holds for a key: nothing (run the call), a replay, or a key used with other arguments. */
export type Found =
  | { kind: 'none' }
  | { kind: 'replay', result: Record<string, unknown> }
  | { kind: 'conflict' }

const NONE: Found = Object.freeze({ kind: 'none' })
const CONFLICT: Found = Object.freeze({ kind: 'conflict' })

/** A key as a client may send it: 1–255 printable ASCII characters. */
const KEY = /^[\x20-\x7e]{1,255}$/

export function isIdempotencyKey (value: unknown): value is string {
  return typeof value === 'string' && KEY.test(value)
}

/** JSON with every object's keys sorted: the same value always gives the same text. */
export function canonicalJson (value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(v => canonicalJson(v === undefined ? null : v)).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const obj = value as Record<string, unknown>
    const keys = Object.keys(obj).filter(k => obj[k] !== undefined).sort()
    return `{${keys.map(k => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`
  }
  return JSON.stringify(value) ?? 'null'
}

const sha = (text: string): string => createHash('sha256').update(text).digest('base64url')

const nameOf = (principal: string | null, tool: string, key: string): string => sha(`${principal === null ? '-' : `p:${principal}`}\u0000${tool}\u0000${key}`)

/** The identity of a call keyed `key` by `principal` on `tool` with `args`. */
export function callKey (principal: string | null, tool: string, key: string, args: object): CallKey {
  return { digest: nameOf(principal, tool, key), args: sha(canonicalJson(args)) }
}

/** The identity `dedupe` gives a call without a key: its principal, tool and arguments, answered for `windowMs`. */
export function dedupeKey (principal: string | null, tool: string, args: object, windowMs: number): CallKey {
  const hash = sha(canonicalJson(args))
  return { digest: nameOf(principal, tool, `\u0000dedupe\u0000${hash}`), args: hash, windowMs }
}

/** What `state` holds for `key` (see {@link Found}); `now`: epoch ms. */
export function lookUp (state: SessionHandle, key: CallKey, now = Date.now()): Found {
  const stored = state.getProtocol<StoredRecord>(IDEMPOTENCY_PREFIX + key.digest)
  if (stored === undefined || stored === null || typeof stored !== 'object') return NONE
  if (key.windowMs !== undefined && now - stored.at > key.windowMs) return NONE
  if (stored.h !== key.args) return CONFLICT
  return { kind: 'replay', result: replayOf(stored) }
}

/** The answer to a duplicate: the recorded result, marked as a replay. */
function replayOf (stored: StoredRecord): Record<string, unknown> {
  if (stored.r === undefined) {
    return {
      content: [{ type: 'text', text: 'This call was applied before; its result was too large to keep, so it cannot be repeated here.' }],
      _meta: { [REPLAY_META]: true, 'fastify-mcp-http/resultNotKept': true }
    }
  }
  const meta = stored.r._meta
  return { ...stored.r, _meta: { ...(typeof meta === 'object' && meta !== null ? meta : {}), [REPLAY_META]: true } }
}

/**
 * Records `result` for `key` in `state` (a copy, written with the state's other changes when the
 * request ends), keeping the state's `maxPerState` newest records.
 */
export function record (state: SessionHandle, key: CallKey, result: Record<string, unknown>, limits: IdempotencyLimits, now = Date.now()): void {
  const name = IDEMPOTENCY_PREFIX + key.digest
  const text = JSON.stringify(result)
  const stored: StoredRecord = Buffer.byteLength(text) <= limits.maxResultBytes
    ? { h: key.args, at: now, r: result }
    : { h: key.args, at: now, t: 1 }
  state.setProtocol(name, stored)
  trim(state, name, limits.maxPerState)
}

/** Removes the oldest records beyond `max` (never `keep`, the one just written). */
function trim (state: SessionHandle, keep: string, max: number): void {
  const names = state.protocolKeys(IDEMPOTENCY_PREFIX)
  if (names.length <= max) return
  const aged = names.filter(n => n !== keep).map(n => ({ n, at: state.getProtocol<StoredRecord>(n)?.at ?? 0 }))
  aged.sort((a, b) => a.at - b.at)
  for (let i = 0; i < names.length - max; i++) state.deleteProtocol(aged[i].n)
}
