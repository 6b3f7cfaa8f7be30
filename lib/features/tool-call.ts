/**
 * `tools/call`, in three stages:
 * - **resolve**: the tool (unknown, or hidden from the principal → -32602, the same answer), its
 *   access (lacking its scopes → 403: a backstop, the route's gate refuses it first, with its
 *   challenge), the arguments' shape;
 * - **admit**: the tool's limits (`ToolLimiter`: a `ToolLimitError`, 429 or 503) → a
 *   {@link CallPermit}, held until the result is built — or, when the call becomes a task, handed
 *   over to the task, whose end releases it. Every invocation counts, whatever its arguments;
 * - **execute**: the arguments validated (invalid ones and handler failures are tool results with
 *   `isError: true`, 2025-11-25 SEP-1303, so the model can see and correct them), what the tool
 *   needs (a session, a state handle: the same text for every handle it may not use, so there is
 *   no oracle), then the run: as a task, on a state handle, or as it is. `McpError`s and what
 *   `isProtocolError` picks (the era's protocol errors) are rethrown.
 *
 * Not async functions, up to the handler's run: a call with no limits, no task, no handle and a
 * synchronous validator goes to the handler without an async frame of its own (each costs a
 * promise, a suspended frame on the heap and a microtask per request). What fails before then
 * still rejects the promise returned, never throws.
 */
import type { FastifyBaseLogger } from 'fastify'
import { decideAccess } from '../auth/access.js'
import { insufficientScope } from '../auth/bearer.js'
import { InputRequiredSignal, type McpContext } from '../context.js'
import { FST_ERR_MCP_CAPABILITY, FST_ERR_MCP_NO_SESSION } from '../errors.js'
import { ErrorCode, McpError, echoed } from '../jsonrpc/errors.js'
import type { ToolLimiter, ToolPermit } from '../limits/limiter.js'
import type { SessionHandle } from '../sessions/session-handle.js'
import type { CallKey } from '../state/idempotency.js'
import { readOnlyRun } from '../state/snapshot.js'
import { keyedOnState, type KeyedRunner } from './keyed-call.js'
import { invalid } from './methods.js'
import type { CallToolResult, ContentBlock, Registry, ToolEntry, ToolReturn } from './registry.js'

type Params = Record<string, unknown>

/**
 * Runs a tool call's work under a state handle (the protocol layer provides it: it takes the
 * handle's lock, loads its state, and writes it back when the request ends).
 */
export interface StateRunner {
  /**
   * Runs `work` with the state of handle `id` of `kind` as `ctx.handle`. Resolves `null`, running
   * nothing, when the handle is not one this caller may use (unknown, expired, ended, someone
   * else's, malformed). Throws an `McpError` (503) when the handle cannot be opened.
   * `readOnly` (a read-only tool): the work reads a snapshot of the handle, without its lock.
   */
  withHandle<T> (kind: string, id: unknown, ctx: McpContext, work: () => Promise<T>, readOnly?: boolean): Promise<T | null>
}

/**
 * Runs a tool call as a task (the protocol layer provides it). Decides per call: `null` to run it
 * inline (the client did not declare the extension, and the tool allows that); otherwise it
 * creates the task, starts `work` with the task's own context after the answer, and resolves the
 * `CreateTaskResult`; `before` (the tool's `beforeTask`) runs first, inline in the request. Throws
 * the era's error when the tool requires a task the client cannot take.
 */
export interface TaskStarter {
  start (tool: string, support: 'optional' | 'required', ctx: McpContext,
    work: (ctx: McpContext) => Promise<Record<string, unknown>>, before?: () => Promise<void>): Promise<Record<string, unknown>> | null
}

/** What `callTool` may be given besides the call. */
export interface CallToolOptions {
  /** Whether a handler's error is a protocol error of the era (rethrown), not a tool failure. */
  isProtocolError?: (err: unknown) => boolean
  /** The tool call limits checked before a tool's handler runs (`limits` option), or none. */
  limiter?: ToolLimiter | null
  /** Runs the calls of tools that declare a state handle. */
  state?: StateRunner
  /** Runs calls as tasks (2026-07-28 Tasks extension); absent: this wire has none. */
  tasks?: TaskStarter
  /** Idempotency keys (`keyed-call.ts`); absent: calls are not keyed. */
  keyed?: KeyedRunner
}

/**
 * A call's limits permit, with one owner at a time: the call, which releases it when its result
 * is built, or the task it became ({@link handOver}), whose end releases it. Releasing twice, or
 * after a hand-over, does nothing.
 */
export class CallPermit {
  #permit: ToolPermit | null

  constructor (permit: ToolPermit | null) {
    this.#permit = permit
  }

  release (): void {
    const permit = this.#permit
    this.#permit = null
    permit?.release()
  }

  /** Moves the permit to a new owner: this one releases nothing from now on. */
  handOver (): CallPermit {
    const moved = new CallPermit(this.#permit)
    this.#permit = null
    return moved
  }
}

/** The permit of a call without limits: nothing to release. */
const UNLIMITED = new CallPermit(null)

/** `tools/call` (see the module doc). */
export function callTool (registry: Registry, params: Params, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions = {}): Promise<Record<string, unknown>> {
  try {
    const call = resolveCall(registry, params, ctx)
    if (options.keyed !== undefined) call.key = options.keyed.keyOf(call.name, params, call.args, ctx)
    // Most tools have no limits: no await for them.
    const limiter = options.limiter
    if (limiter == null || limiter.policy(call.name, call.tool.limits) === null) return executeCall(call, ctx, log, options, UNLIMITED)
    return admittedCall(limiter, call, ctx, log, options)
  } catch (err) {
    return Promise.reject(err)
  }
}

/**
 * A call past stage 1: the tool, its name, its arguments (an object, not yet validated), and its
 * idempotency identity (`null`: not keyed).
 */
interface Call { tool: ToolEntry, name: string, args: object, key: CallKey | null }

/** Stage 1, resolve: the tool, its access, the arguments' shape. Throws what it refuses. */
function resolveCall (registry: Registry, params: Params, ctx: McpContext): Call {
  if (typeof params.name !== 'string') throw invalid('name must be a string')
  const name = params.name
  const tool = registry.tools.get(name)
  const decision = decideAccess(tool?.access, ctx.principal)
  if (tool === undefined || !decision.visible) throw invalid(`unknown tool "${echoed(name)}"`)
  if (!decision.allowed) throw insufficientScope(decision.required, undefined)
  const args = params.arguments ?? {}
  if (typeof args !== 'object' || args === null || Array.isArray(args)) throw invalid('arguments must be an object')
  return { tool, name, args, key: null }
}

/**
 * Stage 2, admit: the limits' permit, owned by this call until its result is built (unless
 * handed over to a task).
 */
async function admittedCall (limiter: ToolLimiter, call: Call, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions): Promise<Record<string, unknown>> {
  const permit = new CallPermit(await limiter.acquire({ tool: call.name, principal: ctx.principal, ip: ctx.request.ip, limits: call.tool.limits }))
  try {
    return await executeCall(call, ctx, log, options, permit)
  } finally {
    permit.release()
  }
}

/**
 * Stage 3, execute: validation (a Standard Schema may validate asynchronously), what the tool
 * needs, then the run. Never throws: its failures reject.
 */
function executeCall (call: Call, ctx: McpContext, log: FastifyBaseLogger, options: CallToolOptions, permit: CallPermit): Promise<Record<string, unknown>> {
  try {
    const input = call.tool.validateInput(call.args)
    if (input instanceof Promise) return input.then(i => validatedCall(call, i, ctx, log, options, permit))
    return validatedCall(call, input, ctx, log, options, permit)
  } catch (err) {
    return Promise.reject(err)
  }
}

/** What the tool needs (a session), then the run. Throws only what reading its arguments throws. */
function validatedCall (call: Call, input: Awaited<ReturnType<ToolEntry['validateInput']>>, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions, permit: CallPermit): Promise<Record<string, unknown>> {
  const { tool, name } = call
  if (!input.ok) return Promise.resolve(errorResult(`Invalid arguments for tool "${name}": ${input.problem}`))
  if (tool.needsSession && ctx.session === null) {
    return Promise.resolve(errorResult(`Tool "${name}" needs a session: connect with the MCP handshake (initialize, protocol 2025-11-25 or earlier) ` +
      'and send back the Mcp-Session-Id header it returns on every later request.'))
  }
  const value = input.value as Record<string, unknown>
  // A read-only tool changes nothing: run again, it answers the same; it keeps no record.
  if (call.key !== null && !tool.readOnly) return keyedCall(call.key, tool, name, value, ctx, log, options, permit)
  if (tool.taskSupport === 'forbidden' && tool.handle === null) return runTool(tool, name, value, ctx, log, options.isProtocolError)
  return taskOrStateCall(tool, name, value, ctx, log, options, permit, null)
}

/**
 * A keyed call (`keyed-call.ts`), its record kept where the call runs: in its state handle (a call
 * on a handle that cannot become a task), else in its handshake-era session, else in a record of
 * its own (a task call's record holds the task it created: a retry gets the same task).
 */
function keyedCall (key: CallKey, tool: ToolEntry, name: string, value: Record<string, unknown>, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions, permit: CallPermit): Promise<Record<string, unknown>> {
  if (tool.handle !== null && tool.taskSupport === 'forbidden') return taskOrStateCall(tool, name, value, ctx, log, options, permit, key)
  const keyed = options.keyed as KeyedRunner
  const run = async (): Promise<Record<string, unknown>> => await taskOrStateCall(tool, name, value, ctx, log, options, permit, null)
  if (ctx.session !== null) return keyedOnState(ctx.session, key, keyed, run)
  return keyed.own(key, ctx, run)
}

/**
 * A call that may run as a task (taking the permit over), or on a state handle (`key`: the call's
 * record is kept in the handle).
 */
async function taskOrStateCall (tool: ToolEntry, name: string, value: Record<string, unknown>, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions, permit: CallPermit, key: CallKey | null): Promise<Record<string, unknown>> {
  if (tool.taskSupport !== 'forbidden') {
    // Without a task starter (the handshake era) a tool that requires a task cannot be served.
    if (options.tasks === undefined && tool.taskSupport === 'required') {
      throw new McpError(ErrorCode.MethodNotFound,
        `Tool "${name}" runs only as a task, which this protocol revision does not serve here`)
    }
    const before = tool.beforeTask === null ? undefined : async (): Promise<void> => { await tool.beforeTask?.(value, ctx) }
    let taskPermit = UNLIMITED
    const work = async (c: McpContext): Promise<Record<string, unknown>> => {
      try {
        return await runTool(tool, name, value, c, log, options.isProtocolError)
      } finally {
        taskPermit.release()
      }
    }
    const started = options.tasks?.start(name, tool.taskSupport, ctx, work, before)
    if (started != null) {
      // The task owns the permit from here: its handler's end releases it — or, when the task
      // cannot be created, this call, now.
      taskPermit = permit.handOver()
      try {
        return await started
      } catch (err) {
        taskPermit.release()
        throw err
      }
    }
    // Inline: what would have run before the task runs before the handler.
    if (before !== undefined) await before()
  }
  if (tool.handle === null) return await runTool(tool, name, value, ctx, log, options.isProtocolError)
  if (options.state === undefined) throw new Error(`tool "${name}" declares a handle, but no state runner serves this call`)
  const plain = async (): Promise<Record<string, unknown>> => await runTool(tool, name, value, ctx, log, options.isProtocolError)
  const keyed = options.keyed
  const run = key === null || keyed === undefined ? plain : async () => await keyedOnState(ctx.handle as SessionHandle, key, keyed, plain)
  const out = await options.state.withHandle(tool.handle.kind, value[tool.handle.argument], ctx, run, tool.readOnly)
  return out ?? errorResult(`Unknown or expired ${tool.handle.kind} handle.`)
}

/** Logs a failed tool call; the caller answers it as a tool result with `isError: true`. */
function toolFailed (log: FastifyBaseLogger, tool: string, err: unknown): void {
  // The client did not declare what the tool asked of it: the client's doing, not a server fault.
  if (err instanceof FST_ERR_MCP_CAPABILITY) { log.info({ tool, reason: err.message }, 'tool call failed: the client lacks a capability'); return }
  // Asked of a client that sent no session id (it cannot answer): the client's doing too.
  if (err instanceof FST_ERR_MCP_NO_SESSION) { log.info({ tool, reason: err.message }, 'tool call failed: the client sent no session id'); return }
  log.error({ err, tool }, 'tool handler failed')
}

function toolResult (value: ToolReturn): CallToolResult {
  if (typeof value === 'string') return { content: [{ type: 'text', text: value }] }
  if (Array.isArray(value)) return { content: value }
  if (typeof value !== 'object' || value === null) throw new TypeError('a tool handler must return a result object, a string or content blocks')
  return value
}

/** A tool result with `isError: true` saying `text`. */
export function errorResult (text: string): Record<string, unknown> {
  return { content: [{ type: 'text', text }], isError: true }
}

/** Runs a tool's handler and checks what it returns. */
async function runTool (tool: ToolEntry, name: string, args: Record<string, unknown>, ctx: McpContext, log: FastifyBaseLogger,
  isProtocolError?: (err: unknown) => boolean): Promise<Record<string, unknown>> {
  let result: CallToolResult
  try {
    result = toolResult(await (tool.readOnly ? readOnlyRun(name, ctx, () => tool.handler(args, ctx)) : tool.handler(args, ctx)))
  } catch (err) {
    if (err instanceof McpError || err instanceof InputRequiredSignal || isProtocolError?.(err) === true || ctx.signal.aborted) throw err
    toolFailed(log, name, err)
    // The message reaches the model, unless the error says it is not to be exposed (InternalToolError, http-errors' 5xx).
    const shown = err instanceof Error && err.message !== '' && (err as { expose?: unknown }).expose !== false
    return errorResult(shown ? err.message : 'Tool execution failed')
  }
  let structured = result.structuredContent
  if (tool.validateOutput !== null && result.isError !== true) {
    if (structured === undefined) {
      toolFailed(log, name, new Error(`tool "${name}" declares an outputSchema but returned no structuredContent`))
      return errorResult('Tool returned no structured content')
    }
    let output = tool.validateOutput(structured)
    if (output instanceof Promise) output = await output
    if (!output.ok) {
      toolFailed(log, name, new Error(`tool "${name}" returned structuredContent that does not match its outputSchema: ${output.problem}`))
      return errorResult('Tool returned structured content that does not match its output schema')
    }
    // What the output schema parsed (a Standard Schema may strip or transform; Ajv leaves it as is).
    structured = output.value
  }
  // Object.assign, not a spread: the wires add keys to this object, and keys added to a spread
  // clone send V8 down a slow path (for the copy, and for the JSON.stringify after).
  const out: Record<string, unknown> = Object.assign({}, result as Record<string, unknown>)
  if (structured !== result.structuredContent) out.structuredContent = structured
  // With structured content, also send it serialized as text for clients that only read content.
  if (out.content === undefined) {
    out.content = structured === undefined ? [] : [{ type: 'text', text: JSON.stringify(structured) } satisfies ContentBlock]
  }
  return out
}
