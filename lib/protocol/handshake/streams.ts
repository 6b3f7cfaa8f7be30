/**
 * GET and DELETE of a handshake-era session. GET opens the session's standalone stream, or
 * resumes one (from the event log, on any instance); DELETE ends the session.
 */
import type { EventLog } from '../../bus/event-log.js'
import { parseEventId } from '../../bus/event-log.js'
import type { Hub } from '../../bus/hub.js'
import { ServerStream } from '../../bus/server-stream.js'
import type { McpPrincipal } from '../../context.js'
import type { ResolvedOptions } from '../../options.js'
import { K } from '../../sessions/session-handle.js'
import type { StateEngine } from '../../state/engine.js'
import type { Exchange } from '../exchange.js'
import { endSession } from '../ended-sessions.js'
import { busDown, busUp, checkVersionHeader, readSession, refuse, sessionIdOf, storeFailure } from './session.js'
import { supportsSsePolling } from '../versions.js'
import { shownId } from '../../util/shown-id.js'

/** @internal What GET and DELETE need of the wire. */
export interface StreamDeps {
  opts: ResolvedOptions
  state: StateEngine
  hub: Hub
  eventLog: EventLog
  /** Told when a client ended its session: how long it lived (s) and its protocol version. */
  ended?: (seconds: number, version: string | undefined) => void
}

/**
 * @internal GET: the session's standalone stream. With `Last-Event-ID` naming one of the session's
 * streams, the rest of that stream is replayed first (from the event log, on any instance): a
 * POST stream is then followed until its response, a GET stream continues as the new
 * standalone stream. An id that names no stream of this session replays nothing.
 */
export async function openGetStream (d: StreamDeps, exchange: Exchange, principal: McpPrincipal | null): Promise<void> {
  const request = exchange.request
  const sid = sessionIdOf(request)
  if (d.hub.streams(sid) >= d.opts.maxStreamsPerSession) throw refuse.tooManyStreams()
  const scope = await readSession(d.state, request, sid, principal)
  checkVersionHeader(request)
  const version = scope.handle.getProtocol<string>(K.version) ?? '2025-03-26'
  const subscriptions = scope.handle.getProtocol<string[]>(K.subscriptions) ?? []
  const lastEventId = request.headers['last-event-id']
  const parsed = typeof lastEventId === 'string' ? parseEventId(lastEventId) : null
  if (parsed !== null && parsed.streamId.startsWith('p-') && await followPostStream(d, exchange, sid, lastEventId as string)) return
  // One GET stream per session, across instances: a new one takes over (the old connection is
  // told to retry), so a client that reconnects before the server noticed its old connection
  // drop is not locked out, and each message for the session still reaches one stream.
  let backlog: Array<{ id: string, data: string }> = []
  let resumeId: string | undefined
  if (parsed !== null && parsed.streamId.startsWith('g-')) {
    const replay = await d.eventLog.replay(sid, lastEventId as string).catch(() => null)
    if (replay !== null) { backlog = replay.events; resumeId = replay.streamId }
  }
  const polling = supportsSsePolling(version)
  const stream = new ServerStream({ sessionId: sid, kind: 'g', id: resumeId, log: d.eventLog, logger: request.log, resumable: polling })
  try {
    await d.hub.topics.ready(sid)
    await d.hub.getStreams.claim(sid, stream, subscriptions, d.opts.retryIntervalMs)
  } catch (err) {
    d.hub.getStreams.drop(sid, stream)
    throw busDown(err, request.log, sid, d.hub)
  }
  busUp(request.log, d.hub)
  const sink = exchange.stream({ keepAlive: d.opts.keepAliveIntervalMs, what: { sessionId: shownId(sid), streamId: stream.id } })
  stream.attach(sink, () => { d.hub.getStreams.drop(sid, stream) })
  stream.replay(backlog)
  if (resumeId !== undefined) return
  if (polling) stream.prime()
  else sink.comment('stream open')
}

/**
 * Resumes a POST's response stream: replays the rest from the log and follows it live until its
 * response. False when the log knows no such stream of this session (the GET then opens the
 * standalone stream).
 */
async function followPostStream (d: StreamDeps, exchange: Exchange, sid: string, lastEventId: string): Promise<boolean> {
  const log = exchange.request.log
  const following = await d.hub.followers.follow(sid, lastEventId).catch((err: unknown) => { throw busDown(err, log, sid, d.hub) })
  busUp(log, d.hub)
  let replay
  try {
    replay = await d.eventLog.replay(sid, lastEventId)
  } catch (err) {
    following.cancel()
    throw storeFailure(err, d.state, log, sid)
  }
  if (replay === null) {
    following.cancel()
    return false
  }
  following.start(exchange.stream({ keepAlive: 0, what: { sessionId: shownId(sid), streamId: replay.streamId } }), replay.events, replay.finished)
  return true
}

/**
 * @internal DELETE: ends the session at once, without waiting for the session lock: a request still
 * running is aborted (its client is told the session is gone), and its save cannot bring the
 * session back (every store reports `gone` instead of re-creating it).
 */
export async function deleteSession (d: StreamDeps, exchange: Exchange, principal: McpPrincipal | null): Promise<void> {
  const request = exchange.request
  const sid = sessionIdOf(request)
  const scope = await readSession(d.state, request, sid, principal)
  checkVersionHeader(request)
  const created = scope.handle.getProtocol<number>(K.created)
  try {
    await scope.destroy()
  } catch (err) {
    throw storeFailure(err, d.state, request.log, sid)
  }
  if (typeof created === 'number') d.ended?.(Math.max(0, Date.now() - created) / 1000, scope.handle.getProtocol<string>(K.version))
  // The session is gone from the store: that is what DELETE promised, so the client is told 200.
  // What else held it (other instances' streams, the event log) ends by its own checks and TTLs.
  await endSession(d, sid, request.log).catch((err: unknown) => {
    request.log.warn({ err, sessionId: shownId(sid) }, 'session deleted, but its end could not be told to other instances (bus unavailable)')
  })
  exchange.empty(200)
}
