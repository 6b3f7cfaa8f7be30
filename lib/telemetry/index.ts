/** The telemetry room's contract (see `telemetry.ts`). */
export { Telemetry, resolveTelemetry, type TelemetryOption, type TelemetryOptions, type ResolvedTelemetry, type KnownNames, type SessionIdAttribute, hashSessionId } from './telemetry.js'
export { NO_POST, type PostTrace, type Era, type Peer } from './post-trace.js'
export { NO_CLIENT_REQUEST, NO_ANSWER, type ClientRequestTrace, type AnswerTrace } from './client-trace.js'
export { roundTrip } from './round-trips.js'
export { MAX_VERSION } from './attributes.js'
export type { GaugeSource } from './instruments.js'
