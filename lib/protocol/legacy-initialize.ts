/**
 * `initialize` (handshake era): negotiates the protocol version, mints a session id, stores what
 * the session keeps from the handshake, and answers with `Mcp-Session-Id`. Takes no lock: nobody
 * knows the session yet.
 */
import type { EventLog } from '../bus/event-log.js'
import type { McpPrincipal } from '../context.js'
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import { isPlainObject, resultResponse, type JsonRpcRequest } from '../jsonrpc/messages.js'
import { K } from '../sessions/session-handle.js'
import { generateSessionId } from '../sessions/session-id.js'
import type { ResolvedOptions } from '../options.js'
import type { StateBackend } from '../state/state-scope.js'
import type { Exchange } from './exchange.js'
import { refuse } from './legacy-session.js'
import { negotiateLegacyVersion } from './versions.js'

const invalidParams = (message: string): McpError => new McpError(ErrorCode.InvalidParams, `Invalid params: ${message}`, undefined, 400)

/** What `initialize` needs of the wire. */
export interface InitializeDeps {
  opts: ResolvedOptions
  sessions: StateBackend
  eventLog: EventLog
  capabilities: () => Record<string, unknown>
}

/** Handles a single `initialize` request. */
export async function initialize (d: InitializeDeps, exchange: Exchange, msg: JsonRpcRequest, principal: McpPrincipal | null): Promise<void> {
  const request = exchange.request
  if (request.headers['mcp-session-id'] !== undefined) {
    throw new McpError(ErrorCode.InvalidRequest, 'Invalid Request: the session is already initialized', undefined, 400)
  }
  const p = msg.params ?? {}
  if (typeof p.protocolVersion !== 'string') throw invalidParams('protocolVersion must be a string')
  const caps = p.capabilities ?? {}
  if (!isPlainObject(caps)) throw invalidParams('capabilities must be an object')
  const clientInfo = p.clientInfo ?? null
  if (clientInfo !== null && !isPlainObject(clientInfo)) throw invalidParams('clientInfo must be an object')
  const version = negotiateLegacyVersion(p.protocolVersion)
  const sid = generateSessionId()
  try {
    await d.sessions.store.create(sid, {
      [K.version]: version,
      [K.capabilities]: JSON.parse(JSON.stringify(caps)),
      [K.clientInfo]: clientInfo === null ? null : JSON.parse(JSON.stringify(clientInfo)),
      [K.principal]: principal?.id ?? null
    })
  } catch (err) {
    request.log.error({ err }, 'session store unavailable')
    throw refuse.storeDown()
  }
  const result: Record<string, unknown> = {
    protocolVersion: version,
    capabilities: d.capabilities(),
    serverInfo: d.opts.serverInfo
  }
  if (d.opts.instructions !== undefined) result.instructions = d.opts.instructions
  exchange.channel({ sessionId: null, polling: false, log: d.eventLog, headers: { 'mcp-session-id': sid } })
    .finish([resultResponse(msg.id, result)], true)
}
