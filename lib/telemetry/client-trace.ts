/**
 * Requests the server sends to a client (elicitation, sampling, roots) and the client's answers,
 * which may reach another instance. On the asking instance A: a CLIENT span (`elicitation/create`)
 * under the tool call's span, its trace context put in the request's `params._meta` (for the
 * client) and in the bus's expectation of the answer (for whichever instance receives it). On the
 * receiving instance B: an INTERNAL span for the answer's delivery, a child of A's span, so both
 * instances' spans form one trace. Back on A the span records how many instances the answer
 * crossed (`fastify_mcp.answer.hops`).
 */
import { context, SpanKind, SpanStatusCode, trace, type Context, type Span, type Tracer } from '@opentelemetry/api'
import { EVENTS, MAX_ATTRIBUTE, OWN, SEMCONV } from './attributes.js'
import { formatTraceparent, metaOf, parseTraceparent } from './trace-context.js'

/** A request to the client, traced (see the module doc). */
export interface ClientRequestTrace {
  /** The request's params with the trace context in `_meta` (the same object when not traced). */
  params (params: Record<string, unknown>): Record<string, unknown>
  /** What the bus keeps with the expectation of the answer (the span's `traceparent`), or undefined. */
  readonly tag: string | undefined
  /** The answer arrived, across `hops` instances (undefined: found by polling the kept copy). */
  answered (answer: Record<string, unknown>, hops: number | undefined): void
  /** No answer (timeout, cancelled, session ended). */
  failed (err: unknown): void
}

/** Nothing traced. */
export const NO_CLIENT_REQUEST: ClientRequestTrace = {
  params: (p) => p,
  tag: undefined,
  answered () {},
  failed () {}
}

/** A client's answer being delivered on this instance. */
export interface AnswerTrace {
  /** The answer was expected; `tag` is what the asking instance left with the expectation. */
  kept (tag: string | undefined): void
  /** Delivered (or dropped, or the bus failed: `err`). */
  end (err?: unknown): void
}

export const NO_ANSWER: AnswerTrace = { kept () {}, end () {} }

/** @internal A traced request to the client. */
export class LiveClientRequest implements ClientRequestTrace {
  readonly tag: string | undefined
  readonly #span: Span

  constructor (span: Span) {
    this.#span = span
    this.tag = formatTraceparent(span.spanContext())
  }

  params (params: Record<string, unknown>): Record<string, unknown> {
    const own = params._meta
    const meta = typeof own === 'object' && own !== null ? { ...own, ...metaOf(this.#span.spanContext()) } : metaOf(this.#span.spanContext())
    return { ...params, _meta: meta }
  }

  answered (answer: Record<string, unknown>, hops: number | undefined): void {
    const span = this.#span
    if (hops !== undefined) span.setAttribute(OWN.hops, hops)
    span.addEvent(EVENTS.answer, hops === undefined ? undefined : { [OWN.hops]: hops })
    const error = answer.error as { code?: unknown, message?: unknown } | undefined
    if (error !== undefined) {
      span.setAttribute(SEMCONV.errorType, typeof error.code === 'number' ? String(error.code) : '_OTHER')
      span.setStatus({ code: SpanStatusCode.ERROR, message: typeof error.message === 'string' ? error.message.slice(0, MAX_ATTRIBUTE) : undefined })
    }
    span.end()
  }

  failed (err: unknown): void {
    const span = this.#span
    span.setAttribute(SEMCONV.errorType, (err as { code?: unknown })?.code === undefined ? '_OTHER' : String((err as { code: unknown }).code))
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : undefined })
    span.end()
  }
}

/** Starts the CLIENT span of a request to the client under the active span (null when not recorded). */
export function startClientRequest (tracer: Tracer, method: string, id: string, sid: string | null): ClientRequestTrace {
  const parent = context.active()
  if (trace.getSpan(parent)?.isRecording() !== true) return NO_CLIENT_REQUEST
  const span = tracer.startSpan(method, { kind: SpanKind.CLIENT }, parent)
  if (!span.isRecording()) return NO_CLIENT_REQUEST
  span.setAttributes({ [SEMCONV.method]: method, [SEMCONV.requestId]: id })
  if (sid !== null) span.setAttribute(SEMCONV.session, sid)
  return new LiveClientRequest(span)
}

/** @internal The delivery of a client's answer on this instance (see the module doc). */
export class LiveAnswer implements AnswerTrace {
  readonly #tracer: Tracer
  readonly #ambient: Context
  readonly #start = Date.now()
  readonly #id: string
  readonly #sid: string | null
  #span: Span | null = null

  constructor (tracer: Tracer, id: unknown, sid: string | null) {
    this.#tracer = tracer
    this.#ambient = context.active()
    this.#id = typeof id === 'string' || typeof id === 'number' ? String(id).slice(0, MAX_ATTRIBUTE) : ''
    this.#sid = sid
  }

  kept (tag: string | undefined): void {
    const remote = parseTraceparent(tag)
    const parent = remote === null ? this.#ambient : trace.setSpanContext(this.#ambient, remote)
    const span = this.#tracer.startSpan('answer delivery', { kind: SpanKind.INTERNAL, startTime: this.#start }, parent)
    if (!span.isRecording()) return
    span.setAttribute(SEMCONV.requestId, this.#id)
    if (this.#sid !== null) span.setAttribute(SEMCONV.session, this.#sid)
    this.#span = span
  }

  end (err?: unknown): void {
    const span = this.#span
    if (span === null) return
    if (err !== undefined) {
      span.setAttribute(SEMCONV.errorType, '_OTHER')
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : undefined })
    }
    span.end()
  }
}
