/**
 * The telemetry of one POST: a SERVER span per request or notification it carries, named and
 * attributed as the semantic conventions for MCP say, with this plugin's own measures (lock wait
 * and hold, load and save, Redis round trips) added by the wire as they happen; at the end the
 * `mcp.server.operation.duration` of each, and the refusal counter for 429s and 503s.
 *
 * The wires only call the {@link PostTrace} methods; with telemetry off they get {@link NO_POST},
 * whose methods do nothing. When the app registered no SDK (or the span is sampled out) a span
 * does not record, and nothing is allocated for attributes.
 */
import { performance } from 'node:perf_hooks'
import { context, SpanKind, trace, type Attributes, type Context, type Span, type Tracer } from '@opentelemetry/api'
import type { Parsed } from '../jsonrpc/messages.js'
import { MAX_ATTRIBUTE, OWN, SEMCONV } from './attributes.js'
import { markError, outcomeOfError, outcomeOfResponse, type Outcome } from './outcome.js'
import { ROUND_TRIPS, type RoundTrips } from './round-trips.js'
import type { Instruments } from './instruments.js'
import { contextFromMeta } from './trace-context.js'

/** What the server knows, so that names from clients never become span names or metric attributes unbounded. */
export interface KnownNames {
  method (name: string): boolean
  tool (name: string): boolean
  prompt (name: string): boolean
}

/** What a request's trace reads of the plugin's telemetry (telemetry.ts makes the traces, so this side names only what it uses). */
interface PostTelemetry {
  readonly tracer: Tracer
  readonly instruments: Instruments
  readonly known: KnownNames
  readonly countsRoundTrips: boolean
}

/** The wire a POST arrived on. */
export type Era = '2025' | '2026-07-28'

/** Who sent the request and over which HTTP version (the conventions' `client.*`, `network.protocol.version`). */
export interface Peer {
  address?: string
  port?: number
  httpVersion?: string
}

/** Sets the {@link Peer} attributes on a span. */
export function setPeer (span: { setAttribute: (key: string, value: string | number) => unknown }, peer: Peer | undefined): void {
  if (peer === undefined) return
  if (peer.httpVersion !== undefined) span.setAttribute(SEMCONV.networkProtocolVersion, peer.httpVersion)
  if (peer.address !== undefined) span.setAttribute(SEMCONV.clientAddress, peer.address)
  if (peer.address !== undefined && peer.port !== undefined) span.setAttribute(SEMCONV.clientPort, peer.port)
}

/** What a wire tells the telemetry of its POST (see the module doc). */
export interface PostTrace {
  /** The context the POST runs in (its first span's, carrying the round-trip counter), or `null`. */
  readonly context: Context | null
  /** Runs `fn` with `msg`'s span as the active span (the handler's own spans become its children). */
  run<T> (msg: object, fn: () => T): T
  /** The negotiated protocol version (handshake era: known once the session is read). */
  version (v: string): void
  /** The session was opened: with the lock (`locked`: lock wait, the read included) or without (a load). */
  opened (ms: number, locked: boolean): void
  /** What the requests changed was written back and the lock released. */
  closed (ms: number): void
  /** `msg` was answered with `body` (a JSON-RPC response) under HTTP `status`. */
  answered (msg: object, body: unknown, status: number): void
  /**
   * The POST failed as a whole (a refusal): every request not answered yet ends with it; with
   * `all`, also those answered with success (their results were replaced by this error).
   */
  failed (err: unknown, all?: boolean): void
  /** Ends every span and records the metrics. */
  end (): void
}

/** The telemetry of a POST when telemetry is off. */
export const NO_POST: PostTrace = {
  context: null,
  run: (_msg, fn) => fn(),
  version () {},
  opened () {},
  closed () {},
  answered () {},
  failed () {},
  end () {}
}

/** One request or notification of the POST. */
interface Op {
  readonly msg: object
  readonly method: string
  /** Whether the server knows `method` (else it is `_OTHER` in names and metrics). */
  readonly known: boolean
  /** The tool or prompt named, when it is one the server knows (bounded cardinality). */
  readonly target: string | undefined
  readonly span: Span | null
  readonly ctx: Context | null
  /** `undefined` until answered; `null` for success. */
  outcome: Outcome | null | undefined
}

/** Attributes named by the conventions (checks literal keys against {@link SEMCONV}). */
type SemconvAttributes = Partial<Record<(typeof SEMCONV)[keyof typeof SEMCONV], string | number>>

const cut = (s: string): string => s.length <= MAX_ATTRIBUTE ? s : s.slice(0, MAX_ATTRIBUTE)

/** @internal The telemetry of a POST (see the module doc). */
export class LivePost implements PostTrace {
  readonly context: Context | null
  readonly #t: PostTelemetry
  readonly #era: Era
  readonly #ops: Op[]
  readonly #trips: RoundTrips = { n: 0 }
  #version: string | undefined
  /** The version the spans were started with (a later one is set when they end). */
  readonly #startVersion: string | undefined
  #recording = false
  /**
   * When the POST's messages started (one clock read for all of them: they start together), for
   * their duration metric; not read when nothing records it.
   */
  readonly #started: number
  #openedAt = 0
  // The state scope's measures, kept until the spans end and set there in one pass: a
  // `setAttribute` on a recording span costs checks per call, and most POSTs have one span.
  #lockKey: string | undefined
  #lockMs = 0
  #saveMs = -1
  #holdMs = -1

  readonly #peer: Peer | undefined

  constructor (t: PostTelemetry, era: Era, sessionId: string | null, version: string | undefined, messages: Parsed[], peer?: Peer) {
    this.#peer = peer
    this.#t = t
    this.#era = era
    this.#version = version
    this.#startVersion = version
    this.#started = t.instruments.recordsOperations ? performance.now() : 0
    const ambient = context.active()
    // Most POSTs carry one message: an array of its one op, not one grown by a push.
    const only = messages.length === 1 ? messages[0] : undefined
    if (only !== undefined) {
      this.#ops = only.kind === 'request' || only.kind === 'notification' ? [this.#start(only.message, ambient, sessionId)] : []
    } else {
      this.#ops = []
      for (const m of messages) {
        if (m.kind === 'request' || m.kind === 'notification') this.#ops.push(this.#start(m.message, ambient, sessionId))
      }
    }
    const first = this.#ops[0]?.ctx ?? null
    this.context = first ?? (this.#recording && t.countsRoundTrips ? ambient.setValue(ROUND_TRIPS, this.#trips) : null)
  }

  #start (msg: { method: string, id?: unknown, params?: Record<string, unknown> }, ambient: Context, sid: string | null): Op {
    const known = this.#t.known
    const method = msg.method
    const name = typeof msg.params?.name === 'string' ? msg.params.name : undefined
    const target = name === undefined
      ? undefined
      : method === 'tools/call'
        ? (known.tool(name) ? name : undefined)
        : method === 'prompts/get' ? (known.prompt(name) ? name : undefined) : undefined
    // `_meta`'s trace context is the parent; the HTTP request's (ambient) one is linked.
    const remote = contextFromMeta(ambient, msg.params?._meta)
    const ambientSpan = remote === null ? undefined : trace.getSpanContext(ambient)
    const links = ambientSpan === undefined ? undefined : [{ context: ambientSpan }]
    const knownMethod = known.method(method)
    const spanName = knownMethod ? (target === undefined ? method : `${method} ${target}`) : '_OTHER'
    const span = this.#t.tracer.startSpan(spanName, { kind: SpanKind.SERVER, links }, remote ?? ambient)
    if (!span.isRecording()) return { msg, method, known: knownMethod, target, span: null, ctx: null, outcome: undefined }
    this.#recording = true
    this.#setAttributes(span, msg, method, name, sid)
    // The counter rides along only where something counts (a Redis store): each value copies the context.
    const spanCtx = trace.setSpan(remote ?? ambient, span)
    const ctx = this.#t.countsRoundTrips ? spanCtx.setValue(ROUND_TRIPS, this.#trips) : spanCtx
    return { msg, method, known: knownMethod, target, span, ctx, outcome: undefined }
  }

  /**
   * The span's attributes, set one by one: the SDK's `setAttributes` only calls `setAttribute` for
   * each key of an object (after a for-in and a hasOwnProperty), so the object was one more
   * allocation per request. (In instructions the two are about even: the SDK's own work per
   * attribute is the cost.)
   */
  #setAttributes (span: Span, msg: { id?: unknown, params?: Record<string, unknown> }, method: string, name: string | undefined, sid: string | null): void {
    span.setAttribute(SEMCONV.method, cut(method))
    span.setAttribute(SEMCONV.transport, 'tcp')
    span.setAttribute(SEMCONV.protocolName, 'http')
    span.setAttribute(OWN.era, this.#era)
    setPeer(span, this.#peer)
    if (msg.id !== undefined && msg.id !== null) span.setAttribute(SEMCONV.requestId, cut(String(msg.id)))
    if (sid !== null) span.setAttribute(SEMCONV.session, sid)
    if (this.#version !== undefined) span.setAttribute(SEMCONV.protocolVersion, this.#version)
    if (name !== undefined && method === 'tools/call') { span.setAttribute(SEMCONV.tool, cut(name)); span.setAttribute(SEMCONV.operation, 'execute_tool') }
    if (name !== undefined && method === 'prompts/get') span.setAttribute(SEMCONV.prompt, cut(name))
    const uri = msg.params?.uri
    if (typeof uri === 'string' && method.startsWith('resources/')) span.setAttribute(SEMCONV.resourceUri, uri.length <= 2048 ? uri : uri.slice(0, 2048))
    const responses = msg.params?.inputResponses
    if (this.#era === '2026-07-28' && typeof responses === 'object' && responses !== null) span.setAttribute(OWN.inputResponses, Object.keys(responses).length)
  }

  run<T> (msg: object, fn: () => T): T {
    const ctx = this.#find(msg)?.ctx
    // The POST runs in its first request's context already: entering it again costs a context switch.
    return ctx === null || ctx === undefined || ctx === context.active() ? fn() : context.with(ctx, fn)
  }

  version (v: string): void {
    this.#version = v
  }

  opened (ms: number, locked: boolean): void {
    if (locked) this.#t.instruments.lockWait.record(ms / 1000)
    if (!this.#recording) return
    this.#openedAt = locked ? performance.now() : 0
    this.#lockKey = locked ? OWN.lockWait : OWN.load
    this.#lockMs = ms
  }

  closed (ms: number): void {
    if (!this.#recording) return
    this.#saveMs = ms
    if (this.#openedAt !== 0) this.#holdMs = performance.now() - this.#openedAt
  }

  answered (msg: object, body: unknown, status: number): void {
    const op = this.#find(msg)
    if (op === undefined) return
    op.outcome = outcomeOfResponse(body, status)
    // Checked here, not in #inputRound: the call of a method that seldom does anything was most of its cost.
    const result = (body as { result?: { resultType?: unknown, inputRequests?: unknown } } | null)?.result
    if (op.span !== null && result?.resultType === 'input_required') this.#inputRound(op.span, op.ctx, result.inputRequests)
  }

  /**
   * An `input_required` result (2026-07-28): a CLIENT span per input request, under the request's
   * span, started and ended now (the answers come with a later round, to any instance), and
   * their number on the request's span. Methods are the server's own (elicitation, sampling,
   * roots), so they are bounded span names.
   */
  #inputRound (span: Span, ctx: Context | null, requests: unknown): void {
    if (typeof requests !== 'object' || requests === null) return
    let n = 0
    for (const [key, request] of Object.entries(requests as Record<string, { method?: unknown } | null>)) {
      n++
      const method = typeof request?.method === 'string' ? cut(request.method) : '_OTHER'
      const child = this.#t.tracer.startSpan(method, { kind: SpanKind.CLIENT }, ctx ?? undefined)
      if (!child.isRecording()) continue
      const a: Attributes = {
        [SEMCONV.method]: method,
        [SEMCONV.transport]: 'tcp',
        [SEMCONV.protocolName]: 'http',
        [OWN.era]: this.#era,
        [OWN.inputKey]: cut(key)
      }
      if (this.#version !== undefined) a[SEMCONV.protocolVersion] = this.#version
      child.setAttributes(a)
      child.end()
    }
    span.setAttribute(OWN.inputRequests, n)
  }

  failed (err: unknown, all = false): void {
    let outcome: Outcome | undefined
    for (const op of this.#ops) {
      if (op.outcome === undefined || (all && op.outcome === null)) op.outcome = outcome ??= outcomeOfError(err)
    }
  }

  end (): void {
    const { operation, refusals, recordsOperations } = this.#t.instruments
    const seconds = recordsOperations ? (performance.now() - this.#started) / 1000 : 0
    for (const op of this.#ops) {
      const outcome = op.outcome ?? null
      if (recordsOperations) operation.record(seconds, this.#metricAttributes(op, outcome))
      if (outcome?.reason !== undefined) refusals.add(1, { [SEMCONV.httpStatus]: outcome.status, [OWN.reason]: outcome.reason })
      if (op.span !== null) this.#endSpan(op.span, outcome)
    }
  }

  #endSpan (span: Span, outcome: Outcome | null): void {
    if (this.#version !== this.#startVersion && this.#version !== undefined) span.setAttribute(SEMCONV.protocolVersion, this.#version)
    if (this.#lockKey !== undefined) span.setAttribute(this.#lockKey, this.#lockMs)
    if (this.#saveMs >= 0) span.setAttribute(OWN.save, this.#saveMs)
    if (this.#holdMs >= 0) span.setAttribute(OWN.lockHold, this.#holdMs)
    if (this.#trips.n > 0) span.setAttribute(OWN.roundTrips, this.#trips.n)
    if (outcome !== null) markError(span, outcome)
    span.end()
  }

  #metricAttributes (op: Op, outcome: Outcome | null): Attributes {
    const method = op.known ? op.method : '_OTHER'
    const version = this.#version
    // Written out (`satisfies` checks the names against SEMCONV): a literal is copied from one
    // boilerplate, where computed keys cost a store each.
    const a: Attributes = version === undefined
      ? { 'mcp.method.name': method, 'network.transport': 'tcp', 'network.protocol.name': 'http' } satisfies SemconvAttributes
      : { 'mcp.method.name': method, 'network.transport': 'tcp', 'network.protocol.name': 'http', 'mcp.protocol.version': version } satisfies SemconvAttributes
    if (op.target !== undefined) a[op.method === 'tools/call' ? SEMCONV.tool : SEMCONV.prompt] = op.target
    if (outcome !== null) {
      a[SEMCONV.errorType] = outcome.errorType
      if (outcome.code !== undefined) a[SEMCONV.rpcStatus] = String(outcome.code)
    }
    return a
  }

  #find (msg: object): Op | undefined {
    for (const op of this.#ops) if (op.msg === msg) return op
    return undefined
  }
}
