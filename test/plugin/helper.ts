/**
 * Shared helpers of the plugin tests: `build()` an app with the plugin and a few tools, speak the
 * legacy wire through `app.inject()` (initialize, rpc) or a live server (fetch + an SSE reader).
 */
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { type McpDecorator, type McpPluginOptions } from '../../lib/index.js'
import { parseSse, SseReader } from '../helpers/sse.js'

/** The `t` of a tap test (only what the helpers need). */
export interface TestLike {
  teardown (fn: () => unknown): void
}

export const ACCEPT = 'application/json, text/event-stream'
export const LATEST = '2025-11-25'

export const sleep = (ms: number, signal?: AbortSignal): Promise<void> => new Promise((resolve, reject) => {
  if (signal?.aborted === true) { reject(signal.reason); return }
  const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, ms)
  const onAbort = (): void => { clearTimeout(timer); reject(signal?.reason) }
  signal?.addEventListener('abort', onAbort, { once: true })
})

/** The default tools: `echo` (TypeBox input) and `add` (input + output schema). */
export function defaultTools (m: McpDecorator): void {
  m.tool({
    name: 'echo',
    description: 'Echoes its text',
    input: Type.Object({ text: Type.String() })
  }, async ({ text }) => text)
  m.tool({
    name: 'add',
    description: 'Adds two numbers',
    input: Type.Object({ a: Type.Number(), b: Type.Number() }),
    output: Type.Object({ sum: Type.Number() })
  }, async ({ a, b }) => ({ structuredContent: { sum: a + b } }))
}

/**
 * A Fastify app with the plugin registered and tools added by `setup` (default: {@link defaultTools}).
 * Closed at the end of the test.
 */
export async function build (t: TestLike, opts: McpPluginOptions = {}, setup: (m: McpDecorator, app: FastifyInstance) => void = defaultTools): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, opts)
  setup(app.mcp, app)
  return app
}

export interface Session {
  sid: string
  version: string
}

export interface RpcOptions {
  session?: Session | null
  headers?: Record<string, string>
  path?: string
}

function headersFor (o: RpcOptions): Record<string, string> {
  const h: Record<string, string> = { accept: ACCEPT, 'content-type': 'application/json' }
  if (o.session != null) {
    h['mcp-session-id'] = o.session.sid
    h['mcp-protocol-version'] = o.session.version
  }
  return { ...h, ...o.headers }
}

/** POSTs a raw body (string or JSON value) through inject. */
export async function post (app: FastifyInstance, body: unknown, o: RpcOptions = {}): Promise<LightMyRequestResponse> {
  return await app.inject({
    method: 'POST',
    url: o.path ?? '/mcp',
    headers: headersFor(o),
    payload: typeof body === 'string' ? body : JSON.stringify(body)
  })
}

/** `initialize` (+ `notifications/initialized`) and the session it opened. */
export async function initialize (app: FastifyInstance, o: { version?: string, capabilities?: Record<string, unknown>, headers?: Record<string, string> } = {}): Promise<Session & { result: Record<string, unknown> }> {
  const res = await post(app, {
    jsonrpc: '2.0',
    id: 0,
    method: 'initialize',
    params: { protocolVersion: o.version ?? LATEST, capabilities: o.capabilities ?? {}, clientInfo: { name: 'test', version: '1.0.0' } }
  }, { headers: o.headers })
  if (res.statusCode !== 200) throw new Error(`initialize failed: ${res.statusCode} ${res.body}`)
  const sid = res.headers['mcp-session-id']
  if (typeof sid !== 'string') throw new Error('initialize returned no session id')
  const body = res.json() as { result: Record<string, unknown> }
  const session = { sid, version: body.result.protocolVersion as string }
  const ack = await post(app, { jsonrpc: '2.0', method: 'notifications/initialized' }, { session, headers: o.headers })
  if (ack.statusCode !== 202) throw new Error(`notifications/initialized failed: ${ack.statusCode} ${ack.body}`)
  return { ...session, result: body.result }
}

let nextId = 1

/** Sends one request on a session; returns the HTTP response. */
export async function request (app: FastifyInstance, session: Session | null, method: string, params?: Record<string, unknown>, o: RpcOptions & { id?: string | number } = {}): Promise<LightMyRequestResponse> {
  const msg: Record<string, unknown> = { jsonrpc: '2.0', id: o.id ?? nextId++, method }
  if (params !== undefined) msg.params = params
  return await post(app, msg, { ...o, session })
}

/** Sends one request and returns the parsed JSON-RPC response (the last message when SSE). */
export async function call (app: FastifyInstance, session: Session | null, method: string, params?: Record<string, unknown>, o: RpcOptions & { id?: string | number } = {}): Promise<Record<string, any>> {
  const res = await request(app, session, method, params, o)
  if (String(res.headers['content-type']).startsWith('text/event-stream')) {
    const msgs = parseSse(res.body).filter(e => e.data !== undefined && e.data !== '').map(e => JSON.parse(e.data!))
    return msgs[msgs.length - 1]
  }
  return res.json()
}

// ─── SSE ──────────────────────────────────────────────────────────────────────────────────────

export { parseSse, sseMessages, SseReader, type SseEvent } from '../helpers/sse.js'

// ─── live server ──────────────────────────────────────────────────────────────────────────────

export interface Live {
  url: string
  /** POSTs a JSON-RPC message with the session's headers. */
  post (body: unknown, session?: Session | null, headers?: Record<string, string>): Promise<Response>
  /** Opens a GET stream of the session. */
  get (session: Session, headers?: Record<string, string>): Promise<Response>
  /** initialize + notifications/initialized over HTTP. */
  initialize (version?: string, capabilities?: Record<string, unknown>): Promise<Session>
  /** Readers to cancel at the end of the test. */
  track (r: SseReader): SseReader
}

/** Listens on an ephemeral loopback port; readers opened through it are cancelled at teardown. */
export async function listen (t: TestLike, app: FastifyInstance): Promise<Live> {
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `${address}/mcp`
  const readers: SseReader[] = []
  t.teardown(async () => { for (const r of readers) await r.cancel() })
  const live: Live = {
    url,
    async post (body, session, headers) {
      const h: Record<string, string> = { accept: ACCEPT, 'content-type': 'application/json' }
      if (session != null) { h['mcp-session-id'] = session.sid; h['mcp-protocol-version'] = session.version }
      return await fetch(url, { method: 'POST', headers: { ...h, ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) })
    },
    async get (session, headers) {
      return await fetch(url, {
        method: 'GET',
        headers: { accept: 'text/event-stream', 'mcp-session-id': session.sid, 'mcp-protocol-version': session.version, ...headers }
      })
    },
    async initialize (version = LATEST, capabilities = {}) {
      const res = await live.post({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: version, capabilities, clientInfo: { name: 'test', version: '1' } } })
      if (res.status !== 200) throw new Error(`initialize: ${res.status}`)
      const sid = res.headers.get('mcp-session-id')
      if (sid === null) throw new Error('no session id')
      const body = await res.json() as { result: { protocolVersion: string } }
      const session = { sid, version: body.result.protocolVersion }
      const ack = await live.post({ jsonrpc: '2.0', method: 'notifications/initialized' }, session)
      if (ack.status !== 202) throw new Error(`initialized: ${ack.status}`)
      return session
    },
    track (r) { readers.push(r); return r }
  }
  return live
}
