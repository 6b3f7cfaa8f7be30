/**
 * An MCP client that talks to a Fastify app in-process, through `app.inject()`: no socket, no
 * port, so an app's tools can be unit-tested with the app's own hooks, auth and sessions.
 *
 *   const client = injectClient(app, { elicit: async () => ({ action: 'accept', content: { name: 'Ada' } }) })
 *   const result = await client.callTool('ask_name')
 *
 * Both protocol eras, chosen by `protocolVersion`:
 * - **handshake era** (default `2025-11-25`): `initialize` opens a session (`ctx.session` works);
 *   a request to the client (elicitation, sampling, roots) arrives on the POST's SSE stream and is
 *   answered by a separate POST, as over the network. `app.inject()` normally resolves only once
 *   the whole response is written, which would wait forever for the answer; with light-my-request's
 *   `payloadAsStream` it resolves at the headers, and the stream is read as it is written.
 * - **`2026-07-28`** (stateless): an `input_required` result is fulfilled through the same
 *   handlers and the request retried with `inputResponses` and `requestState` (this round's
 *   answers only, at most `maxRounds` rounds), as the official SDK's client does.
 *
 * A JSON-RPC error answer rejects with an {@link McpError} carrying the code, the data and the
 * HTTP status; a tool failure is a result with `isError: true`, as the model would see it.
 */
import type { FastifyInstance } from 'fastify'
import type { FormElicitParams, SamplingParams, UrlElicitParams } from '../context.js'
import { ErrorCode, McpError, type RequestId } from '../jsonrpc/errors.js'
import { META_CAPS, META_CLIENT, META_LOG, META_VERSION, STATELESS_VERSIONS } from '../protocol/stateless/meta.js'
import { answerError, readAnswer, type Answer } from './inject-answer.js'
import type { InjectClient, InjectClientOptions, InjectNotification, InjectRequestOptions, InjectToolResult } from './inject-types.js'

export type * from './inject-types.js'

/** Where each registration of the plugin serves its endpoint, by its `app.mcp`. */
const endpoints = new WeakMap<object, string>()

/** @internal Records where the plugin whose decorator is `mcp` serves (its POST route's URL). */
export function recordEndpoint (mcp: object, url: string): void {
  if (!endpoints.has(mcp)) endpoints.set(mcp, url)
}

/** A client that speaks MCP to `app` in-process (see the module doc). */
export function injectClient (app: FastifyInstance, options: InjectClientOptions = {}): InjectClient {
  return new Client(app, options)
}

const DEFAULT_VERSION = '2025-11-25'
const ACCEPT = 'application/json, text/event-stream'
/** Header values that may go as they are (visible ASCII, no surrounding spaces). */
const PLAIN_HEADER = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/

function headerValue (value: string): string {
  return PLAIN_HEADER.test(value) ? value : `=?base64?${Buffer.from(value, 'utf8').toString('base64')}?=`
}

class Client implements InjectClient {
  readonly #app: FastifyInstance
  readonly #o: InjectClientOptions
  readonly #stateless: boolean
  readonly notifications: InjectNotification[] = []
  #version: string
  #sessionId: string | null = null
  #initialized: Promise<Record<string, any>> | null = null
  #nextId = 1
  /** Input schemas of tools (for the `Mcp-Param-*` headers of 2026-07-28 calls). */
  #toolSchemas: Map<string, Record<string, any>> | null = null

  constructor (app: FastifyInstance, options: InjectClientOptions) {
    this.#app = app
    this.#o = options
    this.#version = options.protocolVersion ?? DEFAULT_VERSION
    this.#stateless = (STATELESS_VERSIONS as readonly string[]).includes(this.#version)
  }

  get sessionId (): string | null { return this.#sessionId }
  get protocolVersion (): string { return this.#version }

  get #path (): string {
    if (this.#o.path !== undefined) return this.#o.path
    const url = this.#endpoint()
    if (url === undefined) {
      throw new Error('injectClient: cannot tell where the MCP endpoint is (is the app ready, and the plugin registered on it?); pass `path`')
    }
    return url
  }

  #endpoint (): string | undefined {
    const mcp = (this.#app as { mcp?: object }).mcp
    return mcp === undefined ? undefined : endpoints.get(mcp)
  }

  get #capabilities (): Record<string, unknown> {
    if (this.#o.capabilities !== undefined) return this.#o.capabilities
    const caps: Record<string, unknown> = {}
    if (this.#o.elicit !== undefined) caps.elicitation = { form: {}, url: {} }
    if (this.#o.sample !== undefined) caps.sampling = {}
    if (this.#o.roots !== undefined) caps.roots = {}
    return caps
  }

  get #clientInfo (): Record<string, unknown> { return this.#o.clientInfo ?? { name: 'inject-client', version: '1.0.0' } }

  async initialize (): Promise<Record<string, any>> {
    this.#initialized ??= this.#start()
    try {
      return await this.#initialized
    } catch (err) {
      this.#initialized = null // a failed start may be retried (e.g. with other headers)
      throw err
    }
  }

  async #start (): Promise<Record<string, any>> {
    // The endpoint is known once the plugin loaded; inject() itself waits for the app otherwise.
    if (this.#o.path === undefined && this.#endpoint() === undefined) await this.#app.ready()
    return this.#stateless ? await this.#discover() : await this.#handshake()
  }

  async #handshake (): Promise<Record<string, any>> {
    const id = this.#id()
    const body = {
      jsonrpc: '2.0',
      id,
      method: 'initialize',
      params: { protocolVersion: this.#version, capabilities: this.#capabilities, clientInfo: this.#clientInfo }
    }
    const answer = await this.#post(body, this.#headers())
    const sid = answer.headers['mcp-session-id']
    const result = await this.#final(answer, id, 'initialize')
    if (typeof sid !== 'string') throw new Error('injectClient: initialize returned no Mcp-Session-Id')
    this.#sessionId = sid
    this.#version = String(result.protocolVersion)
    await this.#notify('notifications/initialized')
    if (this.#o.logLevel !== undefined) await this.#send('logging/setLevel', { level: this.#o.logLevel })
    return result
  }

  async #discover (): Promise<Record<string, any>> {
    return await this.#send('server/discover', {})
  }

  async request (method: string, params: Record<string, unknown> = {}, options: InjectRequestOptions = {}): Promise<Record<string, any>> {
    await this.initialize()
    return await this.#send(method, params, options)
  }

  async notify (method: string, params?: Record<string, unknown>): Promise<void> {
    await this.initialize()
    await this.#notify(method, params)
  }

  async callTool (name: string, args: Record<string, unknown> = {}, options?: InjectRequestOptions): Promise<InjectToolResult> {
    const params: Record<string, unknown> = { name, arguments: args }
    if (options?.idempotencyKey !== undefined) params.idempotencyKey = options.idempotencyKey
    return await this.request('tools/call', params, options) as InjectToolResult
  }

  async listTools (): Promise<{ tools: Array<Record<string, any>> }> {
    const tools: Array<Record<string, any>> = []
    let cursor: string | undefined
    do {
      const page = await this.request('tools/list', cursor === undefined ? {} : { cursor })
      tools.push(...(page.tools as Array<Record<string, any>>))
      cursor = page.nextCursor
    } while (cursor !== undefined)
    return { tools }
  }

  async readResource (uri: string, options?: InjectRequestOptions): Promise<Record<string, any>> {
    return await this.request('resources/read', { uri }, options)
  }

  async getPrompt (name: string, args: Record<string, string> = {}, options?: InjectRequestOptions): Promise<Record<string, any>> {
    return await this.request('prompts/get', { name, arguments: args }, options)
  }

  async close (): Promise<void> {
    if (this.#sessionId === null) return
    const res = await this.#app.inject({ method: 'DELETE', url: this.#path, headers: this.#headers() })
    this.#sessionId = null
    this.#initialized = null
    if (res.statusCode >= 400 && res.statusCode !== 404) throw answerError(res.statusCode, res.body)
  }

  #id (): number { return this.#nextId++ }

  /** The headers of every request: Accept, Content-Type, the session's, the caller's. */
  #headers (extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { accept: ACCEPT, 'content-type': 'application/json' }
    if (this.#sessionId !== null) {
      h['mcp-session-id'] = this.#sessionId
      h['mcp-protocol-version'] = this.#version
    }
    return { ...h, ...this.#o.headers, ...extra }
  }

  async #notify (method: string, params?: Record<string, unknown>): Promise<void> {
    const body: Record<string, unknown> = { jsonrpc: '2.0', method }
    const p = this.#stateless ? { ...params, _meta: this.#meta() } : params
    if (p !== undefined) body.params = p
    const headers = this.#stateless ? this.#statelessHeaders(method, p ?? {}) : this.#headers()
    const res = await this.#app.inject({ method: 'POST', url: this.#path, headers, payload: JSON.stringify(body) })
    if (res.statusCode !== 202) throw answerError(res.statusCode, res.body)
  }

  /** Sends one request (the era's way) and resolves its result. */
  async #send (method: string, params: Record<string, unknown>, options: InjectRequestOptions = {}): Promise<Record<string, any>> {
    if (!this.#stateless) {
      const id = this.#id()
      const p = options.progressToken === undefined ? params : { ...params, _meta: { ...(params._meta as object), progressToken: options.progressToken } }
      const answer = await this.#post({ jsonrpc: '2.0', id, method, params: p }, this.#headers(options.headers))
      return await this.#final(answer, id, method)
    }
    const maxRounds = this.#o.maxRounds ?? 10
    let retry: Record<string, unknown> = {}
    for (let round = 0; ; round++) {
      const id = this.#id()
      const meta: Record<string, unknown> = { ...(params._meta as object), ...this.#meta() }
      if (options.progressToken !== undefined) meta.progressToken = options.progressToken
      const p = { ...params, ...retry, _meta: meta }
      const headers = { ...this.#statelessHeaders(method, p), ...(method === 'tools/call' ? await this.#paramHeaders(p) : {}), ...options.headers }
      const result = await this.#final(await this.#post({ jsonrpc: '2.0', id, method, params: p }, headers), id, method)
      if (result.resultType !== 'input_required') return result
      if (round + 1 >= maxRounds) throw new Error(`injectClient: ${method} still needed input after ${maxRounds} rounds`)
      const responses: Record<string, unknown> = {}
      for (const [key, req] of Object.entries((result.inputRequests ?? {}) as Record<string, { method: string, params?: Record<string, unknown> }>)) {
        responses[key] = await this.#answer(req.method, req.params ?? {})
      }
      retry = {}
      if (Object.keys(responses).length > 0) retry.inputResponses = responses
      if (result.requestState !== undefined) retry.requestState = result.requestState
    }
  }

  /** The `_meta` envelope of a 2026-07-28 request. */
  #meta (): Record<string, unknown> {
    const meta: Record<string, unknown> = { [META_VERSION]: this.#version, [META_CAPS]: this.#capabilities, [META_CLIENT]: this.#clientInfo }
    if (this.#o.logLevel !== undefined) meta[META_LOG] = this.#o.logLevel
    return meta
  }

  /** The headers a 2026-07-28 request mirrors from its body. */
  #statelessHeaders (method: string, params: Record<string, unknown>): Record<string, string> {
    const h = this.#headers({ 'mcp-protocol-version': this.#version, 'mcp-method': method })
    const name = method === 'resources/read' ? params.uri : (method === 'tools/call' || method === 'prompts/get') ? params.name : method.startsWith('tasks/') ? params.taskId : undefined
    if (typeof name === 'string') h['mcp-name'] = headerValue(name)
    return h
  }

  /** `Mcp-Param-*` headers for the tool's parameters annotated `x-mcp-header`, as a client reads them from `tools/list`. */
  async #paramHeaders (params: Record<string, unknown>): Promise<Record<string, string>> {
    if (this.#toolSchemas === null) {
      this.#toolSchemas = new Map()
      const { tools } = await this.listTools()
      for (const t of tools) this.#toolSchemas.set(t.name, t.inputSchema ?? {})
    }
    const schema = this.#toolSchemas.get(String(params.name))
    const props = (schema?.properties ?? {}) as Record<string, Record<string, unknown>>
    const args = (params.arguments ?? {}) as Record<string, unknown>
    const h: Record<string, string> = {}
    for (const [prop, s] of Object.entries(props)) {
      const name = s?.['x-mcp-header']
      const value = args[prop]
      if (typeof name !== 'string' || value === undefined || value === null) continue
      h[`mcp-param-${name.toLowerCase()}`] = headerValue(typeof value === 'string' ? value : JSON.stringify(value))
    }
    return h
  }

  /** POSTs a message; the answer is read as it is written. */
  async #post (body: Record<string, unknown>, headers: Record<string, string>): Promise<Answer> {
    const res = await this.#app.inject({ method: 'POST', url: this.#path, headers, payload: JSON.stringify(body), payloadAsStream: true })
    return readAnswer(res.statusCode, res.headers as Record<string, unknown>, res.stream())
  }

  /**
   * Reads an answer up to the response to `id`: notifications are kept, requests to the client
   * are answered (a separate POST), and a stream the server closed early is resumed with GET +
   * `Last-Event-ID`. Resolves the result; rejects with an `McpError` for an error.
   */
  async #final (answer: Answer, id: RequestId, method: string): Promise<Record<string, any>> {
    for (let resumes = 0; ; resumes++) {
      if (!answer.sse && answer.status >= 300) throw answerError(answer.status, await answer.text())
      for await (const msg of answer.messages) {
        if ('id' in msg && (msg.id === id || msg.id === null) && !('method' in msg)) {
          if (msg.error !== undefined) throw new McpError(msg.error.code, msg.error.message, msg.error.data, answer.status)
          if (msg.id === id) return msg.result
        }
        if (typeof msg.method === 'string' && 'id' in msg) await this.#serverRequest(msg)
        else if (typeof msg.method === 'string') this.#notification(msg as InjectNotification)
      }
      const last = answer.lastEventId()
      if (this.#stateless || this.#sessionId === null || last === undefined || resumes >= 100) break
      const res = await this.#app.inject({
        method: 'GET',
        url: this.#path,
        headers: { ...this.#headers({ 'last-event-id': last }), accept: 'text/event-stream' },
        payloadAsStream: true
      })
      answer = readAnswer(res.statusCode, res.headers as Record<string, unknown>, res.stream())
    }
    throw new Error(`injectClient: the answer to ${method} ended without a response`)
  }

  #notification (n: InjectNotification): void {
    const copy = { method: n.method, params: n.params ?? {} }
    this.notifications.push(copy)
    this.#o.onNotification?.(copy)
  }

  /** Answers a request of the server (handshake era) with a POST of its own. */
  async #serverRequest (msg: Record<string, any>): Promise<void> {
    let reply: Record<string, unknown>
    try {
      reply = { jsonrpc: '2.0', id: msg.id, result: await this.#answer(msg.method, msg.params ?? {}) }
    } catch (err) {
      const code = err instanceof McpError ? err.code : ErrorCode.InternalError
      reply = { jsonrpc: '2.0', id: msg.id, error: { code, message: err instanceof Error ? err.message : String(err) } }
    }
    const res = await this.#app.inject({ method: 'POST', url: this.#path, headers: this.#headers(), payload: JSON.stringify(reply) })
    if (res.statusCode !== 202) throw answerError(res.statusCode, res.body)
  }

  /** What the handlers answer to a request of the server. */
  async #answer (method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    const o = this.#o
    switch (method) {
      case 'elicitation/create':
        if (o.elicit !== undefined) return { ...await o.elicit(params as unknown as FormElicitParams | UrlElicitParams) }
        break
      case 'sampling/createMessage':
        if (o.sample !== undefined) return { ...await o.sample(params as unknown as SamplingParams) }
        break
      case 'roots/list':
        if (o.roots !== undefined) return { roots: typeof o.roots === 'function' ? await o.roots() : o.roots }
        break
      case 'ping':
        return {}
    }
    throw new McpError(ErrorCode.MethodNotFound, `injectClient: no handler for ${method}`)
  }
}
