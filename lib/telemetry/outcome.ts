/**
 * What a request ended with, as the conventions name it: `error.type` is the JSON-RPC error code
 * (`"-32602"`), or `tool_error` for a tool result with `isError: true`; a refusal (HTTP 429 or
 * 503) also gets a low-cardinality reason for the refusal counter.
 */
import { SpanStatusCode, type Span } from '@opentelemetry/api'
import { OWN, SEMCONV } from './attributes.js'

/** The outcome of one request (`null`: success). */
export interface Outcome {
  errorType: string
  /** The JSON-RPC error code (absent for `tool_error`). */
  code?: number
  /** The error message the client got (the span status's description). */
  message?: string
  /** The HTTP status of the answer, when a single request was refused as a whole. */
  status: number
  /** Why it was refused (429 / 503 only). */
  reason?: string
}

/** The refusals the wires answer with 429 or 503, by their (fixed) message (docs/observability.md lists each reason). */
export const REASONS: Readonly<Record<string, string>> = {
  'Another request of this session is still being processed.': 'session_busy',
  'Session lock is unavailable.': 'lock_unavailable',
  'Session store is unavailable.': 'store_unavailable',
  'Session data cannot be read.': 'session_unreadable',
  'Message bus is unavailable.': 'bus_unavailable',
  'Too many requests and streams open for this session; retry later': 'session_streams',
  'Another call on this handle is still being processed.': 'handle_busy',
  'State lock is unavailable.': 'lock_unavailable',
  'State store is unavailable.': 'store_unavailable',
  'Handle data cannot be read.': 'handle_unreadable',
  'Handle lock was lost; the changes of this call were not saved.': 'lock_lost',
  'Session lock was lost; the changes of this request were not saved.': 'lock_lost',
  'The request was abandoned by its client; its changes were not saved.': 'abandoned',
  'The call was abandoned by its client; its changes were not saved.': 'abandoned',
  ['Session store did not confirm the save; whether the changes of this request were saved is unknown. ' +
    'A retry of a tool call with the same idempotency key says which: it answers the recorded result if they were, and runs the call if not.']: 'save_unknown',
  ['State store did not confirm the save; whether the changes of this call were saved is unknown. ' +
    'A retry with the same idempotency key says which: it answers the recorded result if they were, and runs the call if not.']: 'save_unknown',
  'Another call with this idempotency key is still being processed.': 'call_busy',
  'The idempotency record cannot be read.': 'call_unreadable',
  'The idempotency record\'s lock was lost; the call was stopped and not recorded.': 'lock_lost',
  'Tasks cannot be created right now; retry later': 'tasks_unavailable',
  'Tasks are unavailable right now; retry later': 'tasks_unavailable',
  'The change could not be confirmed by enough replicas: it may or may not have been kept; retry later.': 'unconfirmed',
  'The lock could not be confirmed by enough replicas: nothing was done; retry later.': 'lease_unconfirmed'
}

/** The reason of a 429/503 (see the module doc); `undefined` for other statuses. */
export function refusalReason (status: number, message: unknown, data: unknown): string | undefined {
  if (status !== 429 && status !== 503) return undefined
  const limit = typeof data === 'object' && data !== null ? (data as { limit?: unknown }).limit : undefined
  // A tool limit's refusal (`ToolLimitError`), or the Tasks extension's cap of running tasks.
  if (limit === 'tasks') return 'task_limit'
  if (typeof limit === 'string') return `tool_${limit === 'unavailable' ? 'limits_unavailable' : limit}`
  return (typeof message === 'string' ? REASONS[message] : undefined) ?? 'other'
}

/** The outcome of a response body (a JSON-RPC response object) answered with `status`. */
export function outcomeOfResponse (body: unknown, status: number): Outcome | null {
  if (typeof body !== 'object' || body === null) return null
  const error = (body as { error?: { code?: unknown, message?: unknown, data?: unknown } }).error
  if (error !== undefined) {
    const code = typeof error.code === 'number' ? error.code : undefined
    const message = typeof error.message === 'string' ? error.message : undefined
    return { errorType: code === undefined ? '_OTHER' : String(code), code, message, status, reason: refusalReason(status, message, error.data) }
  }
  const result = (body as { result?: { isError?: unknown } }).result
  if (result?.isError === true) return { errorType: 'tool_error', status }
  return null
}

/** The outcome of an error thrown out of a wire (the routes answer it: an `McpError`'s status, else 500 -32603). */
export function outcomeOfError (err: unknown): Outcome {
  const e = err as { code?: unknown, message?: unknown, status?: unknown, data?: unknown } | null
  if (e !== null && typeof e === 'object' && typeof e.code === 'number' && Number.isInteger(e.code)) {
    const status = typeof e.status === 'number' ? e.status : 200
    const message = typeof e.message === 'string' ? e.message : undefined
    return { errorType: String(e.code), code: e.code, message, status, reason: refusalReason(status, message, e.data) }
  }
  return { errorType: '-32603', code: -32603, message: 'Internal error', status: 500 }
}

/** Marks `span` with an error outcome: `error.type`, the JSON-RPC code, the refusal reason, and an ERROR status. */
export function markError (span: Span, outcome: Outcome): void {
  span.setAttribute(SEMCONV.errorType, outcome.errorType)
  if (outcome.code !== undefined) span.setAttribute(SEMCONV.rpcStatus, String(outcome.code))
  if (outcome.reason !== undefined) span.setAttribute(OWN.reason, outcome.reason)
  span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.message })
}
