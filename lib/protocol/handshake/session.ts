/**
 * A handshake-era request's way to its session: the `Mcp-Session-Id` header (400 when missing or
 * malformed), the session's state scope (404 when unknown, ended, or another principal's), and
 * the 503 a client gets when the store, the lock or the bus cannot serve it. The refusals are
 * `McpError`s with the HTTP status the specification gives; the routes answer them.
 */
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { McpPrincipal } from '../../context.js'
import { ErrorCode, McpError, echoed } from '../../jsonrpc/errors.js'
import { K } from '../../sessions/session-handle.js'
import { isValidSessionId } from '../../sessions/session-id.js'
import type { CloseResult, StateBackend, StateScope } from '../../state/state-scope.js'
import { LeaseLostError } from '../../state/outcome.js'
import { backendRetry, openFailure, outagesOf } from '../open-failure.js'
import { unkeptOf, type UnkeptAnswer } from '../unkept-answers.js'
import type { RequestAbort } from '../request-abort.js'
import { isHandshakeVersion } from '../versions.js'
import { shownId } from '../../util/shown-id.js'

/** The refusals of this module (and the wire), by what happened. */
export const refuse = {
  /** 400: a request that is not `initialize` names no session. */
  noSessionId: () => new McpError(ErrorCode.InvalidRequest, 'Bad Request: Mcp-Session-Id header is required', undefined, 400),
  malformedSessionId: () => new McpError(ErrorCode.InvalidRequest, 'Bad Request: malformed Mcp-Session-Id header', undefined, 400),
  /** 404: unknown, expired, ended, or another principal's (never tell others it exists). */
  notFound: () => new McpError(ErrorCode.SessionNotFound, 'Session not found', undefined, 404),
  busy: () => new McpError(ErrorCode.ServerError, 'Another request of this session is still being processed.', undefined, 503),
  lockDown: () => new McpError(ErrorCode.ServerError, 'Session lock is unavailable.', undefined, 503, backendRetry()),
  storeDown: () => new McpError(ErrorCode.ServerError, 'Session store is unavailable.', undefined, 503, backendRetry()),
  /** 503: the stored session cannot be decoded; it can be served again once repaired or expired. */
  unreadable: () => new McpError(ErrorCode.ServerError, 'Session data cannot be read.', undefined, 503),
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

/** Maps a store or lock failure to the 503 the client should retry after (never a 404), and logs it. */
export function unavailable (err: unknown, log: FastifyBaseLogger, sid: string, sessions: StateBackend): McpError {
  return openFailure(err, log, refuse, 'session', { sessionId: shownId(sid) }, outagesOf(sessions))
}

/**
 * Maps a bus failure to its 503 (a bus down is never a 500) and logs it in the bus's outage log
 * (`bus`: the hub), so that a client retrying during an outage makes a handful of lines.
 */
export function busDown (err: unknown, log: FastifyBaseLogger, sid: string, bus: object): McpError {
  outagesOf(bus).failed('message bus', err, log, { sessionId: shownId(sid) })
  return refuse.busDown()
}

/** A bus operation went through: an outage of the bus logged before ends with one line. */
export function busUp (log: FastifyBaseLogger, bus: object): void {
  outagesOf(bus).ok(log)
}

/**
 * @internal Opens the session's scope for this request, taking the lock first when `lock` is set
 * (and one is configured). 404 for a session that does not exist or belongs to another principal;
 * 503 when the backend cannot serve it. With `abort`, a client that leaves while the request waits
 * for the lock gives up its place in the queue at once: resolves `null` then (nobody is left to
 * answer).
 *
 * Returns the scope itself, no promise, when the backend opened it without a wait (the memory
 * store, see `StateBackend.openNow`) and it is admitted as it is: most requests of such a backend.
 */
export function openSession (sessions: StateBackend, request: FastifyRequest, sid: string,
  principal: McpPrincipal | null, lock: boolean, abort: RequestAbort | undefined): StateScope | Promise<StateScope | null>
/** @internal The same without `abort`: never `null`. */
export function openSession (sessions: StateBackend, request: FastifyRequest, sid: string,
  principal: McpPrincipal | null, lock: boolean): StateScope | Promise<StateScope>
export function openSession (sessions: StateBackend, request: FastifyRequest, sid: string,
  principal: McpPrincipal | null, lock: boolean, abort?: RequestAbort): StateScope | Promise<StateScope | null> {
  const options = { lock, owner: request, signal: abort }
  let now
  try {
    now = sessions.openNow(sid, options)
  } catch (err) {
    return opened(sessions, Promise.reject(err), request, sid, principal, abort)
  }
  if (now === undefined) return opened(sessions, sessions.open(sid, options), request, sid, principal, abort)
  if (now !== null && abort?.aborted !== true && ownerOf(now) === (principal?.id ?? null)) {
    request.mcpSession = now.handle
    return now
  }
  return opened(sessions, Promise.resolve(now), request, sid, principal, abort)
}

/** The rest of {@link openSession}: waits for the open, and admits the scope or refuses it. */
async function opened (sessions: StateBackend, opening: Promise<StateScope | null>, request: FastifyRequest, sid: string, principal: McpPrincipal | null,
  abort: RequestAbort | undefined): Promise<StateScope | null> {
  let scope: StateScope | null
  try {
    scope = await opening
  } catch (err) {
    if (abort?.aborted === true) return gaveUp(abort, request, sid)
    throw unavailable(err, request.log, sid, sessions)
  }
  // The backend answered: an outage it had is over.
  outagesOf(sessions).ok(request.log)
  if (scope === null) throw refuse.notFound()
  if (abort?.aborted === true) {
    // Granted just as the request was given up: its handler never runs.
    await scope.close()
    return gaveUp(abort, request, sid)
  }
  if (ownerOf(scope) !== (principal?.id ?? null)) {
    await scope.close()
    throw refuse.notFound()
  }
  request.mcpSession = scope.handle
  return scope
}

/** What the scope's session belongs to (`null`: anonymous). */
function ownerOf (scope: StateScope): string | null {
  return scope.handle.getProtocol<string | null>(K.principal) ?? null
}

/**
 * A request given up while it waited for the session lock: the session ended (DELETE) → 404;
 * otherwise (its client left, or cancelled it) `null`, nothing ran.
 */
function gaveUp (abort: RequestAbort, request: FastifyRequest, sid: string): null {
  if (sessionEnded(abort.reason)) throw refuse.notFound()
  request.log.debug({ sessionId: shownId(sid), reason: String((abort.reason as Error)?.message ?? abort.reason) }, 'request given up while waiting for the session lock')
  return null
}

/**
 * Logs what a close that did not write means (the caller decides what the client is told);
 * `abortReason` is why the request's handlers were stopped, if they were.
 */
export function reportClose (closed: CloseResult, log: FastifyBaseLogger, sid: string, abortReason?: unknown): void {
  switch (closed.status) {
    case 'unchanged':
      // Stopped by the loss before it changed anything: nothing to drop, but its client is told 503.
      if (abortReason instanceof LeaseLostError) log.warn({ sessionId: shownId(sid), result: 'lost' }, 'session lock lost; the request was stopped before it changed anything')
      break
    case 'gone': log.warn({ sessionId: shownId(sid), result: 'gone' }, 'session ended meanwhile; changes dropped'); break
    case 'fenced': log.warn({ sessionId: shownId(sid), result: 'fenced' }, 'session lock lost and the session changed meanwhile; changes dropped'); break
    case 'lost': log.warn({ sessionId: shownId(sid), result: 'lost' }, 'session lock lost; changes dropped'); break
    case 'abandoned': log.warn({ sessionId: shownId(sid), result: 'abandoned' }, 'the request\'s client left and its lease was released after the grace; changes dropped'); break
    case 'failed': log.error({ err: closed.error, sessionId: shownId(sid) }, 'session save failed')
  }
  if (closed.releaseError !== undefined) {
    log.warn({ err: closed.releaseError, sessionId: shownId(sid) }, 'session lock release failed; it expires in the backend')
  }
}

export { LeaseLostError }

/** Whether a request was aborted because its session ended (DELETE, on any instance). */
function sessionEnded (reason: unknown): boolean {
  return reason instanceof Error && reason.message === 'session ended'
}

/**
 * What the client is told instead of a result when what its request did was not kept (or the
 * session went away under it), from how the scope closed and why the request was aborted; `null`
 * when the results stand.
 */
export function unkeptAnswer (closed: CloseResult, abortReason: unknown): UnkeptAnswer | null {
  const subject = abortReason instanceof LeaseLostError ? abortReason.what : 'session'
  const unkept = unkeptOf(closed, subject, abortReason)
  if (unkept !== null || closed.status === 'ok') return unkept
  return sessionEnded(abortReason) ? unkeptOf({ status: 'gone' }, 'session') : null
}
