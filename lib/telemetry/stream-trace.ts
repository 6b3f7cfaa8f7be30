/**
 * The span of a handshake-era GET (opening the session's standalone stream, or resuming one) and
 * of a DELETE (ending the session). Neither is an MCP request, so the span has no
 * `mcp.method.name`; it carries what the POST spans carry of the session and the transport
 * (`mcp.session.id`, `mcp.protocol.version`, `network.*`, `fastify_mcp.era`) and, when refused,
 * `error.type`, `rpc.response.status_code` and the refusal reason. A GET's span ends once the
 * stream is open (as a `subscriptions/listen` span does): a span the length of a stream would
 * stay open for hours. A 429 or 503 is counted in the refusal counter, traced or not.
 */
import { context, SpanKind, trace, type Attributes, type Counter, type Tracer } from '@opentelemetry/api'
import { MAX_VERSION, OWN, SEMCONV } from './attributes.js'
import { markError, outcomeOfError } from './outcome.js'
import { setPeer, type Peer } from './post-trace.js'

/** The HTTP method of the exchange. */
export type StreamMethod = 'GET' | 'DELETE'

/** Span names (fixed: no client-chosen part). */
export const STREAM_SPANS: Record<StreamMethod, string> = { GET: 'GET stream', DELETE: 'DELETE session' }

/** What the span needs of the plugin's telemetry. */
export interface StreamTelemetry {
  readonly tracer: Tracer
  readonly instruments: { readonly refusals: Counter }
}

/**
 * Runs `fn` (the GET or DELETE) in its span. `sessionId` is the checked `Mcp-Session-Id` (null
 * when malformed or absent), `version` the raw `Mcp-Protocol-Version` header.
 */
export async function traceStream<T> (t: StreamTelemetry, method: StreamMethod, sessionId: string | null, version: unknown, fn: () => Promise<T>,
  peer?: Peer): Promise<T> {
  const span = t.tracer.startSpan(STREAM_SPANS[method], { kind: SpanKind.SERVER })
  const live = span.isRecording()
  if (live) { span.setAttributes(attributes(sessionId, version)); setPeer(span, peer) }
  try {
    return live ? await context.with(trace.setSpan(context.active(), span), fn) : await fn()
  } catch (err) {
    const outcome = outcomeOfError(err)
    if (outcome.reason !== undefined) t.instruments.refusals.add(1, { [SEMCONV.httpStatus]: outcome.status, [OWN.reason]: outcome.reason })
    if (live) markError(span, outcome)
    throw err
  } finally {
    if (live) span.end()
  }
}

function attributes (sessionId: string | null, version: unknown): Attributes {
  const a: Attributes = { [SEMCONV.transport]: 'tcp', [SEMCONV.protocolName]: 'http', [OWN.era]: '2025' }
  if (sessionId !== null) a[SEMCONV.session] = sessionId
  if (typeof version === 'string' && version.length <= MAX_VERSION) a[SEMCONV.protocolVersion] = version
  return a
}
