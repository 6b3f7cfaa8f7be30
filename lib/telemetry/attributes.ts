/**
 * Attribute, event and instrument names. The `mcp.*`, `jsonrpc.*`, `gen_ai.*`, `error.type`,
 * `rpc.*` and `network.*` names are the OpenTelemetry semantic conventions for MCP (server side);
 * what only this plugin measures is under `fastify_mcp.*`, so it can never collide with a name the
 * conventions add later.
 */

/** Semantic-convention attributes of an MCP server span and of `mcp.server.*` metrics. */
export const SEMCONV = {
  method: 'mcp.method.name',
  session: 'mcp.session.id',
  protocolVersion: 'mcp.protocol.version',
  resourceUri: 'mcp.resource.uri',
  requestId: 'jsonrpc.request.id',
  tool: 'gen_ai.tool.name',
  prompt: 'gen_ai.prompt.name',
  operation: 'gen_ai.operation.name',
  errorType: 'error.type',
  rpcStatus: 'rpc.response.status_code',
  transport: 'network.transport',
  protocolName: 'network.protocol.name',
  /** The HTTP version (`1.1`, `2`). */
  networkProtocolVersion: 'network.protocol.version',
  /** The peer's address and port (the app's `trustProxy` decides which address). */
  clientAddress: 'client.address',
  clientPort: 'client.port',
  httpStatus: 'http.response.status_code'
} as const

/** This plugin's own attributes (durations in milliseconds, as the log's `mcpLockWaitMs`). */
export const OWN = {
  /** Waiting for the session's lock, the read of the session included (one script on the Redis fast path). */
  lockWait: 'fastify_mcp.lock.wait_ms',
  /** From the lock taken to the session saved and the lock released. */
  lockHold: 'fastify_mcp.lock.hold_ms',
  /** Reading the session without the lock (requests that only read, answers, notifications). */
  load: 'fastify_mcp.store.load_ms',
  /** Writing back what the request changed, and releasing the lock (one script on the Redis fast path). */
  save: 'fastify_mcp.store.save_ms',
  /** Redis commands or scripts the request's state scope sent (each a round trip). */
  roundTrips: 'fastify_mcp.redis.round_trips',
  /** Instances a client's answer crossed to reach the waiting handler: 0 same instance, 1 through the bus. */
  hops: 'fastify_mcp.answer.hops',
  /** Why a request was refused with 429 or 503. */
  reason: 'fastify_mcp.refusal.reason',
  /** What became of a keyed tool call: `recorded`, `replay`, `conflict`, `in_flight`. */
  idempotency: 'fastify_mcp.idempotency.outcome',
  /** Which wire: `2025` (handshake era, sessions) or `2026-07-28` (stateless). */
  era: 'fastify_mcp.era',
  /** The kind of an open stream (gauge). */
  streamKind: 'fastify_mcp.stream.kind',
  /** What a lock waiter waits for (gauge): `session` or `handle`. */
  lockKind: 'fastify_mcp.lock.kind',
  /** 2026-07-28 wire: input requests an `input_required` result asks the client (on the request's span). */
  inputRequests: 'fastify_mcp.input.requests',
  /** 2026-07-28 wire: answers to input requests a request carries in `inputResponses` (a later round). */
  inputResponses: 'fastify_mcp.input.responses',
  /** 2026-07-28 wire: the key of one input request (on its CLIENT span). */
  inputKey: 'fastify_mcp.input.key'
} as const

/** Span events (the measures of the state scope are attributes: cheaper, and what backends aggregate on). */
export const EVENTS = {
  /** A client's answer reached the handler waiting for it (on the `elicitation/create`, … CLIENT span). */
  answer: 'fastify_mcp.answer.received'
} as const

/** Histogram buckets of the conventions' `mcp.*.duration` metrics (seconds). */
export const DURATION_BUCKETS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300]

/** Instrument names. */
export const METRICS = {
  operation: 'mcp.server.operation.duration',
  session: 'mcp.server.session.duration',
  lockWait: 'fastify_mcp.lock.wait.duration',
  refusals: 'fastify_mcp.refusals',
  sessionsHeld: 'fastify_mcp.sessions.held',
  lockWaiters: 'fastify_mcp.lock.waiters',
  streams: 'fastify_mcp.streams.open',
  pending: 'fastify_mcp.client_requests.pending',
  eventLog: 'fastify_mcp.event_log.streams',
  idempotency: 'fastify_mcp.idempotency.calls'
} as const

/** Client-chosen strings (tool names, request ids) are cut to this many characters in attributes. */
export const MAX_ATTRIBUTE = 256

/** The longest `MCP-Protocol-Version` taken as an attribute (versions are dates; a longer one is not a version). */
export const MAX_VERSION = 32
