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

/** One classified message of a body. */
export type Parsed =
  | { kind: 'request', message: JsonRpcRequest }
  | { kind: 'notification', message: JsonRpcNotification }
  | { kind: 'response', message: JsonRpcResponse }
  | { kind: 'invalid', id: RequestId | null, error: JsonRpcErrorObject }

function isId (v: unknown): v is RequestId {
  return (typeof v === 'string') || (typeof v === 'number' && Number.isFinite(v))
}

/** A JSON object (not null, not an array). */
export function isPlainObject (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/**
 * Why a request's `params._meta` is malformed (not an object, or a `progressToken` that is not a
 * string or a number), or `null` when it is absent or well-formed. Checked before the handler
 * runs: a token of another type would be echoed into every progress notification.
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
  return null
}

/** The id of a malformed message, when it can be read (so an error can echo it). */
function readableId (v: Record<string, unknown>): RequestId | null {
  return isId(v.id) ? v.id : null
}

/** Classifies one JSON value as a JSON-RPC message; never throws. */
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
    return { kind: 'request', message: value as unknown as JsonRpcRequest }
  }
  if ('result' in value || 'error' in value) {
    if ('result' in value && 'error' in value) return invalid('a response carries result or error, not both')
    if (!isId(value.id) && !(value.id === null && 'error' in value)) return invalid('response id must be a string or a number')
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

/** Parses a body text into classified messages. Parse failures answer -32700 with no id. */
export function parseBody (text: string): ParsedBody {
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
