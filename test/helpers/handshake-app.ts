/**
 * Shared helpers of the plugin tests: `build()` an app with the plugin and a few tools, speak the
 * legacy wire through `app.inject()` (initialize, rpc) or a live server (fetch + an SSE reader).
 */
import Fastify, { type FastifyInstance, type FastifyServerOptions, type LightMyRequestResponse } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { type McpDecorator, type McpPluginOptions } from '../../lib/index.js'
import { getStream, initialize as initializeOver, send, serve } from './http-client.js'
import type { SseReader } from './sse.js'
import { finalOf, headers, initializeBody, newId, type Session } from './wire.js'

/** The `t` of a tap test (only what the helpers need). */
export interface TestLike {
  teardown (fn: () => unknown): void
}

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

/** Adds nothing: for a `build()` whose test registers its own definitions, or none. */
export function noTools (): void {}

/**
 * THE test app: a Fastify app (`fastify`: its options; no logger unless given) with the plugin
 * registered with `opts` and definitions added by `setup` (default: {@link defaultTools}). Closed at
 * the end of the test. Use it rather than a `build()` of a test file's own.
 */
export async function build (t: TestLike, opts: McpPluginOptions = {}, setup: (m: McpDecorator, app: FastifyInstance) => void = defaultTools,
  fastify: FastifyServerOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({ logger: false, ...fastify })
  t.teardown(() => app.close())
  await app.register(mcp, opts)
  setup(app.mcp, app)
  return app
}

/** The error registering the plugin with `opts` fails `app.ready()` with, or `null` when the app starts. */
export async function registerError (opts: unknown): Promise<{ code?: string, message?: string } | null> {
  const app = Fastify({ logger: false })
  try {
    await app.register(mcp, opts as McpPluginOptions)
    await app.ready()
    return null
  } catch (err) {
    return err as { code?: string, message?: string }
  } finally {
    await app.close().catch(() => {})
  }
}

export interface RpcOptions {
  session?: Session | null
  headers?: Record<string, string>
  path?: string
}

/** POSTs a raw body (string or JSON value) through inject. */
export async function post (app: FastifyInstance, body: unknown, o: RpcOptions = {}): Promise<LightMyRequestResponse> {
  return await app.inject({
    method: 'POST',
    url: o.path ?? '/mcp',
    headers: headers(o.session, o.headers),
    payload: typeof body === 'string' ? body : JSON.stringify(body)
  })
}

/** `initialize` (+ `notifications/initialized`) and the session it opened. */
export async function initialize (app: FastifyInstance, o: {
  version?: string,
  capabilities?: Record<string, unknown>,
  headers?: Record<string, string>
} = {}): Promise<Session & { result: Record<string, unknown> }> {
  const res = await post(app, initializeBody({ version: o.version, capabilities: o.capabilities, id: 0 }), { headers: o.headers })
  if (res.statusCode !== 200) throw new Error(`initialize failed: ${res.statusCode} ${res.body}`)
  const sid = res.headers['mcp-session-id']
  if (typeof sid !== 'string') throw new Error('initialize returned no session id')
  const body = res.json() as { result: Record<string, unknown> }
  const session = { sid, version: body.result.protocolVersion as string }
  const ack = await post(app, { jsonrpc: '2.0', method: 'notifications/initialized' }, { session, headers: o.headers })
  if (ack.statusCode !== 202) throw new Error(`notifications/initialized failed: ${ack.statusCode} ${ack.body}`)
  return { ...session, result: body.result }
}

/** Sends one request on a session; returns the HTTP response. */
export async function request (app: FastifyInstance, session: Session | null, method: string, params?: Record<string, unknown>,
  o: RpcOptions & { id?: string | number } = {}): Promise<LightMyRequestResponse> {
  const msg: Record<string, unknown> = { jsonrpc: '2.0', id: o.id ?? newId(), method }
  if (params !== undefined) msg.params = params
  return await post(app, msg, { ...o, session })
}

/** Sends one request and returns the parsed JSON-RPC response (the last message when SSE). */
export async function call (app: FastifyInstance, session: Session | null, method: string, params?: Record<string, unknown>,
  o: RpcOptions & { id?: string | number } = {}): Promise<Record<string, any>> {
  return finalOf(await request(app, session, method, params, o))
}

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
  const { url, track } = await serve(t, app)
  return {
    url,
    post: async (body, session, headers) => await send(url, body, session, { headers }),
    get: async (session, headers) => await getStream(url, session, { headers }),
    initialize: async (version, capabilities) => await initializeOver(url, { version, capabilities }),
    track
  }
}
