/**
 * The stateless 2026-07-28 wire. Every POST carries its protocol version and client capabilities
 * in `params._meta`; nothing is inferred from earlier requests. Requests to the client travel as
 * `input_required` results with a sealed `requestState`; list changes travel on
 * `subscriptions/listen` streams (`listen.ts`). The envelope checks are in `headers.ts`.
 */
import type { FastifyBaseLogger } from 'fastify'
import { InputRequiredSignal, LOG_LEVELS, type LogLevel, type McpPrincipal } from '../../context.js'
import type { CacheHint } from '../../features/cache-hints.js'
import { METHODS, methodNotFound, needCapability, type CacheKind, type MethodEntry } from '../../features/method-table.js'
import type { Registry } from '../../features/registry.js'
import { isVisible } from '../../auth/access.js'
import { ErrorCode, McpError, errorReply, type RequestId } from '../../jsonrpc/errors.js'
import type { ToolLimiter } from '../../limits/limiter.js'
import { metaProblem, presetMeta, resultResponse, type JsonRpcRequest, type ParsedBody } from '../../jsonrpc/messages.js'
import type { ResolvedOptions } from '../../options.js'
import { isClientCapabilityError } from '../base-context.js'
import { NULL_EVENT_LOG, type ChannelOptions, type Exchange, type ResponseChannel } from '../exchange.js'
import { ListenStreams } from './listen.js'
import { META_CAPS, META_LOG, META_SERVER, STATELESS_VERSIONS } from './meta.js'
import { checkNotificationEnvelope, checkRequestEnvelope, refuseUnservable } from './headers.js'
import type { KeyedRunner } from '../../features/keyed-call.js'
import type { HandleCalls } from '../handle-calls.js'
import { StatelessContext } from './context.js'
import { closingHeaders, stoppedByDrain, stoppedResponse } from '../drain.js'
import { RequestAbort } from '../request-abort.js'
import { TASK_METHODS, type TaskCalls } from './task-calls.js'
import type { StateSealer } from './request-state.js'
import { NO_POST, type PostTrace } from '../../telemetry/index.js'
import { LeaseLostError } from '../../state/outcome.js'
import type { StateEngine } from '../../state/engine.js'
import { allKept, type UnitOfWork, type UnitOutcome } from '../../state/unit-of-work.js'
import { unkeptResponses } from '../unkept-answers.js'

/** A result whose work was not kept: what it is owed instead (see `unkept-answers.ts`). */
function unkept (response: Answer, msg: JsonRpcRequest, outcome: UnitOutcome): Answer {
  const out = unkeptResponses([response.body], [msg], outcome)
  return { body: out.responses[0], status: out.status ?? response.status, headers: out.headers ?? response.headers }
}

/** @internal What the 2026-07-28 wire is built from. */
export interface StatelessDeps {
  opts: ResolvedOptions
  /** The state engine (the handles of a call are held in the request's unit of work). */
  state: StateEngine
  registry: Registry
  sealer: StateSealer
  capabilities: () => Record<string, unknown>
  cache: (what: CacheKind, uri?: string) => CacheHint
  logger: FastifyBaseLogger
  /** Tool calls on state handles, and `ctx.handles`. */
  handles: HandleCalls
  /** The tool call limits (the `limits` option and the definitions' own). */
  limiter: ToolLimiter
  /** Tool calls as tasks, and the `tasks/*` methods (the Tasks extension). */
  tasks: TaskCalls
  /** Idempotency keys on tool calls (absent: `idempotency: false`). */
  keyed?: KeyedRunner
}

/** A response, the HTTP status for it, and the headers an error names (`Retry-After`). */
interface Answer { body: unknown, status: number, headers?: Record<string, string> }

/** One request being run, with what its run needs. */
interface StatelessRequest {
  exchange: Exchange
  msg: JsonRpcRequest
  caps: Record<string, unknown>
  logLevel: LogLevel | undefined
  principal: McpPrincipal | null
  channel: ResponseChannel
  abort: RequestAbort
  /** The request's unit of work (the handles its call works on). */
  unit: UnitOfWork
}

/** The answer channel of every request of this wire: no session, nothing to resume (shared: only read). */
const NO_SESSION_CHANNEL: ChannelOptions = Object.freeze({ sessionId: null, polling: false, log: NULL_EVENT_LOG })

/** -32602: resources/read of a URI nobody serves (the 2026-07-28 code). */
function resourceNotFound (uri: string): McpError {
  return new McpError(ErrorCode.InvalidParams, 'Resource not found', { uri })
}

/** A client capability a handler needed and the client did not declare: 400 + -32021 on this revision. */
function asWireError (err: unknown): unknown {
  if (!isClientCapabilityError(err)) return err
  const name = Object.keys(err.requiredCapabilities)[0]
  return new McpError(ErrorCode.MissingRequiredClientCapability, `Missing required client capability: ${name}`,
    { requiredCapabilities: err.requiredCapabilities }, 400)
}

/** @internal The stateless 2026-07-28 wire. */
export class StatelessWire {
  readonly #d: StatelessDeps
  readonly listeners: ListenStreams
  /** The `_meta` every result carries; shared (it is only ever serialized). */
  readonly #serverMeta: Readonly<Record<string, unknown>>

  /** A tool hidden from this principal has no parameter headers to check: it is unknown. */
  readonly #toolSchema = (name: string, principal: McpPrincipal | null): Record<string, unknown> | undefined => {
    const tool = this.#d.registry.tools.get(name)
    return tool !== undefined && isVisible(tool.access, principal) ? tool.descriptor.inputSchema as Record<string, unknown> : undefined
  }

  constructor (deps: StatelessDeps) {
    this.#d = deps
    // Its JSON is made once: the POST's answer copies it in (`stringifyMessage`).
    this.#serverMeta = presetMeta({ [META_SERVER]: deps.opts.serverInfo })
    this.listeners = new ListenStreams({
      max: deps.opts.listen.max,
      maxPerClient: deps.opts.listen.maxPerClient,
      keepAlive: deps.opts.keepAliveIntervalMs,
      clientKey: (principal, ip) => deps.limiter.clientKey(principal, ip)
    })
  }

  /** Handles a stateless POST whose body parsed. */
  async post (exchange: Exchange, body: ParsedBody & { ok: true }, principal: McpPrincipal | null, trace: PostTrace = NO_POST): Promise<void> {
    refuseUnservable(body)
    const m = body.messages[0]
    const request = exchange.request
    if (m.kind === 'notification') {
      // The core protocol defines no client notifications over HTTP: one that agrees with its
      // headers is accepted and ignored.
      checkNotificationEnvelope(request, m.message.method, m.message.params)
      exchange.empty(202)
      return
    }
    if (m.kind !== 'request') return
    const msg = m.message
    const meta = checkRequestEnvelope(request, msg, principal, this.#toolSchema)
    const logLevel = meta[META_LOG]
    if (logLevel !== undefined && !LOG_LEVELS.includes(logLevel as LogLevel)) {
      throw new McpError(ErrorCode.InvalidParams, `Invalid params: ${META_LOG} must be one of ${LOG_LEVELS.join(', ')}`, undefined, 400)
    }
    const problem = metaProblem(msg.params ?? {})
    if (problem !== null) throw new McpError(ErrorCode.InvalidParams, problem, undefined, 400)
    if (msg.method === 'subscriptions/listen') {
      this.listeners.open(exchange, msg, this.#d.capabilities(), principal)
      return
    }
    const channel = exchange.channel(NO_SESSION_CHANNEL)
    // Closing the response stream is cancellation on this revision.
    const abort = new RequestAbort()
    abort.watch(exchange.connection, channel)
    // Stopped at the drain deadline of app.close() like a cancellation, but answered.
    const unfollow = exchange.shutdown?.follow(abort)
    try {
      const caps = meta[META_CAPS] as Record<string, unknown>
      // The state handles its call works on are held in the request's unit of work until it ends.
      const unit = this.#d.state.unit({ owner: request, abort, log: request.log })
      const r: StatelessRequest = { exchange, msg, caps, logLevel: logLevel as LogLevel | undefined, principal, channel, abort, unit }
      // A POST of this wire carries one request: without a context of its own (no recording span)
      // its span has none either, and no closure is made to enter it.
      let response = await (trace.context === null ? this.#run(r) : trace.run(msg, () => this.#run(r)))
      // Most requests hold nothing: their end needs no wait. A stopped one keeps nothing.
      const how = abort.aborted ? 'abandon' : 'commit'
      const outcome = unit.endNow(how) ?? await unit.end(how)
      if (!allKept(outcome.parts)) response = unkept(response, msg, outcome)
      trace.answered(msg, response.body, response.status)
      // A call stopped by the loss of its handle's lease is answered (with that error); a
      // cancelled one is not.
      if (abort.aborted && !(abort.reason instanceof LeaseLostError)) {
        if (stoppedByDrain(abort.reason)) channel.finish([stoppedResponse(msg.id)], true, 503, closingHeaders(this.#d.opts.retryIntervalMs))
        return
      }
      channel.finish([response.body], true, response.status, response.headers)
    } finally {
      abort.unwatch()
      unfollow?.()
    }
  }

  /** A `complete` (or `input_required`) result with the server's `_meta`, and cache hints when given. */
  #ok (id: RequestId, result: Record<string, unknown>, cache?: CacheHint): Answer {
    // The result objects the methods build are fresh: completed in place rather than copied.
    result.resultType ??= 'complete'
    if (cache !== undefined && result.resultType === 'complete') { result.ttlMs = cache.ttlMs; result.cacheScope = cache.cacheScope }
    const own = result._meta as Record<string, unknown> | undefined
    result._meta = own === undefined ? this.#serverMeta : { ...own, ...this.#serverMeta }
    return { body: resultResponse(id, result), status: 200 }
  }

  /**
   * Runs a request; resolves the response and the HTTP status for it (never rejects). Not async
   * itself: the method that runs has the only async frame of the request's run.
   */
  #run (r: StatelessRequest): Promise<Answer> {
    const { msg } = r
    try {
      if (msg.method === 'server/discover') return Promise.resolve(this.#discover(msg.id))
      if (TASK_METHODS.has(msg.method)) return this.#task(r)
      const entry = METHODS.get(msg.method)
      if (entry === undefined) throw methodNotFound(msg.method, 404)
      needCapability(this.#d.capabilities(), entry.capability, msg.method, 404)
      return this.#call(r, entry)
    } catch (err) {
      return Promise.resolve(this.#failed(r, err))
    }
  }

  /** The answer of a request that failed. */
  #failed (r: StatelessRequest, err: unknown): Answer {
    return errorReply(asWireError(err), r.msg.id, { status: 200, log: r.exchange.request.log, msg: 'MCP handler failed', what: { method: r.msg.method } })
  }

  async #task (r: StatelessRequest): Promise<Answer> {
    try {
      return this.#ok(r.msg.id, await this.#d.tasks.method(r.msg.method, r.msg.params ?? {}, r.caps, r.principal, r.exchange.request.log))
    } catch (err) {
      return this.#failed(r, err)
    }
  }

  #discover (id: RequestId): Answer {
    const result: Record<string, unknown> = { supportedVersions: [...STATELESS_VERSIONS], capabilities: this.#d.capabilities() }
    if (this.#d.opts.instructions !== undefined) result.instructions = this.#d.opts.instructions
    return this.#ok(id, result, this.#d.cache('discover'))
  }

  /** A table method: with a context (a user handler runs, and may ask for input) or without. Never rejects. */
  async #call (r: StatelessRequest, entry: MethodEntry): Promise<Answer> {
    const { registry, opts } = this.#d
    const params = r.msg.params ?? {}
    const request = r.exchange.request
    let ctx: StatelessContext | null = null
    let result: Record<string, unknown>
    try {
      if (entry.context) {
        ctx = new StatelessContext({
          request,
          msg: r.msg,
          caps: r.caps,
          logLevel: r.logLevel,
          principal: r.principal,
          channel: r.channel,
          abort: r.abort,
          sealer: this.#d.sealer,
          requestId: r.msg.id,
          meta: params._meta as Record<string, unknown>,
          handles: this.#d.handles.minter,
          unit: r.unit,
          member: r.msg
        })
      }
      try {
        result = await entry.handler({
          registry,
          params,
          ctx,
          principal: r.principal,
          pageSize: opts.pageSize,
          log: request.log,
          resourceNotFound,
          isProtocolError: isClientCapabilityError,
          limiter: this.#d.limiter,
          state: this.#d.handles,
          tasks: this.#d.tasks,
          keyed: this.#d.keyed
        })
      } catch (err) {
        if (!(err instanceof InputRequiredSignal) || ctx?.asked !== true) throw err
        result = {}
      }
      if (ctx?.asked === true) return this.#ok(r.msg.id, ctx.inputRequired())
      const hint = entry.cache === undefined ? undefined : this.#d.cache(entry.cache, entry.cache === 'read' ? params.uri as string : undefined)
      return this.#ok(r.msg.id, result, hint)
    } catch (err) {
      return this.#failed(r, err)
    }
  }

  /** A list changed: tell the listen streams that asked for that kind. */
  listChanged (kind: 'tools' | 'prompts' | 'resources'): void { this.listeners.listChanged(kind) }

  /** A resource changed: tell the listen streams subscribed to its URI. */
  resourceUpdated (uri: string): void { this.listeners.resourceUpdated(uri) }

  /** Server shutdown: each listen stream ends with its final result, and `retry` when given. */
  close (retryMs?: number): void { this.listeners.close(retryMs) }
}
