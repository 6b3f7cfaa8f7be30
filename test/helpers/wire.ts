/**
 * The MCP wire as the tests speak it, for both eras: the constants (Accept, protocol versions, the
 * `_meta` keys), the headers a conforming client sends, request bodies, and reading the JSON-RPC
 * messages of an answer whether it came as JSON or as SSE. Transport-free: the inject helpers
 * (test/helpers/handshake-app.ts, test/protocol/stateless/fixtures/helper.ts) and the fetch client
 * (test/helpers/http-client.ts) build on it.
 */
import { sseMessages } from './sse.js'

/** The Accept header of a POST: a client must take both answer forms. */
export const ACCEPT = 'application/json, text/event-stream'
/** The Accept header of a GET stream. */
export const SSE_ACCEPT = 'text/event-stream'
/** The latest handshake-era (session) revision. */
export const LEGACY = '2025-11-25'
/** The stateless revision: every request carries its `_meta` envelope. */
export const MODERN = '2026-07-28'

// The `_meta` keys of the 2026-07-28 revision. These are the spec's names, written out here on
// purpose: lib keeps its own copy, and a test that imported lib's would agree with lib by definition.
export const META_VERSION = 'io.modelcontextprotocol/protocolVersion'
export const META_CAPS = 'io.modelcontextprotocol/clientCapabilities'
export const META_CLIENT = 'io.modelcontextprotocol/clientInfo'
export const META_LOG = 'io.modelcontextprotocol/logLevel'
export const META_SERVER = 'io.modelcontextprotocol/serverInfo'
export const META_SUB = 'io.modelcontextprotocol/subscriptionId'

/** The clientInfo the tests introduce themselves with. */
export const CLIENT_INFO = { name: 'mcp-test', version: '1.0.0' }

/** A handshake-era session: its id and the negotiated revision (sent back on every request). */
export interface Session {
  sid: string
  version: string
}

let nextId = 1
/** A JSON-RPC id unique within this test process. */
export const newId = (): number => nextId++

/** The headers of a handshake-era POST: Accept, Content-Type and, with a session, its two headers; `extra` last. */
export function headers (session?: Session | null, extra?: Record<string, string>): Record<string, string> {
  const h: Record<string, string> = { accept: ACCEPT, 'content-type': 'application/json' }
  if (session != null) {
    h['mcp-session-id'] = session.sid
    h['mcp-protocol-version'] = session.version
  }
  return { ...h, ...extra }
}

/** The headers of a session's GET stream, optionally resuming after `lastEventId`; `extra` last. */
export function getHeaders (session: Session, lastEventId?: string, extra?: Record<string, string>): Record<string, string> {
  const h: Record<string, string> = { accept: SSE_ACCEPT, 'mcp-session-id': session.sid, 'mcp-protocol-version': session.version }
  if (lastEventId !== undefined) h['last-event-id'] = lastEventId
  return { ...h, ...extra }
}

/** An `initialize` request body (id `id`, default a fresh one). */
export function initializeBody (o: { version?: string, capabilities?: Record<string, unknown>, id?: string | number } = {}): Record<string, unknown> {
  return {
    jsonrpc: '2.0',
    id: o.id ?? newId(),
    method: 'initialize',
    params: { protocolVersion: o.version ?? LEGACY, capabilities: o.capabilities ?? {}, clientInfo: CLIENT_INFO }
  }
}

// ─── 2026-07-28 ──────────────────────────────────────────────────────────────────────────────

/** `=?base64?…?=` of a UTF-8 text (the header sentinel for values that are not plain ASCII). */
export const b64 = (text: string): string => `=?base64?${Buffer.from(text, 'utf8').toString('base64')}?=`

/** A `_meta` envelope: version, capabilities (default none), client info, plus `extra`. */
export function meta (caps: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { [META_VERSION]: MODERN, [META_CAPS]: caps, [META_CLIENT]: CLIENT_INFO, ...extra }
}

/** A modern JSON-RPC request with the full `_meta` envelope (plus `o.meta`, with capabilities `o.caps`). */
export function rpc (method: string, params: Record<string, unknown> = {}, o: { id?: string | number, caps?: Record<string, unknown>, meta?: Record<string, unknown> } = {}): Record<string, any> {
  return { jsonrpc: '2.0', id: o.id ?? newId(), method, params: { _meta: meta(o.caps, o.meta), ...params } }
}

/** Header values that may go as they are (visible ASCII, no surrounding spaces). */
const PLAIN_HEADER = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/

/**
 * The headers a conforming client sends with a modern `body`: Accept, Content-Type,
 * MCP-Protocol-Version (from `_meta`), Mcp-Method and, for tools/call, prompts/get,
 * resources/read and the task methods, Mcp-Name.
 */
export function modernHeaders (body: Record<string, any>): Record<string, string> {
  const h: Record<string, string> = { accept: ACCEPT, 'content-type': 'application/json' }
  const version = body.params?._meta?.[META_VERSION]
  if (typeof version === 'string') h['mcp-protocol-version'] = version
  if (typeof body.method === 'string') h['mcp-method'] = body.method
  const name = body.method === 'resources/read'
    ? body.params?.uri
    : (body.method === 'tools/call' || body.method === 'prompts/get') ? body.params?.name : String(body.method).startsWith('tasks/') ? body.params?.taskId : undefined
  if (typeof name === 'string') h['mcp-name'] = PLAIN_HEADER.test(name) ? name : b64(name)
  return h
}

// ─── answers ─────────────────────────────────────────────────────────────────────────────────

/** The JSON-RPC messages of an answer body: none (empty), one (JSON), or every message of an SSE body. */
export function bodyMessages (contentType: string, text: string): Array<Record<string, any>> {
  if (contentType.startsWith('text/event-stream')) return sseMessages(text)
  return text === '' ? [] : [JSON.parse(text)]
}

/** An answer read whole (an inject response has this shape). */
export interface WholeAnswer {
  headers: Record<string, string | string[] | number | undefined>
  body: string
}

/** The JSON-RPC messages of an inject response. */
export function messagesOf (res: WholeAnswer): Array<Record<string, any>> {
  return bodyMessages(String(res.headers['content-type'] ?? ''), res.body)
}

/** The final message of an inject response (the JSON-RPC response of a single request). */
export function finalOf (res: WholeAnswer): Record<string, any> {
  const all = messagesOf(res)
  return all[all.length - 1]
}
