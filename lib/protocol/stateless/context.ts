/**
 * The `ctx` of one run of a 2026-07-28 request (a multi-round-trip request runs once per round).
 * `elicit`/`sample`/`roots` answer from `inputResponses` when the client sent the key; otherwise they
 * record the request and end the run after the current turn, so requests made together (in
 * `Promise.all`) are all collected into one `input_required` result with a sealed `requestState`.
 */
import { InputRequiredSignal, type LogLevel } from '../../context.js'
import { ErrorCode, McpError } from '../../jsonrpc/errors.js'
import { isPlainObject, type JsonRpcRequest } from '../../jsonrpc/messages.js'
import { BaseContext, type ContextParts } from '../base-context.js'
import { paramsDigest, type StateSealer } from './request-state.js'

type InputRequest = { method: string, params: Record<string, unknown> }

/** What a valid answer to each kind of input request looks like. */
export const VALID_ANSWER: Record<string, (v: unknown) => boolean> = {
  'elicitation/create': (v) => isPlainObject(v) && typeof v.action === 'string',
  'sampling/createMessage': (v) => isPlainObject(v) && 'content' in v,
  'roots/list': (v) => isPlainObject(v) && Array.isArray(v.roots)
}

/** @internal What a stateless run needs besides the shared parts. */
export interface StatelessRun extends ContextParts {
  msg: JsonRpcRequest
  caps: Record<string, unknown>
  logLevel: LogLevel | undefined
  sealer: StateSealer
}

/** @internal */
export class StatelessContext extends BaseContext {
  readonly session = null
  readonly clientCapabilities: Record<string, unknown>
  // `state` (BaseContext's, no second empty object here): the handler's state, sealed into
  // `requestState` and handed back on the next round (at most 64 KiB sealed).
  readonly #params: Record<string, unknown>
  readonly #method: string
  readonly #responses: Record<string, unknown> | undefined
  readonly #logLevel: LogLevel | undefined
  readonly #sealer: StateSealer
  #asked: Record<string, InputRequest> | null = null
  #digest: string | undefined

  /** @throws {McpError} -32602 for a malformed `inputResponses` or a refused `requestState`. */
  constructor (run: StatelessRun) {
    super(run)
    const params = run.msg.params ?? {}
    this.clientCapabilities = run.caps
    this.#params = params
    this.#method = run.msg.method
    this.#logLevel = run.logLevel
    this.#sealer = run.sealer
    const responses = params.inputResponses
    if (responses !== undefined && !isPlainObject(responses)) {
      throw new McpError(ErrorCode.InvalidParams, 'Invalid params: inputResponses must be an object')
    }
    this.#responses = responses
    if (params.requestState !== undefined) {
      const opened = this.#sealer.open(params.requestState, { p: this.#principalId, m: this.#method, d: this.#paramsDigest() })
      if (!opened.ok) {
        if (opened.likelyCause === undefined) run.request.log.warn({ reason: opened.reason, method: this.#method }, 'requestState refused')
        else run.request.log.warn({ reason: opened.reason, method: this.#method, likelyCause: opened.likelyCause }, `requestState refused: likely cause: ${opened.likelyCause}`)
        throw new McpError(ErrorCode.InvalidParams, `Invalid params: ${opened.reason}`)
      }
      this.state = opened.payload.s
    }
  }

  get #principalId (): string | null { return this.principal?.id ?? null }

  /** SHA-256 over the canonical params: only computed when a state is involved. */
  #paramsDigest (): string {
    this.#digest ??= paramsDigest(this.#params)
    return this.#digest
  }

  /** Only with a per-request logLevel. */
  protected get minLogLevel (): LogLevel | null { return this.#logLevel ?? null }

  closeSSEStream (): void { /* no resumable streams on this revision */ }

  protected async ask (key: string, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (typeof key !== 'string' || key === '') throw new TypeError('an input request needs a non-empty key')
    const answer = this.#responses?.[key]
    if (answer !== undefined && VALID_ANSWER[method](answer)) return answer as Record<string, unknown>
    this.#asked ??= {}
    // An elicitation id is for the handshake era's URL mode; this revision's input requests have none.
    const { elicitationId: _drop, ...rest } = params
    this.#asked[key] = { method, params: method === 'elicitation/create' ? rest : params }
    // End the run after this turn: requests made in the same turn are collected first.
    return await new Promise((_resolve, reject) => setImmediate(() => reject(new InputRequiredSignal())))
  }

  /** @internal Whether the run asked the client for input. */
  get asked (): boolean { return this.#asked !== null }

  /** A run that asked for input is repeated with the answers: what it changed is not kept. */
  override get repeats (): boolean { return this.asked }

  /** @internal The `input_required` result of a run that asked for input. */
  inputRequired (): Record<string, unknown> {
    return {
      resultType: 'input_required',
      inputRequests: this.#asked ?? {},
      requestState: this.#sealer.seal({ p: this.#principalId, m: this.#method, d: this.#paramsDigest(), s: this.state })
    }
  }
}
