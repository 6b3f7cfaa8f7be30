/**
 * The MCP requests the bench sends (one body and header set per scenario, identical for every
 * server of a scenario), the handshake that opens a 2025-era session, and the validation of
 * responses that runs before anything is timed.
 */

export const MODERN_VERSION = '2026-07-28'
export const LEGACY_VERSION = '2025-11-25'
export const ECHO_TEXT = 'hello'

export interface RequestSpec {
  headers: Record<string, string>
  body: string
}

const BASE_HEADERS = {
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream'
}

/** A 2026-07-28 request: `_meta` envelope plus the mirroring headers. */
export function modernCall (name: string, args: Record<string, unknown>, meta: Record<string, unknown> = {}, id = 1): RequestSpec {
  const body = {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: {
      name,
      arguments: args,
      _meta: {
        'io.modelcontextprotocol/protocolVersion': MODERN_VERSION,
        'io.modelcontextprotocol/clientCapabilities': {},
        ...meta
      }
    }
  }
  return {
    headers: { ...BASE_HEADERS, 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': name },
    body: JSON.stringify(body)
  }
}

/** A handshake-era `tools/call` on a session (the session header is added per connection or here). */
export function legacyCall (name: string, args: Record<string, unknown>, sessionId?: string, id = 1): RequestSpec {
  const headers: Record<string, string> = { ...BASE_HEADERS, 'mcp-protocol-version': LEGACY_VERSION }
  if (sessionId !== undefined) headers['mcp-session-id'] = sessionId
  return { headers, body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } }) }
}

export function initializeRequest (): RequestSpec {
  return {
    headers: { ...BASE_HEADERS },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: { name: 'bench', version: '1.0.0' } }
    })
  }
}

export interface HttpAnswer { status: number, contentType: string, text: string, headers: Headers }

export async function post (url: string, spec: RequestSpec, extraHeaders: Record<string, string> = {}): Promise<HttpAnswer> {
  const res = await fetch(url, { method: 'POST', headers: { ...spec.headers, ...extraHeaders }, body: spec.body })
  return { status: res.status, contentType: res.headers.get('content-type') ?? '', text: await res.text(), headers: res.headers }
}

/** Opens a 2025-era session (initialize + notifications/initialized); returns its id. */
export async function openSession (url: string): Promise<string> {
  const init = await post(url, initializeRequest())
  const sid = init.headers.get('mcp-session-id')
  if (init.status !== 200 || sid === null) throw new Error(`initialize failed at ${url}: ${init.status} ${init.text.slice(0, 200)}`)
  const result = messagesOf(init)[0] as { result?: { protocolVersion?: string } } | undefined
  if (result?.result?.protocolVersion !== LEGACY_VERSION) throw new Error(`initialize at ${url} negotiated ${String(result?.result?.protocolVersion)}`)
  const note = await post(url, {
    headers: { ...BASE_HEADERS, 'mcp-protocol-version': LEGACY_VERSION, 'mcp-session-id': sid },
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })
  })
  if (note.status !== 202) throw new Error(`notifications/initialized at ${url}: ${note.status} ${note.text.slice(0, 200)}`)
  return sid
}

/** The JSON-RPC messages of an answer (a JSON body, or the `data:` lines of an SSE body). */
export function messagesOf (answer: HttpAnswer): unknown[] {
  if (answer.contentType.startsWith('application/json')) {
    const v = JSON.parse(answer.text) as unknown
    return Array.isArray(v) ? v : [v]
  }
  if (answer.contentType.startsWith('text/event-stream')) {
    const out: unknown[] = []
    for (const block of answer.text.split(/\r?\n\r?\n/)) {
      const data = block.split(/\r?\n/).filter(l => l.startsWith('data:')).map(l => l.slice(5).replace(/^ /, '')).join('\n')
      if (data !== '') out.push(JSON.parse(data))
    }
    return out
  }
  throw new Error(`unexpected content-type ${answer.contentType}: ${answer.text.slice(0, 200)}`)
}

interface Message { id?: unknown, method?: string, result?: { content?: Array<{ type?: string, text?: string }> }, error?: unknown }

/**
 * Checks an answer: 200, the wanted content type, `progress` progress notifications first and a
 * final result whose first text block is `text`. Throws with the answer on any difference.
 */
export function expectToolResult (who: string, answer: HttpAnswer, want: { text: string, sse?: boolean, progress?: number }): void {
  const fail = (why: string): never => { throw new Error(`${who}: ${why}\n  status ${answer.status} ${answer.contentType}\n  ${answer.text.slice(0, 600)}`) }
  if (answer.status !== 200) fail('status is not 200')
  const sse = answer.contentType.startsWith('text/event-stream')
  if (want.sse === true && !sse) fail('expected an SSE response')
  if (want.sse !== true && !answer.contentType.startsWith('application/json')) fail('expected a JSON response')
  const msgs = messagesOf(answer) as Message[]
  const final = msgs.filter(m => m.id !== undefined && (m.result !== undefined || m.error !== undefined))
  if (final.length !== 1) fail(`expected exactly one response, got ${final.length}`)
  const res = final[0] as Message
  if (res.error !== undefined) fail('got an error response')
  const text = res.result?.content?.[0]?.text
  if (text !== want.text) fail(`expected text ${JSON.stringify(want.text)}, got ${JSON.stringify(text)}`)
  const progress = msgs.filter(m => m.method === 'notifications/progress').length
  if (progress !== (want.progress ?? 0)) fail(`expected ${want.progress ?? 0} progress notifications, got ${progress}`)
}
