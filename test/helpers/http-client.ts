/**
 * A raw MCP client over `fetch`, for the tests that talk to listening servers (several instances,
 * a proxy, child processes): the handshake-era wire (initialize, requests carrying the session's
 * headers, the GET stream) and a modern POST. Answers are read whole (`Reply`) or live
 * (`SseReader`), so a test can answer a server→client request mid-stream.
 */
import { SseReader } from './sse.js'
import { bodyMessages, getHeaders, headers, initializeBody, modernHeaders, newId, rpc, type Session } from './wire.js'

/** A whole answer. */
export interface Reply {
  status: number
  contentType: string
  /** JSON-RPC messages of the body (one for JSON, every `data:` message for SSE). */
  messages: Array<Record<string, any>>
  /** The last message (the response, for a single request). */
  last: Record<string, any> | undefined
  text: string
}

export interface SendOptions {
  /** Headers added to (or overriding) the session's. */
  headers?: Record<string, string>
  signal?: AbortSignal
}

/** Reads a whole response. */
export async function readReply (res: Response): Promise<Reply> {
  const text = await res.text()
  const contentType = res.headers.get('content-type') ?? ''
  const messages = bodyMessages(contentType, text)
  return { status: res.status, contentType, messages, last: messages[messages.length - 1], text }
}

/** POSTs a message (a string goes as it is) with the session's headers; the raw response, body unread. */
export async function send (url: string, body: unknown, session?: Session | null, o: SendOptions = {}): Promise<Response> {
  return await fetch(url, {
    method: 'POST',
    headers: headers(session, o.headers),
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: o.signal
  })
}

/** POSTs a message; resolves once the whole answer is read. */
export async function post (url: string, body: unknown, session?: Session | null, o: SendOptions = {}): Promise<Reply> {
  return await readReply(await send(url, body, session, o))
}

/** initialize + notifications/initialized; the session. */
export async function initialize (url: string, o: { version?: string, capabilities?: Record<string, unknown>, signal?: AbortSignal } = {}): Promise<Session> {
  const res = await send(url, initializeBody(o), null, { signal: o.signal })
  const reply = await readReply(res)
  const sid = res.headers.get('mcp-session-id')
  if (res.status !== 200 || sid === null) throw new Error(`initialize failed: ${res.status} ${reply.text}`)
  const session = { sid, version: reply.last!.result.protocolVersion as string }
  const ack = await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, session, { signal: o.signal })
  if (ack.status !== 202) throw new Error(`notifications/initialized failed: ${ack.status} ${ack.text}`)
  return session
}

/** `tools/call` of one tool; the whole reply and the request id. */
export async function callTool (url: string, session: Session, name: string, args: Record<string, unknown> = {}, o: { signal?: AbortSignal, id?: number } = {}): Promise<Reply & { id: number }> {
  const id = o.id ?? newId()
  const reply = await post(url, { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } }, session, { signal: o.signal })
  return { ...reply, id }
}

/** The `counter` of a counter tool's structured result. */
export const counterIn = (r: Reply): unknown => r.last?.result?.structuredContent?.counter

/** `counter_get` → the session's counter (throws unless the call succeeded). */
export async function counterOf (url: string, session: Session): Promise<number> {
  const r = await callTool(url, session, 'counter_get')
  const counter = counterIn(r)
  if (r.status !== 200 || typeof counter !== 'number') throw new Error(`counter_get failed: ${r.status} ${r.text}`)
  return counter
}

/** DELETE the session; the status. */
export async function deleteSession (url: string, session: Session): Promise<number> {
  const res = await fetch(url, { method: 'DELETE', headers: headers(session) })
  await res.arrayBuffer()
  return res.status
}

/** GET the session's stream (optionally resuming after `lastEventId`); the raw response. */
export async function getStream (url: string, session: Session, o: SendOptions & { lastEventId?: string } = {}): Promise<Response> {
  return await fetch(url, { method: 'GET', headers: getHeaders(session, o.lastEventId, o.headers), signal: o.signal })
}

/** GET the session's stream (optionally resuming), read live; throws unless it opened (200). */
export async function openGet (url: string, session: Session, lastEventId?: string, signal?: AbortSignal): Promise<SseReader> {
  const res = await getStream(url, session, { lastEventId, signal })
  if (res.status !== 200) throw new Error(`GET failed: ${res.status} ${await res.text()}`)
  return new SseReader(res)
}

/** POSTs a modern request (full `_meta`, the headers a conforming client derives, plus `o.headers`). */
export async function modernSend (url: string, body: Record<string, any>, o: SendOptions = {}): Promise<Response> {
  return await fetch(url, { method: 'POST', headers: { ...modernHeaders(body), ...o.headers }, body: JSON.stringify(body), signal: o.signal })
}

/** POSTs a modern request `method(params)` with id `id` (default a fresh one). */
export async function modernPost (url: string, method: string, params: Record<string, unknown> = {}, id?: string | number): Promise<Response> {
  return await modernSend(url, rpc(method, params, { id }))
}

/** The `t` of a tap test (only what the helpers need). */
interface Teardown {
  teardown (fn: () => unknown): void
}

/** A listening app: its MCP endpoint, and `track` for readers to cancel at the end of the test. */
export interface Served {
  url: string
  track (r: SseReader): SseReader
}

/**
 * Listens on an ephemeral loopback port (`path`, default `/mcp`); readers given to `track` are
 * cancelled at teardown, so that no open stream keeps the app from closing.
 */
export async function serve (t: Teardown, app: { listen (o: { port: number, host: string }): Promise<string> }, path = '/mcp'): Promise<Served> {
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const readers: SseReader[] = []
  t.teardown(async () => { for (const r of readers) await r.cancel() })
  return { url: `${address}${path}`, track (r) { readers.push(r); return r } }
}
