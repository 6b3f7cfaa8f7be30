/**
 * The 2026-07-28 wire's request envelope: which POSTs it serves, and the checks before anything
 * runs — `_meta` (-32602), the standard headers against the body (-32020), the `Mcp-Param-*`
 * headers of a tool's `x-mcp-header` parameters (-32020), and the version (-32022). Every refusal
 * is a 400 with the request's id (none on notifications).
 */
import type { FastifyRequest } from 'fastify'
import { ErrorCode, McpError } from '../../jsonrpc/errors.js'
import { isPlainObject, type JsonRpcRequest, type ParsedBody } from '../../jsonrpc/messages.js'
import { META_CAPS, META_CLIENT, META_VERSION, STATELESS_VERSIONS } from './meta.js'
import { isHandshakeVersion } from '../versions.js'

/** Whether a POST is served on the stateless 2026-07-28 wire (docs/protocol-eras.md: the `_meta` version or the header decides). */
export function isStatelessPost (request: FastifyRequest, body: ParsedBody & { ok: true }): boolean {
  if (!body.batch) {
    const m = body.messages[0]
    if ((m.kind === 'request' || m.kind === 'notification') && isPlainObject(m.message.params?._meta) &&
      META_VERSION in m.message.params._meta) return true
  }
  const v = request.headers['mcp-protocol-version']
  if (typeof v !== 'string' || isHandshakeVersion(v)) return false
  // A version we do not know from the handshake era, on a request that names no handshake-era session.
  // (Compared as dates only: "latest" or "9" sort after "2026-07-28" as strings.)
  return request.headers['mcp-session-id'] === undefined || (/^\d{4}-\d{2}-\d{2}$/.test(v) && v >= STATELESS_VERSIONS[0])
}

const bad = (code: number, message: string, data?: unknown): McpError => new McpError(code, message, data, 400)
const mismatch = (what: string): McpError => bad(ErrorCode.HeaderMismatch, `Header mismatch: ${what}`)

/**
 * A header's value, several joined with commas. Callers read the header by its literal name:
 * a load at its own site (one per name) is a plain property load, where one shared load of
 * whatever name is a megamorphic keyed lookup, many times dearer.
 */
function joined (v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(',') : v
}

/** Decodes a header value, with the `=?base64?…?=` sentinel for non-ASCII values. `null` when malformed. */
export function decodeHeaderValue (raw: string): string | null {
  const v = raw.trim()
  // Only a value with both markers is encoded; anything else is taken literally.
  if (!v.startsWith('=?base64?') || !v.endsWith('?=') || v.length < 11) return v
  const b64 = v.slice(9, -2)
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) return null
  const bytes = Buffer.from(b64, 'base64')
  const text = new TextDecoder('utf-8', { fatal: true })
  try { return text.decode(bytes) } catch { return null }
}

/**
 * `MCP-Protocol-Version` and `Mcp-Method` against the body: each must be present when `required`
 * (requests), and one that is sent must agree (`claimed`: the version the body names, if any).
 * Returns the version header, trimmed.
 */
function checkStandardHeaders (request: FastifyRequest, method: string, claimed: unknown, required: boolean): string | undefined {
  const version = joined(request.headers['mcp-protocol-version'])?.trim()
  if (version === undefined) {
    if (required) throw mismatch('MCP-Protocol-Version header is required')
  } else if (claimed !== undefined && version !== claimed) {
    throw mismatch('MCP-Protocol-Version does not match _meta protocolVersion')
  }
  const sent = joined(request.headers['mcp-method'])
  if (sent === undefined) {
    if (required) throw mismatch('Mcp-Method header is required')
  } else if (sent.trim() !== method) {
    throw mismatch('Mcp-Method does not match the method')
  }
  return version
}

/** -32022 with the versions we serve, unless `requested` is one of them. */
function checkVersion (requested: unknown): void {
  if (!(STATELESS_VERSIONS as readonly unknown[]).includes(requested)) {
    throw bad(ErrorCode.UnsupportedProtocolVersion, 'Unsupported protocol version', { supported: [...STATELESS_VERSIONS], requested })
  }
}

/** A decimal number as text (no hex/octal/binary prefixes, no `Infinity`), which `Number()` would also take. */
const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/

/** Compares a `Mcp-Param-*` header with the body value (integers numerically, booleans as text). */
function sameParam (headerValue: string, value: unknown): boolean {
  if (typeof value === 'number') return DECIMAL.test(headerValue) && Number(headerValue) === value
  if (typeof value === 'boolean') return headerValue === String(value)
  return headerValue === value
}

/** The body field `Mcp-Name` mirrors, per method (SEP-2243; SEP-2663 adds the task methods). */
const NAME_KEYS = new Map<string, string>([
  ['tools/call', 'name'], ['prompts/get', 'name'], ['resources/read', 'uri'],
  ['tasks/get', 'taskId'], ['tasks/update', 'taskId'], ['tasks/cancel', 'taskId']
])

/**
 * A request's envelope: `_meta` (-32602), then header agreement (-32020), then version support
 * (-32022). `toolSchema` finds the input schema of a tool `principal` calls (for its `Mcp-Param-*`
 * headers). Returns the `_meta`.
 */
export function checkRequestEnvelope<P> (request: FastifyRequest, msg: JsonRpcRequest, principal: P,
  toolSchema: (name: string, principal: P) => Record<string, unknown> | undefined): Record<string, unknown> {
  const params = msg.params ?? {}
  const meta = params._meta
  if (!isPlainObject(meta) || typeof meta[META_VERSION] !== 'string' || !isPlainObject(meta[META_CAPS])) {
    throw bad(ErrorCode.InvalidParams, `Invalid params: _meta must carry "${META_VERSION}" and "${META_CAPS}"`)
  }
  if (meta[META_CLIENT] !== undefined && !isPlainObject(meta[META_CLIENT])) {
    throw bad(ErrorCode.InvalidParams, `Invalid params: "${META_CLIENT}" must be an object`)
  }
  checkStandardHeaders(request, msg.method, meta[META_VERSION], true)
  const nameKey = NAME_KEYS.get(msg.method) ?? null
  // A task id that is not a string is no task: "not found", with no header to compare.
  if (nameKey !== null && (nameKey !== 'taskId' || typeof params.taskId === 'string')) {
    const raw = joined(request.headers['mcp-name'])
    if (raw === undefined) throw mismatch('Mcp-Name header is required')
    const name = decodeHeaderValue(raw)
    if (name === null) throw mismatch('Mcp-Name has a malformed base64 value')
    if (name !== params[nameKey]) throw mismatch(`Mcp-Name does not match params.${nameKey}`)
  }
  if (msg.method === 'tools/call' && typeof params.name === 'string') {
    const schema = toolSchema(params.name, principal)
    if (schema !== undefined) checkParamHeaders(request, schema, params)
  }
  checkVersion(meta[META_VERSION])
  return meta
}

/** `Mcp-Param-*` headers of the tool's `x-mcp-header` parameters must mirror the arguments. */
function checkParamHeaders (request: FastifyRequest, inputSchema: Record<string, unknown>, params: Record<string, unknown>): void {
  const props = (inputSchema as { properties?: Record<string, Record<string, unknown>> }).properties ?? {}
  const args = isPlainObject(params.arguments) ? params.arguments : {}
  // for…in with an own-key check, not Object.entries: no array of pairs per request.
  for (const prop in props) {
    if (!Object.hasOwn(props, prop)) continue
    const headerName = props[prop]?.['x-mcp-header']
    if (typeof headerName !== 'string') continue
    const raw = joined(request.headers[`mcp-param-${headerName.toLowerCase()}`])
    const value = args[prop]
    if (value === undefined || value === null) {
      if (raw !== undefined) throw mismatch(`Mcp-Param-${headerName} is sent but argument "${prop}" is absent`)
      continue
    }
    if (raw === undefined) throw mismatch(`Mcp-Param-${headerName} header is required`)
    const decoded = decodeHeaderValue(raw)
    if (decoded === null) throw mismatch(`Mcp-Param-${headerName} has a malformed base64 value`)
    if (!sameParam(decoded, value)) throw mismatch(`Mcp-Param-${headerName} does not match argument "${prop}"`)
  }
}

/**
 * A notification need not carry the standard headers (they are required on requests), but those
 * it carries must agree with its body, and a version it names must be one we serve.
 */
export function checkNotificationEnvelope (request: FastifyRequest, method: string, params: Record<string, unknown> | undefined): void {
  const meta = params?._meta
  const claimed = isPlainObject(meta) ? meta[META_VERSION] : undefined
  const version = checkStandardHeaders(request, method, claimed, false)
  const named = claimed ?? version
  if (named !== undefined) checkVersion(named)
}

/** Refuses what this revision does not take in a POST: batches, client responses, invalid messages. */
export function refuseUnservable (body: ParsedBody & { ok: true }): void {
  if (body.batch) throw bad(ErrorCode.InvalidRequest, 'Invalid Request: batches are not allowed')
  const m = body.messages[0]
  if (m.kind === 'response') throw bad(ErrorCode.InvalidRequest, 'Invalid Request: clients do not send responses on this protocol revision')
  if (m.kind === 'invalid') throw bad(m.error.code, m.error.message)
}
