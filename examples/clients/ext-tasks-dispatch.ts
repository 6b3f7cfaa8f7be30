/**
 * The raw dispatch `@modelcontextprotocol/ext-tasks` needs on a 2026-07-28 server (its
 * `rawDispatch` option): the SDK client's codecs reject the task wire shapes, so the extension hands
 * `tools/call` and `tasks/*` to the host as `{ method, params }` with the `_meta` envelope already
 * framed. This sends each as one JSON-RPC POST with the headers the revision requires
 * (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) and reads the answer whether it comes as JSON
 * or as an SSE stream. docs/client-guide.md shows this file as it is; copy it.
 */
import { DispatchError, type DispatchOptions, type JsonRpcResponse, type RawClientDispatch } from '@modelcontextprotocol/ext-tasks/client'
import type { JsonValue } from '@modelcontextprotocol/ext-tasks/core'

type Message = Record<string, unknown> & { id?: unknown, result?: unknown, error?: unknown }

/** A header value as the revision sends it: plain ASCII as it is, anything else `=?base64?…?=`. */
function headerValue (text: string): string {
  return /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(text) ? text : `=?base64?${Buffer.from(text, 'utf8').toString('base64')}?=`
}

/** The JSON-RPC messages of an SSE body (`data:` lines of each event). */
function sseMessages (text: string): Message[] {
  const out: Message[] = []
  for (const event of text.split(/\r?\n\r?\n/)) {
    const data = event.split(/\r?\n/).filter(l => l.startsWith('data:')).map(l => l.slice(5).trimStart()).join('\n')
    if (data !== '') out.push(JSON.parse(data) as Message)
  }
  return out
}

/**
 * A `rawDispatch` posting to `url` (a function: a URL per request, e.g. to spread them over
 * instances). `headers` go on every request (e.g. `Authorization`).
 */
export function rawDispatch (url: string | URL | (() => string | URL), headers: Record<string, string> = {}): RawClientDispatch {
  let nextId = 0
  return async (request, options: DispatchOptions = {}): Promise<JsonRpcResponse> => {
    const { method, params = {} } = request as { method: string, params?: Record<string, any> }
    const id = ++nextId
    const h = new Headers({ accept: 'application/json, text/event-stream', 'content-type': 'application/json', ...headers })
    h.set('mcp-protocol-version', String(params._meta?.['io.modelcontextprotocol/protocolVersion']))
    h.set('mcp-method', method)
    const name = method === 'tools/call' ? params.name : method.startsWith('tasks/') ? params.taskId : undefined
    if (typeof name === 'string') h.set('mcp-name', headerValue(name))
    for (const [k, v] of Object.entries(options.context?.headers ?? {})) h.set(k, v)
    const timeout = options.context?.requestTimeoutMs
    const signals = [options.signal, timeout === undefined ? undefined : AbortSignal.timeout(timeout)].filter(s => s !== undefined)
    let res: Response
    try {
      res = await fetch(typeof url === 'function' ? url() : url, {
        method: 'POST',
        headers: h,
        body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
        signal: signals.length === 0 ? undefined : AbortSignal.any(signals)
      })
    } catch (err) {
      throw new DispatchError(`${method}: the request failed`, false, { cause: err })
    }
    const text = await res.text()
    let messages: Message[]
    try {
      messages = (res.headers.get('content-type') ?? '').startsWith('text/event-stream') ? sseMessages(text) : [JSON.parse(text) as Message]
    } catch (err) {
      throw new DispatchError(`${method}: HTTP ${res.status} without a JSON-RPC answer`, false, { cause: err })
    }
    const reply = messages.find(m => m.id === id && ('result' in m || 'error' in m))
    if (reply === undefined) throw new DispatchError(`${method}: HTTP ${res.status} without a JSON-RPC answer`)
    return 'error' in reply
      ? { kind: 'error', error: reply.error as Extract<JsonRpcResponse, { kind: 'error' }>['error'] }
      : { kind: 'result', result: reply.result as JsonValue }
  }
}
