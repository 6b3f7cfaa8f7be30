/**
 * The `ctx` of one handshake-era request. Requests to the client (`elicit`, `sample`, `roots`) go
 * out on the POST's stream and their answers come back in later POSTs, through the wire's
 * {@link ClientRequester}; progress and log messages go out on the POST's stream.
 *
 * A class rather than an object literal of closures: one context per request is the hot path, and
 * methods on a prototype cost nothing per request.
 */
import { randomBytes } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import {
  LOG_LEVELS,
  type ElicitResult, type FormElicitParams, type LogLevel, type McpContext, type McpPrincipal, type ProgressUpdate,
  type Root, type SamplingParams, type SamplingResult, type UrlElicitParams
} from '../context.js'
import { FST_ERR_MCP_CAPABILITY } from '../errors.js'
import type { ResponseChannel } from '../http/response.js'
import type { JsonRpcRequest, RequestId } from '../jsonrpc/messages.js'
import type { SessionLease } from '../locks/session-lock.js'
import { K, type SessionHandle } from '../sessions/session-handle.js'
import type { RequestAbort } from './request-abort.js'

/** @internal A session opened for one request: handle + lease (when locked). */
export interface OpenSession {
  handle: SessionHandle
  lease: SessionLease | null
  /** Set once the request's changes were written back (or given up). */
  closed: boolean
  /** Aborted when a lease held for this request is lost, or the client went away for good. */
  lost: RequestAbort
}

/** @internal What the context needs from the wire to ask the client something. */
export interface ClientRequester {
  /** Sends a request to the client on the POST's stream and waits for the answer. */
  clientRequest (request: FastifyRequest, session: OpenSession, channel: ResponseChannel, method: string,
    params: Record<string, unknown>, abort: RequestAbort): Promise<Record<string, unknown>>
  /** Default `retry` of `closeSSEStream()`. */
  readonly retryInterval: number
}

export function levelIndex (level: unknown): number {
  return LOG_LEVELS.indexOf(level as LogLevel)
}

/** Whether the client declared the elicitation mode. `{}` means form only. */
function elicitationAllows (caps: Record<string, unknown>, mode: 'form' | 'url'): boolean {
  const e = caps.elicitation
  if (typeof e !== 'object' || e === null) return false
  const keys = Object.keys(e)
  if (mode === 'form') return keys.length === 0 || 'form' in e || !('url' in e)
  return 'url' in e
}

/** @internal */
export class LegacyContext implements McpContext {
  readonly request: FastifyRequest
  readonly principal: McpPrincipal | null
  readonly requestId: RequestId
  readonly meta: Record<string, unknown> | undefined
  /** Set when the request's run is over: nothing more goes out on its stream. */
  finished = false
  readonly #wire: ClientRequester
  readonly #session: OpenSession
  readonly #channel: ResponseChannel
  readonly #abort: RequestAbort
  #lastProgress = -Infinity

  constructor (wire: ClientRequester, request: FastifyRequest, session: OpenSession, channel: ResponseChannel, msg: JsonRpcRequest,
    principal: McpPrincipal | null, abort: RequestAbort) {
    this.#wire = wire
    this.request = request
    this.#session = session
    this.#channel = channel
    this.principal = principal
    this.requestId = msg.id
    this.meta = msg.params?._meta as Record<string, unknown> | undefined
    this.#abort = abort
  }

  get signal (): AbortSignal { return this.#abort.signal }
  get session (): SessionHandle { return this.#session.handle }
  get clientCapabilities (): Record<string, unknown> {
    return this.#session.handle.getProtocol<Record<string, unknown>>(K.capabilities) ?? {}
  }

  get #closed (): boolean { return this.finished || this.#abort.aborted }

  async progress (update: ProgressUpdate): Promise<void> {
    const progressToken = this.meta?.progressToken
    if (progressToken === undefined || this.#closed) return
    if (!(update.progress > this.#lastProgress)) {
      this.request.log.debug({ progress: update.progress }, 'progress must increase; dropped')
      return
    }
    this.#lastProgress = update.progress
    this.#channel.emit({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken, ...update } })
  }

  async log (level: LogLevel, data: unknown, logger?: string): Promise<void> {
    if (this.#closed) return
    const min = this.#session.handle.getProtocol<string>(K.logLevel)
    if (levelIndex(level) < (min === undefined ? 0 : levelIndex(min))) return
    const params: Record<string, unknown> = { level, data }
    if (logger !== undefined) params.logger = logger
    this.#channel.emit({ jsonrpc: '2.0', method: 'notifications/message', params })
  }

  async elicit (_key: string, params: FormElicitParams | UrlElicitParams): Promise<ElicitResult> {
    const mode = params.mode === 'url' ? 'url' : 'form'
    if (!elicitationAllows(this.clientCapabilities, mode)) throw new FST_ERR_MCP_CAPABILITY(mode === 'url' ? 'elicitation.url' : 'elicitation')
    const p: Record<string, unknown> = { ...params }
    if (mode === 'url' && p.elicitationId === undefined) p.elicitationId = randomBytes(12).toString('base64url')
    return await this.#ask('elicitation/create', p) as ElicitResult
  }

  async sample (_key: string, params: SamplingParams): Promise<SamplingResult> {
    const caps = this.clientCapabilities
    if (typeof caps.sampling !== 'object' || caps.sampling === null) throw new FST_ERR_MCP_CAPABILITY('sampling')
    if (params.tools !== undefined && typeof (caps.sampling as Record<string, unknown>).tools !== 'object') throw new FST_ERR_MCP_CAPABILITY('sampling.tools')
    return await this.#ask('sampling/createMessage', params) as SamplingResult
  }

  async roots (_key: string): Promise<Root[]> {
    const caps = this.clientCapabilities
    if (typeof caps.roots !== 'object' || caps.roots === null) throw new FST_ERR_MCP_CAPABILITY('roots')
    const r = await this.#ask('roots/list', {})
    return Array.isArray(r.roots) ? r.roots as Root[] : []
  }

  closeSSEStream (retryMs?: number): void {
    this.#channel.disconnect(retryMs ?? this.#wire.retryInterval)
  }

  async #ask (method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    return await this.#wire.clientRequest(this.request, this.#session, this.#channel, method, params, this.#abort)
  }
}
