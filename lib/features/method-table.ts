/**
 * THE method table: for every MCP method that reads the registry, the server capability it
 * belongs to, its handler, whether it runs a user handler (and so needs a context), and the cache
 * hint kind of its result (2026-07-28). Both wires dispatch through it; what differs between the
 * eras is passed in as a {@link MethodCall} (how a missing capability and an unknown resource are
 * answered). Era-only methods (`ping`, `logging/setLevel`, subscriptions, `server/discover`) stay
 * with their wire: they are about the connection, not the registry.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { McpContext, McpPrincipal } from '../context.js'
import { ErrorCode, McpError, echoed } from '../jsonrpc/errors.js'
import type { ToolLimiter } from '../limits/limiter.js'
import { complete, getPrompt, listPrompts, listResources, listResourceTemplates, listTools, readResource } from './methods.js'
import type { KeyedRunner } from './keyed-call.js'
import { callTool, type StateRunner, type TaskStarter } from './tool-call.js'
import type { Registry } from './registry.js'

/** The results a 2026-07-28 server may give cache hints for. */
export type CacheKind = 'discover' | 'tools' | 'resources' | 'templates' | 'prompts' | 'read'

/** The server capabilities a method can belong to. */
export type ServerCapability = 'tools' | 'resources' | 'prompts' | 'completions'

/** One call of a table method. */
export interface MethodCall {
  registry: Registry
  params: Record<string, unknown>
  /** The handler context (methods with `context: true`). */
  ctx: McpContext | null
  /** Who asks (lists and completions leave out what `visible` hides from them). */
  principal: McpPrincipal | null
  pageSize: number
  log: FastifyBaseLogger
  /** What `resources/read` of an unknown URI answers (the code differs by era). */
  resourceNotFound: (uri: string) => McpError
  /**
   * Whether a tool handler's error is a protocol error of this era (answered as a JSON-RPC error)
   * rather than a tool failure (an `isError` result the model sees). `McpError`s always are.
   */
  isProtocolError?: (err: unknown) => boolean
  /** The tool call limits checked before a tool's handler runs (`limits` option), or none. */
  limiter?: ToolLimiter | null
  /** Runs the tool calls that declare a state handle. */
  state?: StateRunner
  /** Runs tool calls as tasks (2026-07-28), where the wire serves them. */
  tasks?: TaskStarter
  /** Idempotency keys on tool calls (absent: `idempotency: false`). */
  keyed?: KeyedRunner
}

/** A row of the table. */
export interface MethodEntry {
  /** The server capability the method belongs to (-32601 without it). */
  capability: ServerCapability
  /** Runs a user handler: the wire makes a context for it. */
  context: boolean
  /** Cache hint kind of a complete result (2026-07-28), if cacheable. */
  cache?: CacheKind
  handler: (call: MethodCall) => Promise<Record<string, unknown>> | Record<string, unknown>
}

const ctxOf = (call: MethodCall): McpContext => call.ctx as McpContext

/** The table (see the module doc). */
export const METHODS: ReadonlyMap<string, MethodEntry> = new Map<string, MethodEntry>([
  ['tools/list', { capability: 'tools', context: false, cache: 'tools', handler: (c) => listTools(c.registry, c.params, c.pageSize, c.principal) }],
  // The call is the options too (it names isProtocolError, limiter, state and tasks the same way).
  ['tools/call', { capability: 'tools', context: true, handler: (c) => callTool(c.registry, c.params, ctxOf(c), c.log, c) }],
  ['resources/list', { capability: 'resources', context: false, cache: 'resources', handler: (c) => listResources(c.registry, c.params, c.pageSize, c.principal) }],
  ['resources/templates/list', { capability: 'resources', context: false, cache: 'templates', handler: (c) => listResourceTemplates(c.registry, c.params, c.pageSize, c.principal) }],
  ['resources/read', { capability: 'resources', context: true, cache: 'read', handler: async (c) => await readResource(c.registry, c.params, ctxOf(c), c.resourceNotFound) }],
  ['prompts/list', { capability: 'prompts', context: false, cache: 'prompts', handler: (c) => listPrompts(c.registry, c.params, c.pageSize, c.principal) }],
  ['prompts/get', { capability: 'prompts', context: true, handler: async (c) => await getPrompt(c.registry, c.params, ctxOf(c)) }],
  ['completion/complete', { capability: 'completions', context: false, handler: async (c) => await complete(c.registry, c.params, c.principal) }]
])

/**
 * -32601 unless the server offers the capability `method` belongs to (`status`: the HTTP status
 * of the refusal, where the revision gives one).
 */
export function needCapability (caps: Record<string, unknown>, cap: string, method: string, status?: number): void {
  if (caps[cap] === undefined) throw new McpError(ErrorCode.MethodNotFound, `Method not found: ${method}`, undefined, status)
}

/** -32601 for a method neither the table nor the wire knows. */
export function methodNotFound (method: string, status?: number): McpError {
  // The name is the client's: echoed, but not at any length.
  return new McpError(ErrorCode.MethodNotFound, `Method not found: ${echoed(method)}`, undefined, status)
}
