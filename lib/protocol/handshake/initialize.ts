/**
 * `initialize` (handshake era): negotiates the protocol version, mints a session id, stores what
 * the session keeps from the handshake, and answers with `Mcp-Session-Id`. Takes no lock: nobody
 * knows the session yet.
 *
 * Anyone may initialize, and what is stored lives in every store for the session's lifetime: so
 * only what the server reads is kept (the normalized client capabilities and a short client info),
 * and absurd handshakes are refused outright.
 */
import type { EventLog } from '../../bus/event-log.js'
import type { McpPrincipal } from '../../context.js'
import { ErrorCode, McpError } from '../../jsonrpc/errors.js'
import { isPlainObject, resultResponse, type JsonRpcRequest } from '../../jsonrpc/messages.js'
import { K } from '../../sessions/session-handle.js'
import type { JsonValue } from '../../sessions/session-store.js'
import { generateSessionId } from '../../sessions/session-id.js'
import type { ResolvedOptions } from '../../options.js'
import type { StateEngine } from '../../state/engine.js'
import type { Exchange } from '../exchange.js'
import { refusalAnswer } from '../refusals.js'
import { negotiateHandshakeVersion } from '../versions.js'

const invalidParams = (message: string): McpError => new McpError(ErrorCode.InvalidParams, `Invalid params: ${message}`, undefined, 400)

/** The most characters `capabilities` and `clientInfo` may take together, serialized as JSON. */
export const MAX_HANDSHAKE_PARAMS = 65_536
/** `clientInfo.name`, `.version` and `.title` are kept up to this many characters. */
export const MAX_CLIENT_INFO_FIELD = 256

/**
 * The part of a client's declared capabilities the server reads, normalized: `elicitation` with
 * `form` / `url`, `sampling` with `context` / `tools`, `roots` with `listChanged`. Every decision
 * `missingCapability` (base-context.ts) makes on the result is the one it makes on the original:
 * `elicitation.form`/`.url` count by presence (any value), `sampling.tools` only as an object,
 * `elicitation`, `sampling` and `roots` only as objects. Anything else (`experimental`, unknown
 * keys, sub-feature settings) is dropped.
 */
export function normalizeClientCapabilities (caps: Record<string, unknown>): Record<string, JsonValue> {
  const out: Record<string, JsonValue> = {}
  const { elicitation, sampling, roots } = caps
  if (isPlainObject(elicitation)) {
    // Sub-features are kept by presence, as `{}`. `{ foo: 1 }` (neither mode named, but not
    // empty) means form, as the `{}` it becomes does.
    const e: Record<string, JsonValue> = {}
    if ('form' in elicitation) e.form = {}
    if ('url' in elicitation) e.url = {}
    out.elicitation = e
  }
  if (isPlainObject(sampling)) {
    const s: Record<string, JsonValue> = {}
    if (isPlainObject(sampling.context)) s.context = {}
    if (isPlainObject(sampling.tools)) s.tools = {}
    out.sampling = s
  }
  if (isPlainObject(roots)) out.roots = roots.listChanged === true ? { listChanged: true } : {}
  return out
}

/** `name`, `version` and `title` of a client info, strings only, each cut to {@link MAX_CLIENT_INFO_FIELD}. */
export function shortClientInfo (info: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const key of ['name', 'version', 'title']) {
    const v = info[key]
    if (typeof v === 'string') out[key] = v.slice(0, MAX_CLIENT_INFO_FIELD)
  }
  return out
}

/** What `initialize` needs of the wire. */
export interface InitializeDeps {
  opts: ResolvedOptions
  state: StateEngine
  eventLog: EventLog
  capabilities: () => Record<string, unknown>
  /** Whom the session counts against in the store (the limiter's `clientKey`). */
  limiter: { clientKey: (principal: McpPrincipal | null, ip: string | undefined) => string }
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
  // Nesting is bounded by parseBody, so serializing cannot overflow the stack.
  if (JSON.stringify(caps).length + (clientInfo === null ? 0 : JSON.stringify(clientInfo).length) > MAX_HANDSHAKE_PARAMS) {
    throw invalidParams(`capabilities and clientInfo must take at most ${MAX_HANDSHAKE_PARAMS} characters as JSON`)
  }
  const version = negotiateHandshakeVersion(p.protocolVersion)
  const sid = generateSessionId()
  try {
    await d.state.store.create(sid, {
      [K.version]: version,
      [K.capabilities]: normalizeClientCapabilities(caps),
      [K.clientInfo]: clientInfo === null ? null : shortClientInfo(clientInfo),
      [K.principal]: principal?.id ?? null,
      [K.created]: Date.now()
    // Short-lived until its first use: a client that never comes back with the id leaves little.
    }, { owner: d.limiter.clientKey(principal, request.ip), unusedTtl: d.opts.unusedTtlMs })
  } catch (err) {
    throw refusalAnswer(d.state.refused('session', sid, err, request.log).refusal, 'session', err)
  }
  d.state.answered('session', request.log)
  const result: Record<string, unknown> = {
    protocolVersion: version,
    capabilities: d.capabilities(),
    serverInfo: d.opts.serverInfo
  }
  if (d.opts.instructions !== undefined) result.instructions = d.opts.instructions
  exchange.channel({ sessionId: null, polling: false, log: d.eventLog, headers: { 'mcp-session-id': sid } })
    .finish([resultResponse(msg.id, result)], true)
}
