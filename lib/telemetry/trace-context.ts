/**
 * W3C Trace Context in MCP `params._meta` (SEP-414; what the semantic conventions recommend):
 * `traceparent` and `tracestate`, unprefixed. Parsed here rather than through the app's
 * propagator so that `_meta` is honoured whatever propagators the app registered (HTTP headers
 * stay the app's business); anything malformed is ignored, never an error: a trace is a hint.
 */
import { createTraceState, isSpanContextValid, trace, type Context, type SpanContext } from '@opentelemetry/api'

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^]*)?$/

/** W3C: a `tracestate` header is at most 512 characters (32 members); longer ones are dropped. */
const MAX_TRACESTATE = 512

/** The remote span context of a `traceparent` (and `tracestate`), or `null` when absent or malformed. */
export function parseTraceparent (traceparent: unknown, tracestate?: unknown): SpanContext | null {
  if (typeof traceparent !== 'string' || traceparent.length > 128) return null
  const m = TRACEPARENT.exec(traceparent)
  if (m === null) return null
  const [, version, traceId, spanId, flags, rest] = m
  // Version ff is invalid; version 00 has nothing after the flags.
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null
  const sc: SpanContext = { traceId, spanId, traceFlags: parseInt(flags, 16) & 1, isRemote: true }
  if (!isSpanContextValid(sc)) return null
  if (typeof tracestate === 'string' && tracestate !== '' && tracestate.length <= MAX_TRACESTATE) sc.traceState = createTraceState(tracestate)
  return sc
}

/** The context a request's span is a child of: `_meta`'s trace context, or null when `_meta` has none. */
export function contextFromMeta (parent: Context, meta: unknown): Context | null {
  if (typeof meta !== 'object' || meta === null) return null
  const m = meta as Record<string, unknown>
  // Most requests carry none: no call then.
  if (m.traceparent === undefined) return null
  const sc = parseTraceparent(m.traceparent, m.tracestate)
  return sc === null ? null : trace.setSpanContext(parent, sc)
}

/** The `traceparent` of a span context. */
export function formatTraceparent (sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-0${(sc.traceFlags & 1).toString(16)}`
}

/** `_meta` entries carrying a span context to the peer (a request the server sends to the client). */
export function metaOf (sc: SpanContext): Record<string, string> {
  const meta: Record<string, string> = { traceparent: formatTraceparent(sc) }
  const state = sc.traceState?.serialize()
  if (state !== undefined && state !== '') meta.tracestate = state
  return meta
}
