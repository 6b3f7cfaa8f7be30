/**
 * The registry of tools, resources, resource templates and prompts (`fastify.mcp`). Definitions
 * are validated and their schemas compiled when they are added; changes after the server started
 * are announced through the `changed` event (→ `notifications/<kind>/list_changed`).
 */
import { EventEmitter } from 'node:events'
import type { Static, TSchema } from '@sinclair/typebox'
import type { McpContext } from '../context.js'
import { FST_ERR_MCP_INVALID_DEFINITION } from '../errors.js'
import { compile, toPlainSchema, type Validator } from './schema.js'
import { compileTemplate, matchTemplate } from './uri-template.js'

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

/** What `fastify.mcp.tool()` takes. `input` / `output` are TypeBox or plain JSON Schema objects. */
export interface ToolDefinition<I extends TSchema | Record<string, unknown> = Record<string, unknown>> {
  /** 1–64 chars of `[A-Za-z0-9_./-]`. */
  name: string
  title?: string
  description: string
  input?: I
  output?: TSchema | Record<string, unknown>
  annotations?: ToolAnnotations
  icons?: Icon[]
  _meta?: Record<string, unknown>
}

/** Arguments a handler receives: inferred from a TypeBox `input`, else a plain record. */
export type ToolArgs<I> = I extends TSchema ? Static<I> : Record<string, unknown>

/** A tool handler may return a full result, a string (one text block), or content blocks. */
export type ToolReturn = CallToolResult | string | ContentBlock[]
export type ToolHandler<I> = (args: ToolArgs<I>, ctx: McpContext) => ToolReturn | Promise<ToolReturn>

/** Completes a prompt argument or template variable: values for the partial `value`. */
export type Completer = (value: string, context: { arguments: Record<string, string> }) => string[] | Promise<string[]>

export interface ResourceDefinition {
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

export interface ResourceTemplateDefinition {
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

export interface PromptDefinition {
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

/** @internal A registered tool. */
export interface ToolEntry {
  descriptor: Record<string, unknown>
  validateInput: Validator
  validateOutput: Validator | null
  handler: ToolHandler<unknown>
}
/** @internal */
export interface ResourceEntry { descriptor: Record<string, unknown>, cache: ResourceDefinition['cache'], handler: ResourceHandler }
/** @internal */
export interface TemplateEntry {
  descriptor: Record<string, unknown>
  compiled: ReturnType<typeof compileTemplate>
  complete: Record<string, Completer>
  handler: TemplateHandler
}
/** @internal */
export interface PromptEntry { descriptor: Record<string, unknown>, def: PromptDefinition, handler: PromptHandler }

export type ListKind = 'tools' | 'resources' | 'prompts'

const TOOL_NAME = /^[A-Za-z0-9_./-]{1,64}$/

function strip<T extends Record<string, unknown>> (o: T): T {
  for (const k of Object.keys(o)) if (o[k] === undefined) delete o[k]
  return o
}

/**
 * `x-mcp-header` (2026-07-28): only on primitive string/integer/boolean properties reached through
 * `properties`, with a non-empty header-safe name, unique case-insensitively.
 */
function checkHeaderParams (tool: string, schema: Record<string, unknown>): void {
  const props = schema.properties as Record<string, Record<string, unknown>> | undefined
  const seen = new Set<string>()
  for (const [prop, s] of Object.entries(props ?? {})) {
    const name = s?.['x-mcp-header']
    if (name === undefined) continue
    if (typeof name !== 'string' || !/^[A-Za-z0-9-]+$/.test(name)) {
      throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}" property "${prop}": x-mcp-header must be a non-empty token of [A-Za-z0-9-]`)
    }
    if (!['string', 'integer', 'boolean'].includes(s.type as string)) {
      throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}" property "${prop}": x-mcp-header is only allowed on string, integer or boolean properties`)
    }
    if (seen.has(name.toLowerCase())) throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}": x-mcp-header "${name}" is used twice`)
    seen.add(name.toLowerCase())
  }
}

/**
 * The registry. Events: `changed` (kind) when a list changes after `start()`, and
 * `resourceUpdated` (uri) when the application reports a resource change.
 */
export class Registry extends EventEmitter<{ changed: [ListKind], resourceUpdated: [string] }> {
  readonly tools = new Map<string, ToolEntry>()
  readonly resources = new Map<string, ResourceEntry>()
  readonly templates = new Map<string, TemplateEntry>()
  readonly prompts = new Map<string, PromptEntry>()
  #started = false
  /** @internal Bumped by every change of the lists (lets derived data be cached). */
  revision = 0

  /** @internal Called when the server is ready: later changes are announced. */
  start (): void { this.#started = true }

  #changed (kind: ListKind): void {
    this.revision++
    if (this.#started) this.emit('changed', kind)
  }

  /** Adds a tool. The handler's arguments are typed from a TypeBox `input`. */
  tool<I extends TSchema | Record<string, unknown>> (def: ToolDefinition<I>, handler: ToolHandler<I>): this {
    if (typeof def !== 'object' || def === null) throw new FST_ERR_MCP_INVALID_DEFINITION('tool', 'definition must be an object')
    if (typeof def.name !== 'string' || !TOOL_NAME.test(def.name)) {
      throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `name ${JSON.stringify(def.name)} must be 1–64 characters of [A-Za-z0-9_./-]`)
    }
    if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" needs a description`)
    if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" needs a handler function`)
    if (this.tools.has(def.name)) throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" is already registered`)
    const inputSchema = def.input === undefined ? { type: 'object', properties: {} } : toPlainSchema(def.input)
    if (inputSchema.type !== 'object') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" input must be an object schema`)
    checkHeaderParams(def.name, inputSchema)
    let validateInput: Validator
    let validateOutput: Validator | null = null
    let outputSchema: Record<string, unknown> | undefined
    try {
      validateInput = compile(inputSchema)
      if (def.output !== undefined) {
        outputSchema = toPlainSchema(def.output)
        validateOutput = compile(outputSchema)
      }
    } catch (err) {
      throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" has an invalid schema: ${(err as Error).message}`)
    }
    const descriptor = strip({
      name: def.name,
      title: def.title,
      description: def.description,
      inputSchema,
      outputSchema,
      annotations: def.annotations,
      icons: def.icons,
      _meta: def._meta
    })
    this.tools.set(def.name, { descriptor, validateInput, validateOutput, handler: handler as ToolHandler<unknown> })
    this.#changed('tools')
    return this
  }

  /** Removes a tool; resolves whether it existed. */
  removeTool (name: string): boolean {
    const had = this.tools.delete(name)
    if (had) this.#changed('tools')
    return had
  }

  /** Adds a resource with a fixed URI. */
  resource (def: ResourceDefinition, handler: ResourceHandler): this {
    if (typeof def?.uri !== 'string' || !URL.canParse(def.uri)) throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `uri ${JSON.stringify(def?.uri)} must be an absolute URI`)
    if (typeof def.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a name`)
    if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a description`)
    if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a handler function`)
    if (this.resources.has(def.uri)) throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" is already registered`)
    const { cache, ...rest } = def
    this.resources.set(def.uri, { descriptor: strip({ ...rest }), cache, handler })
    this.#changed('resources')
    return this
  }

  removeResource (uri: string): boolean {
    const had = this.resources.delete(uri)
    if (had) this.#changed('resources')
    return had
  }

  /** Adds an RFC 6570 resource template. */
  resourceTemplate (def: ResourceTemplateDefinition, handler: TemplateHandler): this {
    if (typeof def?.uriTemplate !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', 'uriTemplate must be a string')
    if (typeof def.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a name`)
    if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a description`)
    if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a handler function`)
    if (this.templates.has(def.uriTemplate)) throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" is already registered`)
    let compiled
    try { compiled = compileTemplate(def.uriTemplate) } catch (err) {
      throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}": ${(err as Error).message}`)
    }
    const { complete, ...rest } = def
    this.templates.set(def.uriTemplate, { descriptor: strip({ ...rest }), compiled, complete: complete ?? {}, handler })
    this.#changed('resources')
    return this
  }

  removeResourceTemplate (uriTemplate: string): boolean {
    const had = this.templates.delete(uriTemplate)
    if (had) this.#changed('resources')
    return had
  }

  /** Adds a prompt. */
  prompt (def: PromptDefinition, handler: PromptHandler): this {
    if (typeof def?.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', 'name must be a non-empty string')
    if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" needs a description`)
    if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" needs a handler function`)
    if (this.prompts.has(def.name)) throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" is already registered`)
    for (const a of def.arguments ?? []) {
      if (typeof a?.name !== 'string' || a.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" has an argument without a name`)
    }
    const { complete: _c, ...rest } = def
    this.prompts.set(def.name, { descriptor: strip({ ...rest }), def, handler })
    this.#changed('prompts')
    return this
  }

  removePrompt (name: string): boolean {
    const had = this.prompts.delete(name)
    if (had) this.#changed('prompts')
    return had
  }

  /**
   * Announces that a list changed for a reason the registry cannot see (e.g. it depends on
   * external state): `notifications/<kind>/list_changed` goes out as for add/remove.
   */
  listChanged (kind: ListKind): void {
    this.#changed(kind)
  }

  /** Tells subscribers that a resource's content changed (`notifications/resources/updated`). */
  resourceUpdated (uri: string): void {
    this.emit('resourceUpdated', uri)
  }

  /** @internal Finds the handler for a URI: a fixed resource, else the first matching template. */
  findResource (uri: string): { handler: (ctx: McpContext) => ResourceReturn | Promise<ResourceReturn> } | null {
    const fixed = this.resources.get(uri)
    if (fixed !== undefined) return { handler: (ctx) => fixed.handler(uri, ctx) }
    for (const t of this.templates.values()) {
      const vars = matchTemplate(t.compiled, uri)
      if (vars !== null) return { handler: (ctx) => t.handler(uri, vars, ctx) }
    }
    return null
  }
}
