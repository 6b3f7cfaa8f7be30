/**
 * The MCP methods that read the registry (tools, resources, prompts, completion). They do not know
 * which era or transport carries them: each takes the params and a handler context and returns the
 * result object, or throws an `McpError`.
 */
import type { FastifyBaseLogger } from 'fastify'
import { decideAccess, isVisible, visibleTo } from '../auth/access.js'
import { insufficientScope } from '../auth/bearer.js'
import { InputRequiredSignal, type McpContext, type McpPrincipal } from '../context.js'
import { FST_ERR_MCP_CAPABILITY, FST_ERR_MCP_NO_SESSION } from '../errors.js'
import { ErrorCode, MAX_ECHOED_URI, McpError, echoed } from '../jsonrpc/errors.js'
import type { ToolLimiter, ToolPermit } from '../limits/limiter.js'
import { readOnlyRun } from '../state/snapshot.js'
import { paginate } from './pagination.js'
import type { CallToolResult, ContentBlock, PromptMessage, Registry, ResourceContents, ResourceReturn, ToolEntry, ToolReturn } from './registry.js'

type Params = Record<string, unknown>

/** Logs a failed tool call; the caller answers it as a tool result with `isError: true`. */
function toolFailed (log: FastifyBaseLogger, tool: string, err: unknown): void {
  // The client did not declare what the tool asked of it: the client's doing, not a server fault.
  if (err instanceof FST_ERR_MCP_CAPABILITY) { log.info({ tool, reason: err.message }, 'tool call failed: the client lacks a capability'); return }
  // Asked of a client that sent no session id (it cannot answer): the client's doing too.
  if (err instanceof FST_ERR_MCP_NO_SESSION) { log.info({ tool, reason: err.message }, 'tool call failed: the client sent no session id'); return }
  log.error({ err, tool }, 'tool handler failed')
}

function invalid (message: string, data?: unknown): McpError {
  return new McpError(ErrorCode.InvalidParams, `Invalid params: ${message}`, data)
}

/*
 * The lists hold what `principal` may see (a definition's `visible`); a cursor is an offset into
 * that list, so a principal whose view changes between pages may skip or repeat an entry, as with
 * any change of the list between pages.
 */

export function listTools (registry: Registry, params: Params, pageSize: number, principal: McpPrincipal | null): Record<string, unknown> {
  const { page, nextCursor } = paginate('tools', visibleTo(registry.tools.values(), principal, t => t.access), params.cursor, pageSize)
  return withCursor({ tools: page.map(t => t.descriptor) }, nextCursor)
}

export function listResources (registry: Registry, params: Params, pageSize: number, principal: McpPrincipal | null): Record<string, unknown> {
  const { page, nextCursor } = paginate('resources', visibleTo(registry.resources.values(), principal, r => r.access), params.cursor, pageSize)
  return withCursor({ resources: page.map(r => r.descriptor) }, nextCursor)
}

export function listResourceTemplates (registry: Registry, params: Params, pageSize: number, principal: McpPrincipal | null): Record<string, unknown> {
  const { page, nextCursor } = paginate('templates', visibleTo(registry.templates.values(), principal, r => r.access), params.cursor, pageSize)
  return withCursor({ resourceTemplates: page.map(r => r.descriptor) }, nextCursor)
}

export function listPrompts (registry: Registry, params: Params, pageSize: number, principal: McpPrincipal | null): Record<string, unknown> {
  const { page, nextCursor } = paginate('prompts', visibleTo(registry.prompts.values(), principal, p => p.access), params.cursor, pageSize)
  return withCursor({ prompts: page.map(p => p.descriptor) }, nextCursor)
}

function withCursor (result: Record<string, unknown>, nextCursor: string | undefined): Record<string, unknown> {
  if (nextCursor !== undefined) result.nextCursor = nextCursor
  return result
}

function toolResult (value: ToolReturn): CallToolResult {
  if (typeof value === 'string') return { content: [{ type: 'text', text: value }] }
  if (Array.isArray(value)) return { content: value }
  if (typeof value !== 'object' || value === null) throw new TypeError('a tool handler must return a result object, a string or content blocks')
  return value
}

function errorResult (text: string): Record<string, unknown> {
  return { content: [{ type: 'text', text }], isError: true }
}

/**
 * `tools/call`. Unknown tool, or one hidden from the principal → -32602 (the same answer). A tool
 * whose scopes the principal lacks → 403 (a backstop: the route's gate refuses it first, with its
 * challenge). Then the tool's limits (`limiter`: a `ToolLimitError`, 429 or 503): every
 * invocation counts, whatever its arguments, and holds its slot until its result is built.
 * Invalid arguments and handler failures are tool results with `isError: true` (2025-11-25,
 * SEP-1303), so the model can see and correct them; `McpError`s and what `isProtocolError` picks
 * (the era's protocol errors) are rethrown.
 *
 * Not an async function, nor is what it calls up to the handler's run: a call with no limits, no
 * task, no handle and a synchronous validator goes to the handler without an async frame of its
 * own (each costs a promise, a suspended frame on the heap and a microtask per request). What
 * fails before then still rejects the promise returned, never throws.
 */
export function callTool (registry: Registry, params: Params, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions = {}): Promise<Record<string, unknown>> {
  try {
    return lookedUpCall(registry, params, ctx, log, options)
  } catch (err) {
    return Promise.reject(err)
  }
}

/** `callTool` up to the limits: the tool, access, the arguments' shape. Throws what it refuses. */
function lookedUpCall (registry: Registry, params: Params, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions): Promise<Record<string, unknown>> {
  if (typeof params.name !== 'string') throw invalid('name must be a string')
  const name = params.name
  const tool = registry.tools.get(name)
  const decision = decideAccess(tool?.access, ctx.principal)
  if (tool === undefined || !decision.visible) throw invalid(`unknown tool "${echoed(name)}"`)
  if (!decision.allowed) throw insufficientScope(decision.required, undefined)
  const args = params.arguments ?? {}
  if (typeof args !== 'object' || args === null || Array.isArray(args)) throw invalid('arguments must be an object')
  // Most tools have no limits: no await for them.
  const limiter = options.limiter
  if (limiter == null || limiter.policy(name, tool.limits) === null) return checkedCall(tool, name, args, ctx, log, options)
  return limitedCall(limiter, tool, name, args, ctx, log, options)
}

/**
 * A call of a tool with limits: its permit is held until the result is built — or, when the call
 * became a task, until the task's handler ends (`stateOrTaskCall` takes the permit over).
 */
async function limitedCall (limiter: ToolLimiter, tool: ToolEntry, name: string, args: object, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions): Promise<Record<string, unknown>> {
  const permit: HeldPermit = { permit: await limiter.acquire({ tool: name, principal: ctx.principal, ip: ctx.request.ip, limits: tool.limits }), taken: false }
  try {
    return await checkedCall(tool, name, args, ctx, log, { ...options, permit })
  } finally {
    if (!permit.taken) permit.permit.release()
  }
}

/** A call's permit, and whether a task took it over (then the task's end releases it). */
interface HeldPermit {
  readonly permit: ToolPermit
  taken: boolean
}

/**
 * Runs a tool call's work under a state handle (the protocol layer provides it: it takes the
 * handle's lock, loads its state, and writes it back when the work ends).
 */
export interface StateRunner {
  /**
   * Runs `work` with the state of handle `id` of `kind` as `ctx.handle`. Resolves `null`, running
   * nothing, when the handle is not one this caller may use (unknown, expired, ended, someone
   * else's, malformed). Throws an `McpError` (503) when what the work changed could not be kept.
   * `readOnly` (a read-only tool): the work reads a snapshot of the handle, without its lock.
   */
  withHandle<T> (kind: string, id: unknown, ctx: McpContext, work: () => Promise<T>, readOnly?: boolean): Promise<T | null>
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
  /** @internal The limits' permit of this call, handed over to its task if it becomes one. */
  permit?: HeldPermit
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

/**
 * A tool call past the lookup and the limits: validation (a Standard Schema may validate
 * asynchronously), then {@link validatedCall}. Never throws: its failures reject.
 */
function checkedCall (tool: ToolEntry, name: string, args: object, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions): Promise<Record<string, unknown>> {
  try {
    const input = tool.validateInput(args)
    if (input instanceof Promise) return input.then(i => validatedCall(tool, name, i, ctx, log, options))
    return validatedCall(tool, name, input, ctx, log, options)
  } catch (err) {
    return Promise.reject(err)
  }
}

/**
 * What the tool needs (a session, a state handle: the same text for every handle it may not use,
 * so there is no oracle), then the run. Throws only what reading its arguments throws (the
 * callers turn it into a rejection).
 */
function validatedCall (tool: ToolEntry, name: string, input: Awaited<ReturnType<ToolEntry['validateInput']>>, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions): Promise<Record<string, unknown>> {
  if (!input.ok) return Promise.resolve(errorResult(`Invalid arguments for tool "${name}": ${input.problem}`))
  if (tool.needsSession && ctx.session === null) {
    return Promise.resolve(errorResult(`Tool "${name}" needs a session: connect with the MCP handshake (initialize, protocol 2025-11-25 or earlier) and send back the Mcp-Session-Id header it returns on every later request.`))
  }
  const value = input.value as Record<string, unknown>
  if (tool.taskSupport === 'forbidden' && tool.handle === null) return runTool(tool, name, value, ctx, log, options.isProtocolError)
  return stateOrTaskCall(tool, name, value, ctx, log, options)
}

/** A call that may run as a task, or on a state handle. */
async function stateOrTaskCall (tool: ToolEntry, name: string, value: Record<string, unknown>, ctx: McpContext, log: FastifyBaseLogger,
  options: CallToolOptions): Promise<Record<string, unknown>> {
  if (tool.taskSupport !== 'forbidden') {
    // Without a task starter (the handshake era) a tool that requires a task cannot be served.
    if (options.tasks === undefined && tool.taskSupport === 'required') throw new McpError(ErrorCode.MethodNotFound, `Tool "${name}" runs only as a task, which this protocol revision does not serve here`)
    const before = tool.beforeTask === null ? undefined : async (): Promise<void> => { await tool.beforeTask?.(value, ctx) }
    const permit = options.permit
    const work = async (c: McpContext): Promise<Record<string, unknown>> => {
      try {
        return await runTool(tool, name, value, c, log, options.isProtocolError)
      } finally {
        permit?.permit.release()
      }
    }
    const started = options.tasks?.start(name, tool.taskSupport, ctx, work, before)
    if (started != null) {
      const created = await started
      // The task exists: its handler runs (or ran) `work`, which gives the permit back at its end.
      if (permit !== undefined) permit.taken = true
      return created
    }
    // Inline: what would have run before the task runs before the handler.
    if (before !== undefined) await before()
  }
  if (tool.handle === null) return await runTool(tool, name, value, ctx, log, options.isProtocolError)
  if (options.state === undefined) throw new Error(`tool "${name}" declares a handle, but no state runner serves this call`)
  const run = async (): Promise<Record<string, unknown>> => await runTool(tool, name, value, ctx, log, options.isProtocolError)
  const out = await options.state.withHandle(tool.handle.kind, value[tool.handle.argument], ctx, run, tool.readOnly)
  return out ?? errorResult(`Unknown or expired ${tool.handle.kind} handle.`)
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

function toContents (uri: string, value: ResourceReturn): ResourceContents[] {
  const list = Array.isArray(value) ? value : ('contents' in value ? value.contents : [value])
  return list.map(c => ({ ...c, uri: c.uri ?? uri }))
}

/** `resources/read`. Unknown URI, or one hidden from the principal → `notFound(uri)` (the URI cut to a bound); lacking its scopes → 403. */
export async function readResource (registry: Registry, params: Params, ctx: McpContext, notFound: (uri: string) => McpError): Promise<Record<string, unknown>> {
  if (typeof params.uri !== 'string') throw invalid('uri must be a string')
  const found = registry.findResource(params.uri)
  const decision = decideAccess(found?.access, ctx.principal)
  if (found === null || !decision.visible) throw notFound(echoed(params.uri, MAX_ECHOED_URI))
  if (!decision.allowed) throw insufficientScope(decision.required, undefined)
  return { contents: toContents(params.uri, await found.handler(ctx)) }
}

/** `prompts/get`. Unknown prompt (or hidden from the principal) or missing required arguments → -32602; lacking its scopes → 403. */
export async function getPrompt (registry: Registry, params: Params, ctx: McpContext): Promise<Record<string, unknown>> {
  if (typeof params.name !== 'string') throw invalid('name must be a string')
  const prompt = registry.prompts.get(params.name)
  const decision = decideAccess(prompt?.access, ctx.principal)
  if (prompt === undefined || !decision.visible) throw invalid(`unknown prompt "${echoed(params.name)}"`)
  if (!decision.allowed) throw insufficientScope(decision.required, undefined)
  const args = params.arguments ?? {}
  if (typeof args !== 'object' || args === null || Array.isArray(args)) throw invalid('arguments must be an object')
  const a = args as Record<string, unknown>
  for (const [k, v] of Object.entries(a)) if (typeof v !== 'string') throw invalid(`argument "${echoed(k)}" must be a string`)
  const missing = (prompt.def.arguments ?? []).filter(x => x.required === true && a[x.name] === undefined).map(x => x.name)
  if (missing.length > 0) throw invalid(`missing required arguments: ${missing.join(', ')}`)
  const value = await prompt.handler(a as Record<string, string>, ctx)
  // A copy: the wires complete the result object in place, and a handler may return a shared one.
  const result: { description?: string, messages: PromptMessage[] } = Array.isArray(value) ? { messages: value } : Object.assign({}, value)
  if (result.description === undefined && prompt.def.description !== '') result.description = prompt.def.description
  return result as unknown as Record<string, unknown>
}

/** `completion/complete` for prompt arguments and template variables; at most 100 values. A prompt or template hidden from the principal is unknown. */
export async function complete (registry: Registry, params: Params, principal: McpPrincipal | null): Promise<Record<string, unknown>> {
  const ref = params.ref as Record<string, unknown> | undefined
  const argument = params.argument as Record<string, unknown> | undefined
  if (typeof ref !== 'object' || ref === null) throw invalid('ref must be an object')
  if (typeof argument !== 'object' || argument === null || typeof argument.name !== 'string' || typeof argument.value !== 'string') {
    throw invalid('argument must be { name, value }')
  }
  let completer
  if (ref.type === 'ref/prompt') {
    const prompt = registry.prompts.get(String(ref.name))
    if (prompt === undefined || !isVisible(prompt.access, principal)) throw invalid(`unknown prompt "${echoed(String(ref.name))}"`)
    completer = prompt.def.complete?.[argument.name]
  } else if (ref.type === 'ref/resource') {
    const template = registry.templates.get(String(ref.uri))
    if (template === undefined || !isVisible(template.access, principal)) throw invalid(`unknown resource template "${echoed(String(ref.uri))}"`)
    completer = template.complete[argument.name]
  } else {
    throw invalid('ref.type must be "ref/prompt" or "ref/resource"')
  }
  const context = (params.context as { arguments?: Record<string, string> } | undefined)?.arguments ?? {}
  const values = completer === undefined ? [] : await completer(argument.value, { arguments: context })
  const all = values.filter(v => typeof v === 'string')
  return { completion: { values: all.slice(0, 100), total: all.length, hasMore: all.length > 100 } }
}
