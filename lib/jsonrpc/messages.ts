/**
 * JSON-RPC 2.0 message types and the parsing that turns a request body into classified messages
 * (or a precise error) without ever throwing. Error codes and the error mapping: `errors.ts`.
 */
import { ErrorCode, errorResponse, type JsonRpcErrorObject, type JsonRpcErrorResponse, type RequestId } from './errors.js'

export type { RequestId } from './errors.js'

export interface JsonRpcRequest {
  jsonrpc: '2.0'
  id: RequestId
  method: string
  params?: Record<string, unknown>
}

export interface JsonRpcNotification {
  jsonrpc: '2.0'
  method: string
  params?: Record<string, unknown>
}

export interface JsonRpcResultResponse {
  jsonrpc: '2.0'
  id: RequestId
  result: Record<string, unknown>
}

export type JsonRpcResponse = JsonRpcResultResponse | JsonRpcErrorResponse
export type JsonRpcMessage = JsonRpcRequest | JsonRpcNotification | JsonRpcResponse

export function resultResponse (id: RequestId, result: Record<string, unknown>): JsonRpcResultResponse {
  return { jsonrpc: '2.0', id, result }
}

/** The JSON of each `_meta` made by {@link presetMeta}. */
const presetJson = new WeakMap<object, string>()

/**
 * A result `_meta` that many results share (the server's own, on every 2026-07-28 result), with
 * its JSON made once for {@link stringifyMessage}: a frozen copy of `meta` as JSON has it, so that
 * the object and its JSON stay the same.
 */
export function presetMeta (meta: Record<string, unknown>): Readonly<Record<string, unknown>> {
  const json = JSON.stringify(meta)
  const copy = deepFreeze(JSON.parse(json) as Record<string, unknown>)
  presetJson.set(copy, json)
  return copy
}

function deepFreeze<T> (value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const v of Object.values(value)) deepFreeze(v)
    Object.freeze(value)
  }
  return value
}

/** The last key JSON.stringify writes of a plain object (for…in goes in the same order). */
function lastKey (value: object): string | undefined {
  let last: string | undefined
  for (const key in value) last = key
  return last
}

/**
 * `JSON.stringify(message)`, the same text, made faster for a response whose result ends with a
 * {@link presetMeta} `_meta` (the message ends with its result): the `_meta`'s JSON is copied in
 * rather than walked again, on every response that carries the server's `_meta`. Anything else is
 * serialized as it is.
 */
export function stringifyMessage (message: unknown): string {
  const result = (message as { result?: unknown } | null)?.result
  if (typeof result !== 'object' || result === null) return JSON.stringify(message)
  const r = result as Record<string, unknown>
  const meta = r._meta
  const json = typeof meta === 'object' && meta !== null ? presetJson.get(meta) : undefined
  // A `toJSON` anywhere on the way would make the text something else: not taken apart then.
  if (json === undefined || r.toJSON !== undefined || (message as { toJSON?: unknown }).toJSON !== undefined ||
    lastKey(r) !== '_meta' || lastKey(message as object) !== 'result') {
    return JSON.stringify(message)
  }
  // Left out while the rest is serialized (JSON.stringify skips an undefined value), then put
  // back: a store, where a delete costs V8 a runtime call and a map change each time.
  r._meta = undefined
  let text: string
  try {
    text = JSON.stringify(message)
  } finally {
    r._meta = meta
  }
  // The text ends with the result's and the message's closing braces; `{` before them: the
  // result had nothing else.
  const alone = text.charCodeAt(text.length - 3) === 0x7b
  return `${text.slice(0, -2)}${alone ? '' : ','}"_meta":${json}}}`
}

/** One classified message of a body. */
export type Parsed =
  | { kind: 'request', message: JsonRpcRequest }
  | { kind: 'notification', message: JsonRpcNotification }
  | { kind: 'response', message: JsonRpcResponse }
  | { kind: 'invalid', id: RequestId | null, error: JsonRpcErrorObject }

/**
 * Bounds on what a client sends that the server echoes or keeps (docs/errors-and-bounds.md, "Bounds"). A request
 * id is echoed in every response and kept while the request runs; a progress token is echoed in
 * every progress notification (and kept in the event log of a resumable stream).
 */
export const MAX_ID_LENGTH = 256
/** The longest string `_meta.progressToken`, in characters (numbers are not bounded). */
export const MAX_PROGRESS_TOKEN_LENGTH = 256
/**
 * The deepest nesting of arrays and objects a body may have (the message object is level 1, a
 * batch array adds one). JSON Schema tool arguments rarely nest deeper than ~10; far deeper values
 * would overflow the stack of whatever walks them recursively (serialization, schema validation).
 */
export const MAX_DEPTH = 64

function isId (v: unknown): v is RequestId {
  return (typeof v === 'string') || (typeof v === 'number' && Number.isFinite(v))
}

/** A string id or token over `max` characters (numbers never are). */
function tooLong (v: unknown, max: number): boolean {
  return typeof v === 'string' && v.length > max
}

/** A JSON object (not null, not an array). */
export function isPlainObject (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

const TOKEN_TOO_LONG = `Invalid params: _meta.progressToken must be at most ${MAX_PROGRESS_TOKEN_LENGTH} characters`

/**
 * Why a request's `params._meta` is malformed (not an object, or a `progressToken` that is not a
 * string or a number, or a string token over {@link MAX_PROGRESS_TOKEN_LENGTH}), or `null` when it
 * is absent or well-formed. Checked before the handler runs: a token of another type would be
 * echoed into every progress notification. (An over-long token is already refused by
 * {@link classify}, with a 400.)
 */
export function metaProblem (params: Record<string, unknown>): string | null {
  const meta = params._meta
  if (meta === undefined) return null
  if (!isPlainObject(meta)) return 'Invalid params: _meta must be an object'
  const token = meta.progressToken
  // A progress token has the type of a request id (string | number).
  if (token !== undefined && !isId(token)) {
    return 'Invalid params: _meta.progressToken must be a string or a number'
  }
  if (tooLong(token, MAX_PROGRESS_TOKEN_LENGTH)) return TOKEN_TOO_LONG
  return null
}

/** The id of a malformed message, when it can be read and is not too long to echo. */
function readableId (v: Record<string, unknown>): RequestId | null {
  return isId(v.id) && !tooLong(v.id, MAX_ID_LENGTH) ? v.id : null
}

const ID_TOO_LONG = `id must be at most ${MAX_ID_LENGTH} characters`

/** A request whose string `_meta.progressToken` is over the bound (the rest of `_meta` is checked by {@link metaProblem}). */
function tokenTooLong (params: unknown): boolean {
  return isPlainObject(params) && isPlainObject(params._meta) && tooLong(params._meta.progressToken, MAX_PROGRESS_TOKEN_LENGTH)
}

/**
 * Classifies one JSON value as a JSON-RPC message; never throws. Ids over {@link MAX_ID_LENGTH} are
 * invalid (answered with id `null`), and so is a request whose progress token is over
 * {@link MAX_PROGRESS_TOKEN_LENGTH} (-32602, with its id): both are refused before anything keeps
 * or echoes them, and a lone invalid message is a 400 on both wires.
 */
export function classify (value: unknown): Parsed {
  if (!isPlainObject(value)) {
    return { kind: 'invalid', id: null, error: { code: ErrorCode.InvalidRequest, message: 'Invalid Request: a JSON-RPC message must be an object' } }
  }
  const id = readableId(value)
  const invalid = (message: string): Parsed => ({ kind: 'invalid', id, error: { code: ErrorCode.InvalidRequest, message: `Invalid Request: ${message}` } })
  if (value.jsonrpc !== '2.0') return invalid('jsonrpc must be "2.0"')
  if ('method' in value) {
    if (typeof value.method !== 'string' || value.method.length === 0) return invalid('method must be a non-empty string')
    if (value.params !== undefined && !isPlainObject(value.params)) return invalid('params must be an object')
    if ('result' in value || 'error' in value) return invalid('a request cannot carry result or error')
    if (!('id' in value)) return { kind: 'notification', message: value as unknown as JsonRpcNotification }
    if (value.id === null) return invalid('id must not be null')
    if (!isId(value.id)) return invalid('id must be a string or a number')
    if (tooLong(value.id, MAX_ID_LENGTH)) return invalid(ID_TOO_LONG)
    if (tokenTooLong(value.params)) return { kind: 'invalid', id, error: { code: ErrorCode.InvalidParams, message: TOKEN_TOO_LONG } }
    return { kind: 'request', message: value as unknown as JsonRpcRequest }
  }
  if ('result' in value || 'error' in value) {
    if ('result' in value && 'error' in value) return invalid('a response carries result or error, not both')
    if (!isId(value.id) && !(value.id === null && 'error' in value)) return invalid('response id must be a string or a number')
    if (tooLong(value.id, MAX_ID_LENGTH)) return invalid(`response ${ID_TOO_LONG}`)
    if ('result' in value && !isPlainObject(value.result)) return invalid('result must be an object')
    if ('error' in value) {
      const e = value.error
      if (!isPlainObject(e) || typeof e.code !== 'number' || typeof e.message !== 'string') return invalid('error must be {code, message}')
    }
    return { kind: 'response', message: value as unknown as JsonRpcResponse }
  }
  return invalid('not a request, notification or response')
}

/** Result of parsing a whole body. */
export type ParsedBody =
  | { ok: true, batch: boolean, messages: Parsed[] }
  | { ok: false, error: JsonRpcErrorResponse }

/** Whether `text` has at most `max` opening brackets, strings included (then it cannot nest deeper). */
function fewOpenings (text: string, max: number): boolean {
  let count = 0
  for (let i = text.indexOf('{'); i !== -1; i = text.indexOf('{', i + 1)) if (++count > max) return false
  for (let i = text.indexOf('['); i !== -1; i = text.indexOf('[', i + 1)) if (++count > max) return false
  return true
}

/**
 * Whether the arrays and objects of a JSON text nest deeper than `max`: one pass over the text,
 * brackets inside strings not counted (a string is skipped with `indexOf` up to its closing quote).
 * Not a validator: a text that is not JSON may pass, and JSON.parse then refuses it. Most bodies
 * have fewer openings than `max` in all and are not scanned at all.
 */
export function nestsDeeper (text: string, max: number): boolean {
  if (fewOpenings(text, max)) return false
  let depth = 0
  for (let i = 0, n = text.length; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22) { // '"': skip to the closing quote, the first one after an even run of backslashes
      for (;;) {
        i = text.indexOf('"', i + 1)
        if (i === -1) return false
        let k = i - 1
        while (text.charCodeAt(k) === 0x5c) k--
        if (((i - 1 - k) & 1) === 0) break
      }
    } else if (c === 0x7b || c === 0x5b) { // '{' '['
      if (++depth > max) return true
    } else if (c === 0x7d || c === 0x5d) { // '}' ']'
      depth--
    }
  }
  return false
}

const TOO_DEEP = `Invalid Request: the body nests deeper than ${MAX_DEPTH} levels`

/**
 * Parses a body text into classified messages. Parse failures answer -32700 with no id; a body
 * nesting deeper than {@link MAX_DEPTH} is refused before it is parsed, -32600 with no id.
 */
export function parseBody (text: string): ParsedBody {
  if (nestsDeeper(text, MAX_DEPTH)) return { ok: false, error: errorResponse(null, ErrorCode.InvalidRequest, TOO_DEEP) }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return { ok: false, error: errorResponse(null, ErrorCode.ParseError, 'Parse error: the body is not valid JSON') }
  }
  if (Array.isArray(value)) {
    if (value.length === 0) return { ok: false, error: errorResponse(null, ErrorCode.InvalidRequest, 'Invalid Request: empty batch') }
    return { ok: true, batch: true, messages: value.map(classify) }
  }
  return { ok: true, batch: false, messages: [classify(value)] }
}
