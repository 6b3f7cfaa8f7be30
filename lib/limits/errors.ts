/**
 * How a limited tool call is refused: an `McpError` with an HTTP status, a `Retry-After` header
 * and `data` a client can act on.
 *
 * | refusal | HTTP | JSON-RPC code | data |
 * |---|---|---|---|
 * | bucket empty | 429 | -32000 | `{ limit: 'rate', retryAfterMs, tool }` |
 * | cap of calls in flight reached | 429 | -32000 | `{ limit: 'concurrency', retryAfterMs, tool }` |
 * | backend failing, `onBackendError: 'closed'` | 503 | -32000 | `{ limit: 'unavailable', retryAfterMs, tool }` |
 *
 * `Retry-After` is `retryAfterMs` in whole seconds, rounded up (at least 1). The code is in
 * the implementation-defined range (MCP 2026-07-28 defines no rate-limit error; -32020 and up
 * are the specification's): clients act on the HTTP status and on `data`, never on the code.
 */
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import type { LimitKind } from './backend.js'

/** What refused the call: a limit, or the backend while it fails (with `onBackendError: 'closed'`). */
export type RefusalKind = LimitKind | 'unavailable'

/** `data` of a refusal. */
export interface ToolLimitErrorData {
  limit: RefusalKind
  /** Milliseconds after which a retry may succeed (for `rate`, when the next token is there). */
  retryAfterMs: number
  tool: string
}

/** `Retry-After` (RFC 9110: delay-seconds) for a wait in ms: whole seconds, rounded up, at least 1. */
export function retryAfterSeconds (ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)))
}

/** A tool call refused by its limits (see the module doc). */
export class ToolLimitError extends McpError {
  readonly limit: RefusalKind
  readonly retryAfterMs: number
  /** Headers of the HTTP answer when this error is the only message: `Retry-After`. */
  declare readonly headers: Record<string, string>
  declare readonly status: number
  declare readonly data: ToolLimitErrorData

  constructor (tool: string, limit: RefusalKind, retryAfterMs: number) {
    const wait = Math.max(0, Math.ceil(retryAfterMs))
    super(ErrorCode.ServerError, MESSAGES[limit](tool, wait), { limit, retryAfterMs: wait, tool } satisfies ToolLimitErrorData,
      limit === 'unavailable' ? 503 : 429, { 'retry-after': retryAfterSeconds(wait) })
    this.name = 'ToolLimitError'
    this.limit = limit
    this.retryAfterMs = wait
  }
}

const MESSAGES: Record<RefusalKind, (tool: string, ms: number) => string> = {
  rate: (tool, ms) => `Rate limit of tool "${tool}" exceeded; retry after ${ms} ms`,
  concurrency: (tool, ms) => `Too many calls of tool "${tool}" in progress; retry after ${ms} ms`,
  unavailable: (tool, ms) => `Limits of tool "${tool}" cannot be checked right now; retry after ${ms} ms`
}
