/**
 * What every handler context shares, whichever era carries the request: progress and log messages
 * on the request's answer channel, and the capability checks before anything is asked of the
 * client. How the client is asked differs by era ({@link BaseContext.ask}): on a handshake-era
 * session a request goes out on the POST's stream and the answer comes back in a later POST; on
 * the 2026-07-28 wire the answer is in `inputResponses`, or the run ends with `input_required`.
 *
 * Classes rather than object literals of closures: one context per request is the hot path, and
 * methods on a prototype cost nothing per request.
 */
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import {
  LOG_LEVELS,
  type ElicitResult, type FormElicitParams, type HandleMinter, type LogLevel, type McpContext, type McpPrincipal, type ProgressUpdate,
  type Root, type SamplingParams, type SamplingResult, type UrlElicitParams
} from '../context.js'
import { FST_ERR_MCP_CAPABILITY } from '../errors.js'
import type { RequestId } from '../jsonrpc/errors.js'
import { isPlainObject } from '../jsonrpc/messages.js'
import type { ResponseChannel } from './exchange.js'
import type { RequestAbort } from './request-abort.js'
import type { SessionHandle } from '../sessions/session-handle.js'
import type { StateScope } from '../state/state-scope.js'
import type { UnitOfWork } from '../state/unit-of-work.js'

/** A client capability a request to the client needs: its name, and the `requiredCapabilities` entry. */
export interface MissingCapability {
  name: string
  required: Record<string, unknown>
}

/** The error both eras raise when the client did not declare what a request to it needs. */
export type ClientCapabilityError = InstanceType<typeof FST_ERR_MCP_CAPABILITY> & { requiredCapabilities: Record<string, unknown> }

/** Whether `err` is a {@link ClientCapabilityError}. */
export function isClientCapabilityError (err: unknown): err is ClientCapabilityError {
  return err instanceof FST_ERR_MCP_CAPABILITY && isPlainObject((err as Partial<ClientCapabilityError>).requiredCapabilities)
}

function capabilityError (missing: MissingCapability): ClientCapabilityError {
  const err = new FST_ERR_MCP_CAPABILITY(missing.name) as ClientCapabilityError
  err.requiredCapabilities = missing.required
  return err
}

/** Which declared capability `method` with `params` needs and the client lacks, or `null`. */
export function missingCapability (caps: Record<string, unknown>, method: string, params: Record<string, unknown>): MissingCapability | null {
  if (method === 'elicitation/create') {
    const e = caps.elicitation
    if (params.mode === 'url') return isPlainObject(e) && 'url' in e ? null : { name: 'elicitation.url', required: { elicitation: { url: {} } } }
    // `{}` means form only; a client that declared only URL mode lacks form.
    if (isPlainObject(e) && (Object.keys(e).length === 0 || 'form' in e || !('url' in e))) return null
    return { name: 'elicitation', required: { elicitation: isPlainObject(e) ? { form: {} } : {} } }
  }
  if (method === 'sampling/createMessage') {
    const s = caps.sampling
    if (!isPlainObject(s)) return { name: 'sampling', required: { sampling: {} } }
    if (params.tools !== undefined && !isPlainObject(s.tools)) return { name: 'sampling.tools', required: { sampling: { tools: {} } } }
    return null
  }
  return isPlainObject(caps.roots) ? null : { name: 'roots', required: { roots: {} } }
}

/** @internal What a context is made of. */
export interface ContextParts {
  request: FastifyRequest
  principal: McpPrincipal | null
  requestId: RequestId
  meta: Record<string, unknown> | undefined
  channel: ResponseChannel
  abort: RequestAbort
  /** Makes the `ctx.handles` of a principal (absent: no handle kinds are served). */
  handles?: (principal: McpPrincipal | null, ip?: string, log?: FastifyBaseLogger) => HandleMinter
  /** The request's unit of work: the state handles its calls open join it (absent: none served). */
  unit?: UnitOfWork
  /** The JSON-RPC request this context runs (what the unit's outcome is answered per). */
  member?: object
}

/** `ctx.handles` where no handles are served (a context made outside the engine). */
const NO_HANDLES: HandleMinter = {
  create: async () => { throw new TypeError('state handles are not served here') },
  end: async () => false
}

/** @internal The shared part of a handler's `ctx` (see the module doc). */
export abstract class BaseContext implements McpContext {
  readonly request: FastifyRequest
  readonly principal: McpPrincipal | null
  readonly requestId: RequestId
  readonly meta: Record<string, unknown> | undefined
  /** Set when the request's run is over: nothing more goes out on its stream. */
  finished = false
  /** The handler's data for this request (the 2026-07-28 context restores it from `requestState`). */
  state: Record<string, unknown> = {}
  /** The call's idempotency key (set by `keyed-calls.ts` when it carries one). */
  idempotencyKey: string | undefined = undefined
  protected readonly channel: ResponseChannel
  /** @internal The request's cancellation; its AbortSignal is made on demand (`signal`). */
  readonly abort: RequestAbort
  /** @internal The request's unit of work (`null`: a context made outside a wire). */
  readonly unit: UnitOfWork | null
  /** @internal The JSON-RPC request this context runs. */
  readonly member: object | undefined
  readonly #makeHandles: ContextParts['handles']
  #handles: HandleMinter | undefined
  #handleScope: StateScope | null = null
  #lastProgress = -Infinity

  constructor (parts: ContextParts) {
    this.request = parts.request
    this.principal = parts.principal
    this.requestId = parts.requestId
    this.meta = parts.meta
    this.channel = parts.channel
    this.abort = parts.abort
    this.unit = parts.unit ?? null
    this.member = parts.member
    this.#makeHandles = parts.handles
  }

  abstract readonly session: SessionHandle | null
  abstract readonly clientCapabilities: Record<string, unknown>
  /** The lowest log level the client wants, or `null` for none. */
  protected abstract get minLogLevel (): LogLevel | null
  /** Asks the client (its capability was checked) and resolves its answer. */
  protected abstract ask (key: string, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>>
  abstract closeSSEStream (retryMs?: number): void

  get signal (): AbortSignal { return this.abort.signal }

  get handles (): HandleMinter {
    this.#handles ??= this.#makeHandles?.(this.principal, this.request.ip, this.request.log) ?? NO_HANDLES
    return this.#handles
  }

  get handle (): SessionHandle | null { return this.#handleScope?.handle ?? null }

  /** @internal The scope of the state handle this call works on, or `null`. */
  get handleScope (): StateScope | null { return this.#handleScope }

  /** @internal Sets (or clears) the state handle scope of this call. */
  useHandle (scope: StateScope | null): void { this.#handleScope = scope }

  /**
   * @internal Whether this run will be repeated from the start (a 2026-07-28 run that asked the
   * client for input): what it changed is not kept.
   */
  get repeats (): boolean { return false }

  get #closed (): boolean { return this.finished || this.channel.done || this.abort.aborted }

  async progress (update: ProgressUpdate): Promise<void> {
    const progressToken = this.meta?.progressToken
    if (progressToken === undefined || this.#closed) return
    if (!(update.progress > this.#lastProgress)) {
      this.request.log.debug({ progress: update.progress }, 'progress must increase; dropped')
      return
    }
    this.#lastProgress = update.progress
    this.channel.emit({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken, ...update } })
  }

  async log (level: LogLevel, data: unknown, logger?: string): Promise<void> {
    const min = this.minLogLevel
    if (min === null || this.#closed || LOG_LEVELS.indexOf(level) < LOG_LEVELS.indexOf(min)) return
    const params: Record<string, unknown> = { level, data }
    if (logger !== undefined) params.logger = logger
    this.channel.emit({ jsonrpc: '2.0', method: 'notifications/message', params })
  }

  async elicit (key: string, params: FormElicitParams | UrlElicitParams): Promise<ElicitResult> {
    return await this.#checkedAsk(key, 'elicitation/create', { ...params }) as ElicitResult
  }

  async sample (key: string, params: SamplingParams): Promise<SamplingResult> {
    return await this.#checkedAsk(key, 'sampling/createMessage', params) as SamplingResult
  }

  async roots (key: string): Promise<Root[]> {
    const r = await this.#checkedAsk(key, 'roots/list', {})
    return Array.isArray(r.roots) ? r.roots as Root[] : []
  }

  async #checkedAsk (key: string, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    const missing = missingCapability(this.clientCapabilities, method, params)
    if (missing !== null) throw capabilityError(missing)
    return await this.ask(key, method, params)
  }
}
