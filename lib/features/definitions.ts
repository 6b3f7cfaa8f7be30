/**
 * What an application registers (`fastify.mcp.tool()`, `resource()`, `resourceTemplate()`,
 * `prompt()`): the public definition and handler types, the handles `add` returns, and the
 * entries the methods read once a definition is validated (`build-entries.ts`).
 */
import type { AccessFields, AccessRule } from '../auth/access.js'
import type { McpContext } from '../context.js'
import type { ToolLimit } from '../limits/policy.js'
import type { ToolHandleOption } from './tool-state.js'
import type { ToolArgs, ToolSchema, ToolStructured, Validator } from './schema.js'
import type { CompiledTemplate } from './uri-template.js'

export interface Icon { src: string, mimeType?: string, sizes?: string[], theme?: 'light' | 'dark' }

export interface ToolAnnotations {
  title?: string
  readOnlyHint?: boolean
  destructiveHint?: boolean
  idempotentHint?: boolean
  openWorldHint?: boolean
}

/** A content block of a tool result or prompt message. */
export type ContentBlock =
  | { type: 'text', text: string, annotations?: Record<string, unknown>, _meta?: Record<string, unknown> }
  | { type: 'image' | 'audio', data: string, mimeType: string, annotations?: Record<string, unknown>, _meta?: Record<string, unknown> }
  | { type: 'resource_link', uri: string, name: string, [k: string]: unknown }
  | { type: 'resource', resource: ResourceContents, annotations?: Record<string, unknown>, _meta?: Record<string, unknown> }

export interface CallToolResult {
  content?: ContentBlock[]
  structuredContent?: unknown
  isError?: boolean
  _meta?: Record<string, unknown>
}

export type ResourceContents =
  | { uri: string, mimeType?: string, text: string, _meta?: Record<string, unknown> }
  | { uri: string, mimeType?: string, blob: string, _meta?: Record<string, unknown> }

/**
 * What `fastify.mcp.tool()` takes. `input` / `output` are a Standard Schema (zod ≥ 4.2, …), a
 * TypeBox schema or a plain JSON Schema object (see `schema.ts`); the handler's types follow them.
 */
export interface ToolDefinition<I extends ToolSchema | undefined = undefined, O extends ToolSchema | undefined = undefined> extends AccessFields {
  /** 1–64 chars of `[A-Za-z0-9_./-]`. */
  name: string
  title?: string
  description: string
  /** The arguments' schema (an object schema). Without it the tool takes any object. */
  input?: I
  /** The schema of `structuredContent`, which the handler must then return (checked, and also sent as text). */
  output?: O
  annotations?: ToolAnnotations
  icons?: Icon[]
  _meta?: Record<string, unknown>
  /**
   * The argument that carries a state handle, and its kind: the call runs under that handle's lock
   * with its state as `ctx.handle`; an unknown, expired or foreign handle is an `isError` result.
   */
  handle?: ToolHandleOption<Extract<keyof ToolArgs<I>, string>>
  /** `'required'`: the tool needs a handshake-era session; on the 2026-07-28 wire it answers so (`isError`). */
  session?: 'required'
  /**
   * Rate and concurrency limits of this tool per caller, over the `limits.default` option (the
   * option's `limits.tools` entry wins over these, field by field); `false` exempts it. Not sent
   * to clients.
   */
  limits?: ToolLimit | false
  /**
   * Whether a call may run as a task (the 2026-07-28 Tasks extension, `io.modelcontextprotocol/tasks`):
   * `'forbidden'` (the default) always inline; `'optional'` as a task when the client declared the
   * extension, inline otherwise; `'required'` only as a task (a client without the extension gets
   * -32021; a handshake-era session -32601). The same handler runs either way. Advertised as
   * `execution.taskSupport`. Not combinable with `handle` or `session`.
   */
  taskSupport?: TaskSupport
  /**
   * Runs before the task is created (with `taskSupport`), inline in the request: what it asks with
   * `ctx.elicit`/`sample`/`roots` goes back as ordinary `input_required` rounds, and what it puts in
   * `ctx.state` is the task handler's `ctx.state`. Gather input first, then go async (SEP-2663's
   * MRTR → task composition). Where the call runs inline it runs just before the handler.
   */
  beforeTask?: (args: ToolArgs<I>, ctx: McpContext) => void | Promise<void>
}

/** See {@link ToolDefinition.taskSupport}. */
export type TaskSupport = 'forbidden' | 'optional' | 'required'

export type { ToolArgs, ToolSchema, ToolStructured, SchemaStatic, FromJsonSchema, StandardSchemaV1, StandardSchemaV1Props, StandardJsonSchemaConverter, StandardResult } from './schema.js'

/** A tool handler may return a full result, a string (one text block), or content blocks. */
export type ToolReturn = CallToolResult | string | ContentBlock[]

/**
 * What a handler of a tool with `output` returns: a result whose `structuredContent` has the
 * output schema's type, or an error result (`isError: true`, then nothing is checked).
 */
export type StructuredToolResult<S> =
  | (Omit<CallToolResult, 'structuredContent' | 'isError'> & { structuredContent: S, isError?: false })
  | (CallToolResult & { isError: true })

/** What a tool handler returns, given the tool's `output` (or none). */
export type ToolResultFor<O> = [O] extends [undefined] ? ToolReturn : StructuredToolResult<ToolStructured<O>>

export type ToolHandler<I = undefined, O = undefined> =
  (args: ToolArgs<I>, ctx: McpContext) => ToolResultFor<O> | Promise<ToolResultFor<O>>

/**
 * What `update()` of a registered tool takes: any part of its definition (an `undefined` value
 * removes an optional part, e.g. `output: undefined`), a new handler, or `enabled`.
 */
export type ToolUpdate<I extends ToolSchema | undefined, O extends ToolSchema | undefined> =
  Partial<ToolDefinition<I, O>> & { handler?: ToolHandler<I, O>, enabled?: boolean }

/**
 * A registered tool, as `fastify.mcp.tool()` returns it. A disabled tool is absent from
 * tools/list and unknown to tools/call (-32602, as an unregistered one); every change that clients
 * can see sends `notifications/tools/list_changed` (after the server started).
 */
export interface ToolHandle<I extends ToolSchema | undefined = undefined, O extends ToolSchema | undefined = undefined> {
  /** The tool's current name. */
  readonly name: string
  readonly enabled: boolean
  /** Whether it was removed (`remove()` or `removeTool(name)`); a removed handle refuses changes. */
  readonly removed: boolean
  enable (): void
  disable (): void
  /** Changes the definition (validated as in `tool()`), the handler, or `enabled`. */
  update<NI extends ToolSchema | undefined = I, NO extends ToolSchema | undefined = O> (changes: ToolUpdate<NI, NO>): void
  remove (): void
}

/** Completes a prompt argument or template variable: values for the partial `value`. */
export type Completer = (value: string, context: { arguments: Record<string, string> }) => string[] | Promise<string[]>

export interface ResourceDefinition extends AccessFields {
  uri: string
  /** Cache hint of `resources/read` for this resource (2026-07-28). */
  cache?: { ttlMs?: number, cacheScope?: 'public' | 'private' }
  name: string
  title?: string
  description: string
  mimeType?: string
  size?: number
  annotations?: Record<string, unknown>
  icons?: Icon[]
  _meta?: Record<string, unknown>
}

export interface ResourceTemplateDefinition extends AccessFields {
  uriTemplate: string
  name: string
  title?: string
  description: string
  mimeType?: string
  annotations?: Record<string, unknown>
  icons?: Icon[]
  /** Completers for template variables (`completion/complete` with `ref/resource`). */
  complete?: Record<string, Completer>
  _meta?: Record<string, unknown>
}

/** A resource handler returns the contents (or one content) for the URI read. */
export type ResourceReturn = ResourceContents | ResourceContents[] | { contents: ResourceContents[] }
export type ResourceHandler = (uri: string, ctx: McpContext) => ResourceReturn | Promise<ResourceReturn>
export type TemplateHandler = (uri: string, variables: Record<string, string>, ctx: McpContext) => ResourceReturn | Promise<ResourceReturn>

export interface PromptArgument { name: string, title?: string, description?: string, required?: boolean }

export interface PromptDefinition extends AccessFields {
  name: string
  title?: string
  description: string
  arguments?: PromptArgument[]
  icons?: Icon[]
  /** Completers for arguments (`completion/complete` with `ref/prompt`). */
  complete?: Record<string, Completer>
  _meta?: Record<string, unknown>
}

export interface PromptMessage { role: 'user' | 'assistant', content: ContentBlock }
export interface GetPromptResult { description?: string, messages: PromptMessage[], _meta?: Record<string, unknown> }
export type PromptHandler = (args: Record<string, string>, ctx: McpContext) => GetPromptResult | PromptMessage[] | Promise<GetPromptResult | PromptMessage[]>

/** A registered tool, as the methods read it (the values of `app.mcp.tools`, read-only for applications). */
export interface ToolEntry {
  descriptor: Record<string, unknown>
  validateInput: Validator
  validateOutput: Validator | null
  handler: (args: Record<string, unknown>, ctx: McpContext) => ToolReturn | Promise<ToolReturn>
  /** The argument carrying a state handle, and its kind (see {@link ToolDefinition.handle}). */
  handle: { argument: string, kind: string } | null
  /** The tool needs a handshake-era session. */
  needsSession: boolean
  /** `annotations.readOnlyHint` is `true`: its calls read snapshots and may not write (`state/snapshot.ts`). */
  readOnly: boolean
  /** Who sees and may call it (`undefined`: everyone). */
  access: AccessRule | undefined
  /** The definition's own limits (validated), if any. */
  limits: ToolLimit | false | undefined
  /** Whether calls may or must run as tasks (see {@link ToolDefinition.taskSupport}). */
  taskSupport: TaskSupport
  /** See {@link ToolDefinition.beforeTask}. */
  beforeTask: ((args: Record<string, unknown>, ctx: McpContext) => void | Promise<void>) | null
}
/** A registered resource (the values of `app.mcp.resources`, read-only for applications). */
export interface ResourceEntry { descriptor: Record<string, unknown>, cache: ResourceDefinition['cache'], handler: ResourceHandler, access: AccessRule | undefined }
/** A registered resource template (the values of `app.mcp.templates`, read-only for applications). */
export interface TemplateEntry {
  descriptor: Record<string, unknown>
  compiled: CompiledTemplate
  complete: Record<string, Completer>
  handler: TemplateHandler
  access: AccessRule | undefined
}
/** A registered prompt (the values of `app.mcp.prompts`, read-only for applications). */
export interface PromptEntry { descriptor: Record<string, unknown>, def: PromptDefinition, handler: PromptHandler, access: AccessRule | undefined }

/** A registered resource (see {@link ToolHandle}; `notifications/resources/list_changed`). */
export interface ResourceHandle {
  readonly uri: string
  readonly enabled: boolean
  readonly removed: boolean
  enable (): void
  disable (): void
  update (changes: Partial<ResourceDefinition> & { handler?: ResourceHandler, enabled?: boolean }): void
  remove (): void
}

/** A registered resource template (see {@link ToolHandle}; `notifications/resources/list_changed`). */
export interface ResourceTemplateHandle {
  readonly uriTemplate: string
  readonly enabled: boolean
  readonly removed: boolean
  enable (): void
  disable (): void
  update (changes: Partial<ResourceTemplateDefinition> & { handler?: TemplateHandler, enabled?: boolean }): void
  remove (): void
}

/** A registered prompt (see {@link ToolHandle}; `notifications/prompts/list_changed`). */
export interface PromptHandle {
  readonly name: string
  readonly enabled: boolean
  readonly removed: boolean
  enable (): void
  disable (): void
  update (changes: Partial<PromptDefinition> & { handler?: PromptHandler, enabled?: boolean }): void
  remove (): void
}

export type ListKind = 'tools' | 'resources' | 'prompts'
