/**
 * A handshake-era request's way to its session: the `Mcp-Session-Id` header (400 when missing or
 * malformed; 404 for a key of other state), who may use a session (its principal), a read of it
 * for GET and DELETE, and the 503 a client gets when the bus cannot serve it. Opening a session
 * for a POST is the state engine's (`state/engine.ts`); its refusals are answered by
 * `../refusals.ts`.
 */
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { McpPrincipal } from '../../context.js'
import { ErrorCode, McpError, echoed } from '../../jsonrpc/errors.js'
import { K } from '../../sessions/session-handle.js'
import { isValidSessionId } from '../../sessions/session-id.js'
import type { StateEngine } from '../../state/engine.js'
import type { StateScope } from '../../state/state-scope.js'
import { StateRefusedError } from '../../state/unit-of-work.js'
import { OutageLog } from '../../util/outage-log.js'
import { shownId } from '../../util/shown-id.js'
import { backendRetry, refusalAnswer } from '../refusals.js'
import { RequestAbort } from '../request-abort.js'
import { isHandshakeVersion } from '../versions.js'

/** The refusals of a session's requests that are not the state engine's, by what happened. */
export const refuse = {
  /** 400: a request that is not `initialize` names no session. */
  noSessionId: () => new McpError(ErrorCode.InvalidRequest, 'Bad Request: Mcp-Session-Id header is required', undefined, 400),
  malformedSessionId: () => new McpError(ErrorCode.InvalidRequest, 'Bad Request: malformed Mcp-Session-Id header', undefined, 400),
  /** 404: unknown, expired, ended, or another principal's (never tell others it exists). */
  notFound: () => new McpError(ErrorCode.SessionNotFound, 'Session not found', undefined, 404),
  busDown: () => new McpError(ErrorCode.ServerError, 'Message bus is unavailable.', undefined, 503, backendRetry()),
  /** 429: what one session may hold open on this instance is bounded. */
  tooManyStreams: () => new McpError(ErrorCode.ServerError, 'Too many requests and streams open for this session; retry later', undefined, 429)
}

/** The session id the request names (visible ASCII, bounded: checked before any store sees it). */
export function sessionIdOf (request: FastifyRequest): string {
  const sid = request.headers['mcp-session-id']
  if (sid === undefined) throw refuse.noSessionId()
  if (!isValidSessionId(sid)) throw refuse.malformedSessionId()
  // Keys that start with "~" name other state (handles, tasks) in the same store: never a session.
  if (sid.startsWith('~')) throw refuse.notFound()
  return sid
}

/** 400 for an `MCP-Protocol-Version` header that names no handshake-era revision. */
export function checkVersionHeader (request: FastifyRequest): void {
  const v = request.headers['mcp-protocol-version']
  if (v !== undefined && !isHandshakeVersion(v)) {
    throw new McpError(ErrorCode.InvalidRequest, `Bad Request: unsupported MCP-Protocol-Version ${JSON.stringify(echoed(String(v)))}`, undefined, 400)
  }
}

/** Whether a session may serve `principal`: the one that created it (anonymous: anonymous only). */
export function ownedBy (principal: McpPrincipal | null): (scope: StateScope) => boolean {
  const id = principal?.id ?? null
  return (scope) => (scope.handle.getProtocol<string | null>(K.principal) ?? null) === id
}

/**
 * Reads the session without its lock (GET, DELETE): 404 when it does not exist or belongs to
 * another principal, 503 when the store cannot serve it.
 */
export async function readSession (state: StateEngine, request: FastifyRequest, sid: string, principal: McpPrincipal | null): Promise<StateScope> {
  const unit = state.unit({ owner: request, abort: new RequestAbort(), log: request.log })
  let scope
  try {
    scope = await unit.open({ subject: 'session', key: sid, mode: 'read', admit: ownedBy(principal) })
  } catch (err) {
    if (err instanceof StateRefusedError) throw refusalAnswer(err.refusal, 'session', err.cause)
    throw err
  }
  if (scope === null) throw refuse.notFound()
  request.mcpSession = scope.handle
  return scope
}

/** Maps a store failure outside a scope (an event log read) to its 503, and logs it. */
export function storeFailure (err: unknown, state: StateEngine, log: FastifyBaseLogger, sid: string): McpError {
  const refused = state.refused('session', sid, err, log)
  return refusalAnswer(refused.refusal, 'session', err)
}

/** The outage log of the bus (one per hub: per plugin instance). */
const BUS_OUTAGES = new WeakMap<object, OutageLog>()

function busOutages (bus: object): OutageLog {
  let log = BUS_OUTAGES.get(bus)
  if (log === undefined) { log = new OutageLog(); BUS_OUTAGES.set(bus, log) }
  return log
}

/**
 * Maps a bus failure to its 503 (a bus down is never a 500) and logs it in the bus's outage log
 * (`bus`: the hub), so that a client retrying during an outage makes a handful of lines.
 */
export function busDown (err: unknown, log: FastifyBaseLogger, sid: string, bus: object): McpError {
  busOutages(bus).failed('message bus', err, log, { sessionId: shownId(sid) })
  return refuse.busDown()
}

/** A bus operation went through: an outage of the bus logged before ends with one line. */
export function busUp (log: FastifyBaseLogger, bus: object): void {
  busOutages(bus).ok(log)
}
