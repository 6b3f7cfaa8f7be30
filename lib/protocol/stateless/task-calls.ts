/**
 * The Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) on the 2026-07-28 wire: a tool
 * call the plugin runs as a task (the {@link TaskStarter} `features/methods.ts` asks), the task's
 * handler context, and `tasks/get`, `tasks/update`, `tasks/cancel`, answered on any instance from
 * the store (`lib/tasks/`).
 *
 * A task's handler runs on the instance that accepted the call, after the `CreateTaskResult` went
 * out. Its `ctx.elicit`/`sample`/`roots` turn the task `input_required` and wait in place for the
 * answer a `tasks/update` brings (the handler is not re-run, unlike an `input_required` round);
 * `ctx.signal` aborts on `tasks/cancel` (through the bus) or a lost lease; `ctx.progress` becomes
 * the task's `statusMessage`; `ctx.log` sends nothing (there is no stream to send it on).
 */
import type { FastifyBaseLogger } from 'fastify'
import { type LogLevel, type McpContext, type ProgressUpdate } from '../../context.js'
import type { TaskStarter } from '../../features/tool-call.js'
import { ErrorCode, McpError } from '../../jsonrpc/errors.js'
import { isPlainObject } from '../../jsonrpc/messages.js'
import { TaskAbortError, type TaskRun } from '../../tasks/task-run.js'
import { TASKS_EXTENSION, createResult, detailedTask, ownerOf } from '../../tasks/task-record.js'
import type { TaskService } from '../../tasks/task-service.js'
import { BaseContext, isClientCapabilityError } from '../base-context.js'
import type { ResponseChannel } from '../exchange.js'
import { VALID_ANSWER } from './context.js'
import { DEADLINE_GRACE, REFUSED, stoppedByDrain } from '../drain.js'
import type { ClientKey } from './listen.js'
import { RequestAbort } from '../request-abort.js'
import { unconfirmedAnswer } from '../unconfirmed.js'
import { settleWithin } from '../../util/settle.js'
import { shownId } from '../../util/shown-id.js'

/** The methods of the extension this wire serves (`tasks/result` and `tasks/list` are gone: -32601). */
export const TASK_METHODS = new Set(['tasks/get', 'tasks/update', 'tasks/cancel'])

/** Whether a request's client capabilities declare the extension. */
export function declaresTasks (caps: Record<string, unknown>): boolean {
  const ext = caps.extensions
  return isPlainObject(ext) && ext[TASKS_EXTENSION] !== undefined
}

/** -32021 with the capability the request lacks (SEP-2575 "Missing Required Capabilities"). */
function missingExtension (what: string): McpError {
  return new McpError(ErrorCode.MissingRequiredClientCapability, `Missing required client capability: extensions["${TASKS_EXTENSION}"] (${what})`,
    { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } }, 400)
}

/** -32602 for a task id that is not one of the caller's live tasks (malformed, unknown, expired, someone else's). */
function taskNotFound (): McpError {
  return new McpError(ErrorCode.InvalidParams, 'Invalid params: task not found')
}

/** A channel that is done: a task's context never writes to the POST that created it. */
const CLOSED: ResponseChannel = { done: true, resumable: false, emit () {}, disconnect () {}, finish () {} }

/** 503: the instance is shutting down (a task would not outlive it). */
function closing (): McpError {
  return new McpError(ErrorCode.ServerError, REFUSED, undefined, 503)
}

/** The `ctx` of a task's handler (see the module doc). */
class TaskContext extends BaseContext {
  readonly session = null
  readonly clientCapabilities: Record<string, unknown>
  readonly #run: TaskRun

  constructor (origin: McpContext, run: TaskRun) {
    const abort = new RequestAbort()
    super({ request: origin.request, principal: origin.principal, requestId: origin.requestId, meta: origin.meta, channel: CLOSED, abort, handles: () => origin.handles })
    this.finished = true
    this.clientCapabilities = origin.clientCapabilities
    // What `beforeTask` gathered (a copy: the request's own context is done with it).
    this.state = { ...origin.state }
    this.#run = run
    const signal = run.signal
    if (signal.aborted) abort.abort(signal.reason)
    else signal.addEventListener('abort', () => { abort.abort(signal.reason) }, { once: true })
  }

  protected get minLogLevel (): LogLevel | null { return null }

  closeSSEStream (): void {}

  override async progress (update: ProgressUpdate): Promise<void> {
    const total = update.total === undefined ? '' : `/${update.total}`
    await this.#run.note(update.message ?? `${update.progress}${total}`)
  }

  protected async ask (key: string, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (typeof key !== 'string' || key === '') throw new TypeError('an input request needs a non-empty key')
    // This revision's input requests carry no elicitation id (that is for the handshake era's URL mode).
    const { elicitationId: _drop, ...rest } = params
    return await this.#run.ask(key, method, method === 'elicitation/create' ? rest : params)
  }
}

/** How a handler's failure shows on a failed task: a JSON-RPC error, never a stack. */
function taskError (err: unknown): { code: number, message: string, data?: unknown } {
  if (err instanceof McpError) return err.data === undefined ? { code: err.code, message: err.message } : { code: err.code, message: err.message, data: err.data }
  if (isClientCapabilityError(err)) return { code: ErrorCode.MissingRequiredClientCapability, message: err.message, data: { requiredCapabilities: err.requiredCapabilities } }
  if (err instanceof TaskAbortError) return { code: ErrorCode.InternalError, message: `Task aborted: ${err.message}` }
  return { code: ErrorCode.InternalError, message: 'Internal error' }
}

/**
 * The log line of a task handler's failure, at the level the inline path gives the same: the
 * client's doing (a capability it did not declare, a protocol error) at info without a stack, a
 * cancellation or shutdown not at all, only the handler's own failure at error. The task id is
 * cut (`shownId`): it is the anonymous client's only credential.
 */
function logTaskFailure (log: FastifyBaseLogger, err: unknown, tool: string, id: string): void {
  if (err instanceof TaskAbortError || stoppedByDrain(err)) return
  const task = shownId(id)
  if (isClientCapabilityError(err)) log.info({ tool, task, reason: err.message }, 'task refused: the client lacks a capability')
  else if (!(err instanceof McpError)) log.error({ err, tool, task }, 'task handler failed')
}

/** How a task still running when the drain deadline passes ends: `failed`, with this error. */
export const SERVER_CLOSED = { code: ErrorCode.InternalError, message: 'The server running this task shut down before the task ended.' }

/** The tasks of the 2026-07-28 wire (see the module doc). */
export class TaskCalls implements TaskStarter {
  readonly #tasks: TaskService
  readonly #clientKey: ClientKey
  /** Tasks whose handler runs on this instance, and what settles once each has ended. */
  readonly #running = new Map<TaskRun, Promise<void>>()
  #closed = false

  /** `clientKey`: whose slot a task takes (the limiter's: principal, else address, IPv6 by network). */
  constructor (tasks: TaskService, clientKey: ClientKey) {
    this.#tasks = tasks
    this.#clientKey = clientKey
  }

  /** Tasks whose handler runs on this instance. */
  get running (): number { return this.#running.size }

  /**
   * Part of `app.close()`, after the POSTs have drained: no task is created from now on (a 503);
   * the tasks running may finish until `timeoutMs`, then each still running is stopped: its
   * handler's signal aborts with `reason` and the task is written `failed` with
   * {@link SERVER_CLOSED} (its client learns it at its next `tasks/get`, not after a lease TTL),
   * its lease and slot given back — before the stores close. Resolves the number stopped.
   */
  async drain (timeoutMs: number, reason: Error, log: FastifyBaseLogger): Promise<number> {
    this.#closed = true
    if (this.#running.size === 0) return 0
    log.info({ tasks: this.#running.size, timeoutMs }, 'draining: the tasks running may finish')
    if (await settleWithin(Promise.allSettled(this.#running.values()), timeoutMs)) return 0
    const left = [...this.#running.keys()]
    log.warn({ tasks: left.length }, 'drain deadline reached: the tasks still running end failed')
    // Bounded: a store that hangs must not hold the shutdown (the lease then expires as after a crash).
    await settleWithin(Promise.allSettled(left.map(run => run.stop(reason, { error: SERVER_CLOSED }))), DEADLINE_GRACE)
    return left.length
  }

  /** The server capabilities with the extension advertised. */
  capabilities (base: Record<string, unknown>): Record<string, unknown> {
    const extensions = isPlainObject(base.extensions) ? base.extensions : {}
    return { ...base, extensions: { ...extensions, [TASKS_EXTENSION]: {} } }
  }

  start (tool: string, support: 'optional' | 'required', ctx: McpContext,
    work: (ctx: McpContext) => Promise<Record<string, unknown>>, before?: () => Promise<void>): Promise<Record<string, unknown>> | null {
    if (!declaresTasks(ctx.clientCapabilities)) {
      if (support === 'optional') return null
      throw missingExtension(`tool "${tool}" runs only as a task`)
    }
    if (before === undefined) return this.#create(tool, ctx, work)
    // Its input_required rounds end the request as usual; the task is made on the last one.
    return before().then(async () => await this.#create(tool, ctx, work))
  }

  async #create (tool: string, ctx: McpContext, work: (ctx: McpContext) => Promise<Record<string, unknown>>): Promise<Record<string, unknown>> {
    if (this.#closed) throw closing()
    const slot = this.#clientKey(ctx.principal, ctx.request.ip)
    const { run, record } = await this.#tasks.create(ownerOf(ctx.principal), slot).catch((err: unknown) => {
      // The lease not confirmed: nothing was done; the record not confirmed: it may exist.
      const unconfirmed = unconfirmedAnswer(err)
      if (unconfirmed !== null) ctx.request.log.warn({ err }, 'task not created: too few replicas confirmed it')
      throw unconfirmed ?? err
    })
    if (this.#closed) {
      await run.finish({ error: SERVER_CLOSED })
      throw closing()
    }
    const log = ctx.request.log
    // After the answer: the handler's first await must not race the response being written.
    const ended = new Promise<void>(resolve => setImmediate(() => {
      const taskCtx = new TaskContext(ctx, run)
      work(taskCtx).then(
        async (result) => { await run.finish({ result }) },
        async (err: unknown) => {
          logTaskFailure(log, err, tool, run.id)
          await run.finish({ error: taskError(err) })
        }
      ).catch((err: unknown) => { log.error({ err, task: shownId(run.id) }, 'task end failed') }).finally(resolve)
    }))
    this.#running.set(run, ended)
    void ended.then(() => this.#running.delete(run))
    return createResult(run.id, record)
  }

  /**
   * `tasks/get`, `tasks/update`, `tasks/cancel` for the request's principal. A backend that fails
   * is a 503 (the task is as it was: nothing was written, or the write is retried by the client).
   */
  async method (method: string, params: Record<string, unknown>, caps: Record<string, unknown>, principal: { id: string } | null,
    log: { warn: (obj: Record<string, unknown>, msg: string) => void }): Promise<Record<string, unknown>> {
    if (!declaresTasks(caps)) throw missingExtension(method)
    try {
      return await this.#method(method, params, principal)
    } catch (err) {
      if (err instanceof McpError) throw err
      log.warn({ err, method }, 'task method failed: a backend is unavailable')
      const unconfirmed = unconfirmedAnswer(err)
      if (unconfirmed !== null) throw unconfirmed
      throw new McpError(ErrorCode.ServerError, 'Tasks are unavailable right now; retry later', undefined, 503)
    }
  }

  async #method (method: string, params: Record<string, unknown>, principal: { id: string } | null): Promise<Record<string, unknown>> {
    const owner = ownerOf(principal)
    const id = params.taskId
    if (method === 'tasks/get') {
      const data = await this.#tasks.get(id, owner)
      if (data === null) throw taskNotFound()
      return detailedTask(id as string, data)
    }
    if (method === 'tasks/update') {
      const responses = params.inputResponses
      if (!isPlainObject(responses)) throw new McpError(ErrorCode.InvalidParams, 'Invalid params: inputResponses must be an object')
      const valid = (m: string, answer: unknown): boolean => VALID_ANSWER[m]?.(answer) === true
      if (!await this.#tasks.update(id, owner, responses, valid)) throw taskNotFound()
      return {}
    }
    if (!await this.#tasks.cancel(id, owner)) throw taskNotFound()
    return {}
  }
}
