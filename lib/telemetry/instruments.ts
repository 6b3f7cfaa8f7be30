/**
 * The plugin's metrics, made once per plugin instance on the app's meter (a no-op meter until the
 * app registers an SDK). Durations are histograms in seconds (the conventions' unit); what the
 * instance holds right now (sessions, lock waiters, streams, pending client requests, event-log
 * streams) are observable gauges read from the engine's status when the SDK collects, so they cost
 * nothing per request.
 */
import { createNoopMeter, type Attributes, type BatchObservableResult, type Counter, type Histogram, type Meter, type Observable } from '@opentelemetry/api'
import { DURATION_BUCKETS, METRICS, OWN } from './attributes.js'

/** What the gauges read (the engine's status). */
export interface GaugeSource {
  sessionsHeld: number
  /** Requests queued for a lock, by subject: a session's or a state handle's (the state engine's count). */
  lockWaiting: Readonly<Record<'session' | 'handle', number>>
  getStreams: number
  listenStreams: number
  pendingClientRequests: number
  /** Streams the event log keeps, when it can tell cheaply (the in-process one); else undefined. */
  eventLogStreams?: number
}

const KIND_GET: Attributes = { [OWN.streamKind]: 'get' }
const KIND_LISTEN: Attributes = { [OWN.streamKind]: 'listen' }
const LOCK_SESSION: Attributes = { [OWN.lockKind]: 'session' }
const LOCK_HANDLE: Attributes = { [OWN.lockKind]: 'handle' }

/**
 * The histogram of the API's no-op meter (one shared instance): what a meter taken while no SDK
 * was registered makes, for good (the API has no proxy meter that an SDK registered later would
 * fill in).
 */
const NOOP_HISTOGRAM = createNoopMeter().createHistogram('noop')

/** @internal The instruments (see the module doc). */
export class Instruments {
  readonly operation: Histogram
  readonly session: Histogram
  readonly lockWait: Histogram
  readonly refusals: Counter
  readonly idempotency: Counter
  /**
   * Whether `operation` records anything: `false` on the API's no-op meter, whose records are
   * dropped, so that a POST need not read the clock twice and build attributes for them.
   */
  readonly recordsOperations: boolean
  readonly #meter: Meter
  readonly #gauges: Observable[]
  #callback: ((r: BatchObservableResult) => void) | null = null

  constructor (meter: Meter) {
    this.#meter = meter
    const advice = { explicitBucketBoundaries: DURATION_BUCKETS }
    this.operation = meter.createHistogram(METRICS.operation, {
      unit: 's', description: 'MCP request or notification duration as observed on the receiver from the time it was received until the result or ack is sent.', advice
    })
    this.recordsOperations = this.operation !== NOOP_HISTOGRAM
    this.session = meter.createHistogram(METRICS.session, { unit: 's', description: 'The duration of the MCP session as observed on the MCP server.', advice })
    this.lockWait = meter.createHistogram(METRICS.lockWait, { unit: 's', description: 'Time a request waited for its session\'s lock (the read of the session included).', advice })
    this.refusals = meter.createCounter(METRICS.refusals, { unit: '{request}', description: 'Requests refused with HTTP 429 or 503, by status and reason.' })
    this.idempotency = meter.createCounter(METRICS.idempotency, {
      unit: '{call}', description: 'Tool calls with an idempotency key (or absorbed by dedupe), by outcome: recorded, replay, conflict, in_flight.'
    })
    this.#gauges = [
      meter.createObservableGauge(METRICS.sessionsHeld, { unit: '{session}', description: 'Sessions this instance holds something of (a request, a waiting handler, a stream).' }),
      meter.createObservableGauge(METRICS.lockWaiters, {
        unit: '{request}',
        description: 'Requests of this instance waiting for a lock, by fastify_mcp.lock.kind: a session\'s or a state handle\'s.'
      }),
      meter.createObservableGauge(METRICS.streams, { unit: '{stream}', description: 'GET and listen streams open on this instance.' }),
      meter.createObservableGauge(METRICS.pending, { unit: '{request}', description: 'Requests to clients (elicitation, sampling, roots) this instance waits on.' }),
      meter.createObservableGauge(METRICS.eventLog, {
        unit: '{stream}',
        description: 'Resumable streams the event log keeps (the Redis one: the streams this instance wrote that are still within their TTL).'
      })
    ]
  }

  /** Reads the gauges from `source` at each collection, until {@link stop}. */
  observe (source: () => GaugeSource): void {
    const [held, waiters, streams, pending, log] = this.#gauges
    this.#callback = (r) => {
      const s = source()
      r.observe(held, s.sessionsHeld)
      r.observe(waiters, s.lockWaiting.session, LOCK_SESSION)
      r.observe(waiters, s.lockWaiting.handle, LOCK_HANDLE)
      r.observe(streams, s.getStreams, KIND_GET)
      r.observe(streams, s.listenStreams, KIND_LISTEN)
      r.observe(pending, s.pendingClientRequests)
      if (s.eventLogStreams !== undefined) r.observe(log, s.eventLogStreams)
    }
    this.#meter.addBatchObservableCallback(this.#callback, this.#gauges)
  }

  /** Stops reading the gauges (server shutdown). */
  stop (): void {
    if (this.#callback !== null) this.#meter.removeBatchObservableCallback(this.#callback, this.#gauges)
    this.#callback = null
  }
}
