/**
 * Counting the backend round trips of a request's state scope without handing a counter through
 * the state layer: the request's trace context carries the counter, and the Redis code calls
 * {@link roundTrip} once per command or script. Without an SDK's context manager (or when the
 * request's span is not recorded) nothing carries it, and the call is one map lookup.
 */
import { context, createContextKey } from '@opentelemetry/api'

/** The context key of a request's round-trip counter. */
export const ROUND_TRIPS = createContextKey('fastify-mcp-http round trips')

/** A counter carried in a context. */
export interface RoundTrips { n: number }

/** Counts one backend round trip for the active request (if it is traced). */
export function roundTrip (): void {
  const counter = context.active().getValue(ROUND_TRIPS) as RoundTrips | undefined
  if (counter !== undefined) counter.n++
}
