/**
 * Wire errors: the JSON-RPC codes MCP uses, the error a handler or the protocol layer raises to
 * answer with one, and the ONE mapping from any thrown value to the response a client gets.
 * Fastify-level misuse errors (`FST_ERR_MCP_*`) live in `lib/errors.ts` and never reach the wire
 * except through this mapping.
 */

export type RequestId = string | number

export interface JsonRpcErrorObject {
  code: number
  message: string
  data?: unknown
}

export interface JsonRpcErrorResponse {
  jsonrpc: '2.0'
  id: RequestId | null
  error: JsonRpcErrorObject
}

/** Error codes (JSON-RPC 2.0 and the MCP specification). */
export const ErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  /** Implementation-defined server error (used for busy / unavailable sessions). */
  ServerError: -32000,
  /** Handshake era: the `Mcp-Session-Id` names no live session of this principal (HTTP 404). */
  SessionNotFound: -32001,
  /** Handshake-era (≤ 2025-11-25) resource not found. */
  ResourceNotFound: -32002,
  /** 2025-11-25: URL elicitation required. */
  UrlElicitationRequired: -32042,
  /** 2026-07-28: a header disagrees with the body. */
  HeaderMismatch: -32020,
  /** 2026-07-28: the request needs a client capability that was not declared. */
  MissingRequiredClientCapability: -32021,
  /** 2026-07-28: unsupported protocol version. */
  UnsupportedProtocolVersion: -32022
} as const

/** An error that a handler (or the protocol layer) raises to answer with a JSON-RPC error. */
export class McpError extends Error {
  readonly code: number
  readonly data: unknown
  /** HTTP status for the response when this is the only message (defaults by code). */
  readonly status: number | undefined
  /**
   * HTTP headers of the response when this is the only message and it is answered as JSON
   * (`Retry-After`, `WWW-Authenticate`); inside a batch or an SSE stream there is no place for them.
   */
  readonly headers: Record<string, string> | undefined
  constructor (code: number, message: string, data?: unknown, status?: number, headers?: Record<string, string>) {
    super(message)
    this.name = 'McpError'
    this.code = code
    this.data = data
    this.status = status
    this.headers = headers
  }

  toJSON (): JsonRpcErrorObject {
    return this.data === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, data: this.data }
  }
}

/** The most characters of a client's text (a name, a key, a path) that an error message echoes. */
export const MAX_ECHOED = 128

/** The most characters of a URI that an error's data echoes (a "Resource not found" names it). */
export const MAX_ECHOED_URI = 2048

/**
 * `text`, as an error message (or a log line) may echo it: at most `max` characters, cut with "…".
 * A client's name or key is echoed so that it can tell what was refused, but not at the length it
 * was sent (a request of a few MiB would be answered, and kept in the event log, at that length).
 */
export function echoed (text: string, max = MAX_ECHOED): string {
  return text.length > max ? `${text.slice(0, max)}…` : text
}

export function errorResponse (id: RequestId | null, code: number, message: string, data?: unknown): JsonRpcErrorResponse {
  const error: JsonRpcErrorObject = data === undefined ? { code, message } : { code, message, data }
  return { jsonrpc: '2.0', id, error }
}

/** The response a thrown value becomes. */
export interface ErrorReply {
  status: number
  body: JsonRpcErrorResponse
  /** Headers the error names (sent only when it answers the POST alone, as JSON). */
  headers?: Record<string, string>
}

/** The logger the mapping reports the server's own failures to (a Fastify/pino logger fits). */
export interface ErrorLog {
  error (obj: object, msg: string): void
}

/** Where {@link errorReply} answers and reports an error that is the server's fault. */
export interface ErrorContext {
  /** Status when the error names none (200 for a request inside a response, 500 for the HTTP request). */
  status: number
  log: ErrorLog
  /** Log line of an unexpected error. Default "MCP request failed". */
  msg?: string
  /** Context for that log line (the method, the session…). */
  what?: Record<string, unknown>
}

/**
 * THE mapping from a thrown value to a JSON-RPC error response: an {@link McpError} answers under
 * `id` with its code, data and status (`err.status`, else `ctx.status`); anything else is the
 * server's fault: `-32603` "Internal error" without its message (the cause goes to the log).
 */
export function errorReply (err: unknown, id: RequestId | null, ctx: ErrorContext): ErrorReply {
  if (err instanceof McpError) {
    const reply: ErrorReply = { status: err.status ?? ctx.status, body: errorResponse(id, err.code, err.message, err.data) }
    if (err.headers !== undefined) reply.headers = err.headers
    return reply
  }
  ctx.log.error({ err, ...ctx.what }, ctx.msg ?? 'MCP request failed')
  return { status: ctx.status, body: errorResponse(id, ErrorCode.InternalError, 'Internal error') }
}
