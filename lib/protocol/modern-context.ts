/**
 * The `ctx` of one run of a 2026-07-28 request (a multi-round-trip request runs once per round).
 * `elicit`/`sample`/`roots` answer from `inputResponses` when the client sent the key; otherwise they
 * record the request and end the run after the current turn, so requests made together (in
 * `Promise.all`) are all collected into one `input_required` result with a sealed `requestState`.
 *
 * A class rather than an object literal of closures: one context per request is the hot path, and
 * methods on a prototype cost nothing per request.
 */
import type { FastifyRequest } from 'fastify'
import {
  InputRequiredSignal, LOG_LEVELS,
  type ElicitResult, type FormElicitParams, type LogLevel, type McpContext, type McpPrincipal, type ProgressUpdate,
  type Root, type SamplingParams, type SamplingResult, type UrlElicitParams
} from '../context.js'
import type { ResponseChannel } from '../http/response.js'
import { ErrorCode, isPlainObject, McpError, type JsonRpcRequest, type RequestId } from '../jsonrpc/messages.js'
import type { RequestAbort } from './request-abort.js'
import { paramsDigest, type StateSealer } from './request-state.js'

type InputRequest = { method: string, params: Record<string, unknown> }

function requireCap (name: string, present: boolean, needed: Record<string, unknown> = {}): void {
  if (!present) {
    throw new McpError(ErrorCode.MissingRequiredClientCapability, `Missing required client capability: ${name}`,
      { requiredCapabilities: { [name]: needed } }, 400)
  }
}

const isElicitAnswer = (v: unknown): boolean => isPlainObject(v) && typeof v.action === 'string'
const isSampleAnswer = (v: unknown): boolean => isPlainObject(v) && 'content' in v
const isRootsAnswer = (v: unknown): boolean => isPlainObject(v) && Array.isArray(v.roots)

/** @internal What a modern run needs besides the request itself. */
export interface ModernRun {
  request: FastifyRequest
  msg: JsonRpcRequest
  caps: Record<string, unknown>
  logLevel: LogLevel | undefined
  principal: McpPrincipal | null
  channel: ResponseChannel
  abort: RequestAbort
  sealer: StateSealer
}

/** @internal */
export class ModernContext implements McpContext {
  readonly request: FastifyRequest
  readonly session = null
  readonly principal: McpPrincipal | null
  readonly requestId: RequestId
  readonly meta: Record<string, unknown>
  readonly clientCapabilities: Record<string, unknown>
  /** The handler's state, sealed into `requestState` and handed back on the next round (at most 64 KiB sealed). */
  state: Record<string, unknown> = {}
  readonly #params: Record<string, unknown>
  readonly #method: string
  readonly #responses: Record<string, unknown> | undefined
  readonly #logLevel: LogLevel | undefined
  readonly #channel: ResponseChannel
  readonly #abort: RequestAbort
  readonly #sealer: StateSealer
  #asked: Record<string, InputRequest> | null = null
  #lastProgress = -Infinity
  #digest: string | undefined

  /** @throws {McpError} -32602 for a malformed `inputResponses` or a refused `requestState`. */
  constructor (run: ModernRun) {
    const params = run.msg.params ?? {}
    this.request = run.request
    this.principal = run.principal
    this.requestId = run.msg.id
    this.meta = params._meta as Record<string, unknown>
    this.clientCapabilities = run.caps
    this.#params = params
    this.#method = run.msg.method
    this.#logLevel = run.logLevel
    this.#channel = run.channel
    this.#abort = run.abort
    this.#sealer = run.sealer
    const responses = params.inputResponses
    if (responses !== undefined && !isPlainObject(responses)) {
      throw new McpError(ErrorCode.InvalidParams, 'Invalid params: inputResponses must be an object')
    }
    this.#responses = responses
    if (params.requestState !== undefined) {
      const opened = this.#sealer.open(params.requestState, { p: this.#principalId, m: this.#method, d: this.#paramsDigest() })
      if (!opened.ok) {
        run.request.log.warn({ reason: opened.reason, method: this.#method }, 'requestState refused')
        throw new McpError(ErrorCode.InvalidParams, `Invalid params: ${opened.reason}`)
      }
      this.state = opened.payload.s
    }
  }

  get signal (): AbortSignal { return this.#abort.signal }

  get #principalId (): string | null { return this.principal?.id ?? null }

  /** SHA-256 over the canonical params: only computed when a state is involved. */
  #paramsDigest (): string {
    this.#digest ??= paramsDigest(this.#params)
    return this.#digest
  }

  get #closed (): boolean { return this.#channel.done || this.#abort.aborted }

  async progress (update: ProgressUpdate): Promise<void> {
    const progressToken = this.meta.progressToken
    if (progressToken === undefined || this.#closed) return
    if (!(update.progress > this.#lastProgress)) return
    this.#lastProgress = update.progress
    this.#channel.emit({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken, ...update } })
  }

  async log (level: LogLevel, data: unknown, logger?: string): Promise<void> {
    // Only with a per-request logLevel, and only at or above it.
    const min = this.#logLevel
    if (min === undefined || this.#closed) return
    if (LOG_LEVELS.indexOf(level) < LOG_LEVELS.indexOf(min)) return
    const params: Record<string, unknown> = { level, data }
    if (logger !== undefined) params.logger = logger
    this.#channel.emit({ jsonrpc: '2.0', method: 'notifications/message', params })
  }

  async elicit (key: string, p: FormElicitParams | UrlElicitParams): Promise<ElicitResult> {
    const e = this.clientCapabilities.elicitation
    const mode = p.mode === 'url' ? 'url' : 'form'
    const declared = isPlainObject(e) && (mode === 'url' ? 'url' in e : (Object.keys(e).length === 0 || 'form' in e || !('url' in e)))
    // Name the missing mode when the client declared elicitation without it.
    requireCap('elicitation', declared, mode === 'url' ? { url: {} } : isPlainObject(e) ? { form: {} } : {})
    const { elicitationId: _drop, ...rest } = p as unknown as Record<string, unknown>
    return await this.#input(key, 'elicitation/create', rest, isElicitAnswer)
  }

  async sample (key: string, p: SamplingParams): Promise<SamplingResult> {
    requireCap('sampling', isPlainObject(this.clientCapabilities.sampling))
    return await this.#input(key, 'sampling/createMessage', p, isSampleAnswer)
  }

  async roots (key: string): Promise<Root[]> {
    requireCap('roots', isPlainObject(this.clientCapabilities.roots))
    const r = await this.#input<{ roots: Root[] }>(key, 'roots/list', {}, isRootsAnswer)
    return r.roots
  }

  closeSSEStream (): void { /* no resumable streams on this revision */ }

  async #input<T> (key: string, method: string, params: Record<string, unknown>, valid: (v: unknown) => boolean): Promise<T> {
    if (typeof key !== 'string' || key === '') throw new TypeError('an input request needs a non-empty key')
    const answer = this.#responses?.[key]
    if (answer !== undefined && valid(answer)) return answer as T
    this.#asked ??= {}
    this.#asked[key] = { method, params }
    // End the run after this turn: requests made in the same turn are collected first.
    return await new Promise<T>((_resolve, reject) => setImmediate(() => reject(new InputRequiredSignal())))
  }

  /** @internal Whether the run asked the client for input. */
  get asked (): boolean { return this.#asked !== null }

  /** @internal The `input_required` result of a run that asked for input. */
  inputRequired (): Record<string, unknown> {
    return {
      resultType: 'input_required',
      inputRequests: this.#asked ?? {},
      requestState: this.#sealer.seal({ p: this.#principalId, m: this.#method, d: this.#paramsDigest(), s: this.state })
    }
  }
}
