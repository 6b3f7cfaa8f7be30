/**
 * OpenTelemetry SDK parts for tests: a tracer provider whose spans land in an in-memory exporter,
 * a meter provider read on demand, and the async-hooks context manager (what an app's SDK
 * registers, and what carries a request's span into its handler). Hand the providers to the
 * plugin through its `telemetry` option: nothing global but the context manager is touched.
 */
import { context, metrics, trace } from '@opentelemetry/api'
import { Type } from '@sinclair/typebox'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { AggregationTemporality, MeterProvider, MetricReader, type DataPoint, type Histogram, type MetricData } from '@opentelemetry/sdk-metrics'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base'
import type { McpDecorator, ToolDefinition } from '../../lib/index.js'

let contextManager: AsyncLocalStorageContextManager | null = null

/** Registers the async-hooks context manager once per process. */
export function useContextManager (): void {
  if (contextManager !== null) return
  contextManager = new AsyncLocalStorageContextManager().enable()
  context.setGlobalContextManager(contextManager)
}

/** A metric reader collected by the test. */
class TestReader extends MetricReader {
  constructor () { super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE }) }
  protected async onShutdown (): Promise<void> {}
  protected async onForceFlush (): Promise<void> {}
}

/** What a test reads spans and metrics from. */
export interface Otel {
  tracerProvider: BasicTracerProvider
  meterProvider: MeterProvider
  exporter: InMemorySpanExporter
  /** Finished spans so far. */
  spans (): ReadableSpan[]
  /** Finished spans named `name`. */
  named (name: string): ReadableSpan[]
  /** The metric `name` as collected now (undefined when it has no data). */
  metric (name: string): Promise<MetricData | undefined>
  /** The data points of metric `name`, now. */
  points (name: string): Promise<Array<DataPoint<number | Histogram>>>
}

/** Providers for one test (shut down at its end). */
export function otel (t: { teardown (fn: () => unknown): void }): Otel {
  useContextManager()
  const exporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  const reader = new TestReader()
  const meterProvider = new MeterProvider({ readers: [reader] })
  t.teardown(async () => { await tracerProvider.shutdown(); await meterProvider.shutdown() })
  const metric = async (name: string): Promise<MetricData | undefined> => {
    const { resourceMetrics } = await reader.collect()
    for (const scope of resourceMetrics.scopeMetrics) {
      for (const m of scope.metrics) if (m.descriptor.name === name) return m
    }
    return undefined
  }
  return {
    tracerProvider,
    meterProvider,
    exporter,
    spans: () => exporter.getFinishedSpans(),
    named: (name) => exporter.getFinishedSpans().filter(s => s.name === name),
    metric,
    points: async (name) => (await metric(name))?.dataPoints as Array<DataPoint<number | Histogram>> ?? []
  }
}

/** The attributes of a span, as a plain object (for `t.match`). */
export const attrs = (span: ReadableSpan): Record<string, unknown> => ({ ...span.attributes })

/** A tool that holds what it runs under (the session's lock, a handle's) until the test lets it go. */
export interface Holder {
  /** Resolves once the tool's handler runs (it holds the lock from then on). */
  running: Promise<void>
  /** Lets the handler answer `done`. */
  release (): void
  /** Registers the tool (`name`, default `hold`, no input unless `more` says otherwise) on the plugin. */
  register (m: McpDecorator, name?: string, more?: Partial<ToolDefinition<any, any>>): void
}

/** A {@link Holder} whose handler runs once (a second call would not wait). */
export function holdingTool (): Holder {
  let release!: () => void
  const held = new Promise<void>(resolve => { release = resolve })
  let started!: () => void
  const running = new Promise<void>(resolve => { started = resolve })
  return {
    running,
    release,
    register (m, name = 'hold', more = {}) {
      m.tool({ name, description: 'Holds the session', input: Type.Object({}), ...more }, async () => { started(); await held; return 'done' })
    }
  }
}

/**
 * Registers `o`'s providers as the global ones for the test (what an app's SDK does), so that a
 * plugin built without the `telemetry` option's providers, or with `telemetry: false`, would
 * reach them: the way to show that `false` emits nothing.
 */
export function useGlobally (t: { teardown (fn: () => unknown): void }, o: Otel): void {
  trace.setGlobalTracerProvider(o.tracerProvider)
  metrics.setGlobalMeterProvider(o.meterProvider)
  t.teardown(() => { trace.disable(); metrics.disable() })
}
