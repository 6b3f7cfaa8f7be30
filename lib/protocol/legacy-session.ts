/**
 * A handshake-era request's way to its session: the `Mcp-Session-Id` header (400 when missing or
 * malformed), the session's state scope (404 when unknown, ended, or another principal's), and
 * the 503 a client gets when the store, the lock or the bus cannot serve it. The refusals are
 * `McpError`s with the HTTP status the specification gives; the routes answer them.
 */
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { McpPrincipal } from '../context.js'
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import { SessionLockError, SessionLockTimeoutError } from '../locks/errors.js'
import { K } from '../sessions/session-handle.js'
import { isValidSessionId } from '../sessions/session-id.js'
import type { CloseResult, StateBackend, StateScope } from '../state/state-scope.js'
import { isLegacyVersion } from './versions.js'

/** The refusals of this module (and the wire), by what happened. */
export const refuse = {
  /** 400: a request that is not `initialize` names no session. */
  noSessionId: () => new McpError(ErrorCode.InvalidRequest, 'Bad Request: Mcp-Session-Id header is required', undefined, 400),
  malformedSessionId: () => new McpError(ErrorCode.InvalidRequest, 'Bad Request: malformed Mcp-Session-Id header', undefined, 400),
  /** 404: unknown, expired, ended, or another principal's (never tell others it exists). */
  notFound: () => new McpError(ErrorCode.SessionNotFound, 'Session not found', undefined, 404),
  busy: () => new McpError(ErrorCode.ServerError, 'Another request of this session is still being processed.', undefined, 503),
  lockDown: () => new McpError(ErrorCode.ServerError, 'Session lock is unavailable.', undefined, 503),
  storeDown: () => new McpError(ErrorCode.ServerError, 'Session store is unavailable.', undefined, 503),
  busDown: () => new McpError(ErrorCode.ServerError, 'Message bus is unavailable.', undefined, 503),
  /** 429: what one session may hold open on this instance is bounded. */
  tooManyStreams: () => new McpError(ErrorCode.ServerError, 'Too many requests and streams open for this session; retry later', undefined, 429)
}

/** The session id the request names (visible ASCII, bounded: checked before any store sees it). */
export function sessionIdOf (request: FastifyRequest): string {
  const sid = request.headers['mcp-session-id']
  if (sid === undefined) throw refuse.noSessionId()
  if (!isValidSessionId(sid)) throw refuse.malformedSessionId()
  return sid
}

/** 400 for an `MCP-Protocol-Version` header that names no handshake-era revision. */
export function checkVersionHeader (request: FastifyRequest): void {
  const v = request.headers['mcp-protocol-version']
  if (v !== undefined && !isLegacyVersion(v)) {
    throw new McpError(ErrorCode.InvalidRequest, `Bad Request: unsupported MCP-Protocol-Version ${JSON.stringify(v)}`, undefined, 400)
  }
}

/** Maps a store or lock failure to the 503 the client should retry after (never a 404), and logs it. */
export function unavailable (err: unknown, log: FastifyBaseLogger, sid: string): McpError {
  if (err instanceof McpError) return err
  if (err instanceof SessionLockTimeoutError) {
    log.warn({ sessionId: sid }, 'session busy: lock wait timed out')
    return refuse.busy()
  }
  if (err instanceof SessionLockError) {
    log.error({ err, sessionId: sid }, 'session lock unavailable')
    return refuse.lockDown()
  }
  log.error({ err, sessionId: sid }, 'session store unavailable')
  return refuse.storeDown()
}

/** Logs a bus failure and maps it to its 503 (a bus down is never a 500). */
export function busDown (err: unknown, log: FastifyBaseLogger, sid: string): McpError {
  log.error({ err, sessionId: sid }, 'message bus unavailable')
  return refuse.busDown()
}

/**
 * Opens the session's scope for this request, taking the lock first when `lock` is set (and one
 * is configured). 404 for a session that does not exist or belongs to another principal; 503 when
 * the backend cannot serve it.
 */
export async function openSession (sessions: StateBackend, request: FastifyRequest, sid: string,
  principal: McpPrincipal | null, lock: boolean): Promise<StateScope> {
  let scope: StateScope | null
  try {
    scope = await sessions.open(sid, { lock, owner: request })
  } catch (err) {
    throw unavailable(err, request.log, sid)
  }
  if (scope === null) throw refuse.notFound()
  const owner = scope.handle.getProtocol<string | null>(K.principal) ?? null
  if (owner !== (principal?.id ?? null)) {
    await scope.close()
    throw refuse.notFound()
  }
  request.mcpSession = scope.handle
  return scope
}

/** Logs what a close that did not write means (the caller decides what the client is told). */
export function reportClose (closed: CloseResult, log: FastifyBaseLogger, sid: string): void {
  switch (closed.status) {
    case 'gone': log.warn({ sessionId: sid, result: 'gone' }, 'session ended meanwhile; changes dropped'); return
    case 'fenced': log.warn({ sessionId: sid, result: 'fenced' }, 'session lock lost and the session changed meanwhile; changes dropped'); return
    case 'failed': log.error({ err: closed.error, sessionId: sid }, 'session save failed')
  }
}
