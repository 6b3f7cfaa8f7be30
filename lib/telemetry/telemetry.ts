/**
 * The plugin's telemetry: one tracer and one meter per plugin instance, taken once from the
 * providers the app registered (`@opentelemetry/api`'s globals, or those given in the `telemetry`
 * option), and what the wires call: {@link Telemetry.post} per POST, {@link Telemetry.stream} per GET and DELETE, {@link Telemetry.clientRequest}
 * per request to a client, {@link Telemetry.answer} per client answer, {@link Telemetry.sessionEnded}.
 * With `telemetry: false` every call returns a shared object that does nothing.
 */
import { createHash } from 'node:crypto'
import { ProxyTracerProvider, metrics, trace, type MeterProvider, type Tracer, type TracerProvider } from '@opentelemetry/api'
import type { Parsed } from '../jsonrpc/messages.js'
import { OWN, SEMCONV } from './attributes.js'
import { LiveAnswer, NO_ANSWER, NO_CLIENT_REQUEST, startClientRequest, type AnswerTrace, type ClientRequestTrace } from './client-trace.js'
import { Instruments, type GaugeSource } from './instruments.js'
import { LivePost, NO_POST, type Era, type KnownNames, type Peer, type PostTrace } from './post-trace.js'
import { traceStream, type StreamMethod } from './stream-trace.js'

export type { KnownNames } from './post-trace.js'

const SCOPE = 'fastify-mcp-http'

/** What the API's global tracer provider delegates to while no SDK is registered (one shared no-op provider). */
const NO_SDK = new ProxyTracerProvider().getDelegate()

/**
 * Whether no SDK is registered as the global tracer provider now. The global is a proxy whose
 * delegate an SDK sets (and `trace.disable()` drops), so this is asked per POST: an SDK may be
 * registered after the plugin. An API copy other than ours answers `false` (its no-op provider is
 * another object), and then spans are started as with an SDK.
 */
function noGlobalTracer (): boolean {
  const provider = trace.getTracerProvider()
  return provider instanceof ProxyTracerProvider && provider.getDelegate() === NO_SDK
}

/** The `telemetry` option's object form. */
export interface TelemetryOptions {
  /** Where spans go. Default: the global provider (`trace.setGlobalTracerProvider`, what an SDK registers). */
  tracerProvider?: TracerProvider
  /** Where metrics go. Default: the global provider (`metrics.setGlobalMeterProvider`). */
  meterProvider?: MeterProvider
  /**
   * What `mcp.session.id` carries. A session id is a bearer secret when no authentication is
   * configured, and trace backends are read by more people than the server's secrets:
   * `'hashed'` (default) a SHA-256 of it (22 base64url characters: the spans of one session still
   * group together), `'raw'` the id itself, `'omitted'` no attribute.
   */
  sessionId?: SessionIdAttribute
}

/** See {@link TelemetryOptions.sessionId}. */
export type SessionIdAttribute = 'hashed' | 'raw' | 'omitted'

/**
 * What became of a keyed tool call: run and `recorded`, answered by a `replay`, refused as a key
 * reused with other arguments (`conflict`) or as a copy of a call still running (`in_flight`).
 */
export type KeyedOutcome = 'recorded' | 'replay' | 'conflict' | 'in_flight'

/** The `telemetry` option: `false` turns spans and metrics off; `true` (default) or an object on. */
export type TelemetryOption = boolean | TelemetryOptions

/** The resolved option. */
export interface ResolvedTelemetry {
  enabled: boolean
  tracerProvider: TracerProvider | undefined
  meterProvider: MeterProvider | undefined
  sessionId: SessionIdAttribute
}

const TELEMETRY_KEYS: readonly string[] = ['tracerProvider', 'meterProvider', 'sessionId']

/** Validates the `telemetry` option. */
export function resolveTelemetry (option: unknown, fail: (name: string, why: string) => never): ResolvedTelemetry {
  if (option === undefined || option === true) return { enabled: true, tracerProvider: undefined, meterProvider: undefined, sessionId: 'hashed' }
  if (option === false) return { enabled: false, tracerProvider: undefined, meterProvider: undefined, sessionId: 'hashed' }
  if (typeof option !== 'object' || option === null) fail('telemetry', 'must be a boolean or { tracerProvider?, meterProvider?, sessionId? }')
  const o = option as TelemetryOptions
  for (const k of Object.keys(o)) {
    if (!TELEMETRY_KEYS.includes(k)) fail(`telemetry.${k.slice(0, 64)}`, `unknown option (misspelt?); known: ${TELEMETRY_KEYS.join(', ')}`)
  }
  if (o.tracerProvider !== undefined && typeof o.tracerProvider?.getTracer !== 'function') fail('telemetry.tracerProvider', 'must be an OpenTelemetry TracerProvider')
  if (o.meterProvider !== undefined && typeof o.meterProvider?.getMeter !== 'function') fail('telemetry.meterProvider', 'must be an OpenTelemetry MeterProvider')
  const sessionId = o.sessionId ?? 'hashed'
  if (sessionId !== 'hashed' && sessionId !== 'raw' && sessionId !== 'omitted') fail('telemetry.sessionId', 'must be "hashed", "raw" or "omitted"')
  return { enabled: true, tracerProvider: o.tracerProvider, meterProvider: o.meterProvider, sessionId }
}

/** The hashed form of a session id in spans: SHA-256, 22 base64url characters (132 bits). */
export function hashSessionId (sessionId: string): string {
  return createHash('sha256').update(sessionId).digest('base64url').slice(0, 22)
}

/**
 * See the module doc. Built by the plugin from its `telemetry` option; applications do not make
 * one (it is named by the telemetry room's exports, which the package's own types import).
 */
export class Telemetry {
  readonly enabled: boolean
  readonly tracer: Tracer
  /** @internal The meters (the telemetry room's own). */
  readonly instruments: Instruments
  readonly known: KnownNames
  /** Whether the session backend reports Redis round trips (`roundTrip()`), so spans carry a counter. */
  readonly countsRoundTrips: boolean
  /**
   * Whether nothing records unless an SDK becomes the global tracer provider: the meter is the
   * API's no-op one and spans go to the global provider. A POST then gets {@link NO_POST} while
   * {@link noGlobalTracer}: its spans would not record (the no-op tracer's never do), so the
   * `LivePost` would compute outcomes and attributes nothing reads, on every POST.
   */
  readonly #quietWithoutSdk: boolean
  readonly #sessionId: SessionIdAttribute

  constructor (options: ResolvedTelemetry, version: string, known: KnownNames, countsRoundTrips = true) {
    this.enabled = options.enabled
    this.#sessionId = options.sessionId ?? 'hashed'
    this.known = known
    this.countsRoundTrips = countsRoundTrips
    this.tracer = (options.tracerProvider ?? trace).getTracer(SCOPE, version)
    this.instruments = new Instruments((options.meterProvider ?? metrics).getMeter(SCOPE, version))
    this.#quietWithoutSdk = !this.instruments.recordsOperations && options.tracerProvider === undefined
  }

  /** Whether a POST's telemetry records nothing now: telemetry off, or nothing to record it (see `#quietWithoutSdk`). */
  silent (): boolean {
    return !this.enabled || (this.#quietWithoutSdk && noGlobalTracer())
  }

  /** The telemetry of a POST's messages (spans start now); {@link NO_POST} while {@link silent}. */
  post (era: Era, sessionId: string | null, version: string | undefined, messages: Parsed[], peer?: Peer): PostTrace {
    return this.silent() ? NO_POST : new LivePost(this, era, this.#shown(sessionId), version, messages, peer)
  }

  /**
   * Runs a handshake-era GET or DELETE (`fn`) in its span (see `stream-trace.ts`): `sessionId` the
   * checked `Mcp-Session-Id` or null, `version` the raw `Mcp-Protocol-Version` header.
   */
  async stream<T> (method: StreamMethod, sessionId: string | null, version: unknown, fn: () => Promise<T>, peer?: Peer): Promise<T> {
    return this.enabled ? await traceStream(this, method, this.#shown(sessionId), version, fn, peer) : await fn()
  }

  /** A request to the client, under the active span. */
  clientRequest (method: string, id: string, sessionId: string): ClientRequestTrace {
    return this.enabled ? startClientRequest(this.tracer, method, id, this.#shown(sessionId)) : NO_CLIENT_REQUEST
  }

  /** A client's answer arriving on this instance. */
  answer (id: unknown, sessionId: string): AnswerTrace {
    return this.enabled ? new LiveAnswer(this.tracer, id, this.#shown(sessionId)) : NO_ANSWER
  }

  /** What `mcp.session.id` carries for `sessionId` (the `sessionId` choice); null: no attribute. */
  #shown (sessionId: string | null): string | null {
    if (sessionId === null || this.#sessionId === 'omitted') return null
    return this.#sessionId === 'raw' ? sessionId : hashSessionId(sessionId)
  }

  /** A session ended by its client (DELETE) after `seconds`. */
  sessionEnded (seconds: number, version: string | undefined): void {
    if (!this.enabled) return
    this.instruments.session.record(seconds, version === undefined
      ? { [SEMCONV.transport]: 'tcp', [SEMCONV.protocolName]: 'http' }
      : { [SEMCONV.transport]: 'tcp', [SEMCONV.protocolName]: 'http', [SEMCONV.protocolVersion]: version })
  }

  /** A request refused before any MCP message ran (e.g. by the routes); counted when 429/503. */
  refused (status: number, reason: string): void {
    if (this.enabled) this.instruments.refusals.add(1, { [SEMCONV.httpStatus]: status, [OWN.reason]: reason })
  }

  /**
   * What became of a keyed tool call (see `KeyedOutcome`): counted, and set on the active span
   * (the request's, where it is traced).
   */
  keyed (outcome: KeyedOutcome): void {
    if (!this.enabled) return
    this.instruments.idempotency.add(1, { [OWN.idempotency]: outcome })
    trace.getActiveSpan()?.setAttribute(OWN.idempotency, outcome)
  }

  /** Reads the gauges from `source` (see `Instruments.observe`). */
  observe (source: () => GaugeSource): void {
    if (this.enabled) this.instruments.observe(source)
  }

  close (): void { this.instruments.stop() }
}
