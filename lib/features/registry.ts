/**
 * The registry of tools, resources, resource templates and prompts (`fastify.mcp`). Definitions
 * are validated and their schemas compiled when they are added; each add returns a handle
 * (enable, disable, update, remove). Changes clients can see after the server started are
 * announced through the `changed` event (→ `notifications/<kind>/list_changed`).
 *
 * The public maps (`tools`, `resources`, `templates`, `prompts`) hold what is enabled, in
 * registration order: every reader (the lists, the calls, the capabilities, the 2026-07-28 header
 * checks) sees a disabled entry as absent without knowing about `enabled`.
 *
 * Definitions may also say who sees and may use them (`scopes`, `visible`: `auth/access.ts`) and,
 * for tools, how often a caller may call them (`limits`: `limits/policy.ts`). Both are validated
 * with the rest of the definition (by `update()` too) and never reach a descriptor.
 */
import { EventEmitter } from 'node:events'
import { accessRuleOf, dependsOnPrincipal, type AccessFields, type AccessRule, type AccessTarget } from '../auth/access.js'
import type { McpContext } from '../context.js'
import { FST_ERR_MCP_INVALID_DEFINITION } from '../errors.js'
import { checkToolLimit, type ToolLimit } from '../limits/policy.js'
import { kindProblem, type HandleKind } from '../state/handles.js'
import { toolState, type ToolHandleOption } from './tool-state.js'
import { compileSchema, type ToolArgs, type ToolSchema, type ToolStructured, type Validator } from './schema.js'
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
}

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

/** @internal A registered tool, as the methods read it. */
export interface ToolEntry {
  descriptor: Record<string, unknown>
  validateInput: Validator
  validateOutput: Validator | null
  handler: (args: Record<string, unknown>, ctx: McpContext) => ToolReturn | Promise<ToolReturn>
  /** The argument carrying a state handle, and its kind (see {@link ToolDefinition.handle}). */
  handle: { argument: string, kind: string } | null
  /** The tool needs a handshake-era session. */
  needsSession: boolean
  /** Who sees and may call it (`undefined`: everyone). */
  access: AccessRule | undefined
  /** The definition's own limits (validated), if any. */
  limits: ToolLimit | false | undefined
}
/** @internal */
export interface ResourceEntry { descriptor: Record<string, unknown>, cache: ResourceDefinition['cache'], handler: ResourceHandler, access: AccessRule | undefined }
/** @internal */
export interface TemplateEntry {
  descriptor: Record<string, unknown>
  compiled: ReturnType<typeof compileTemplate>
  complete: Record<string, Completer>
  handler: TemplateHandler
  access: AccessRule | undefined
}
/** @internal */
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

const TOOL_NAME = /^[A-Za-z0-9_./-]{1,64}$/

/** The access rule of a definition (`scopes`, `visible`), or FST_ERR_MCP_INVALID_DEFINITION. */
function accessOf (what: string, name: string, def: AccessFields): AccessRule | undefined {
  try { return accessRuleOf(def) } catch (err) { throw new FST_ERR_MCP_INVALID_DEFINITION(what, `"${name}": ${(err as Error).message}`) }
}

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

/** Validates a tool definition and compiles its schemas (`kinds`: the registered handle kinds). */
function buildTool (def: ToolDefinition<ToolSchema | undefined, ToolSchema | undefined>, handler: unknown, kinds: ReadonlyMap<string, HandleKind>): ToolEntry {
  if (typeof def !== 'object' || def === null) throw new FST_ERR_MCP_INVALID_DEFINITION('tool', 'definition must be an object')
  if (typeof def.name !== 'string' || !TOOL_NAME.test(def.name)) {
    throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `name ${JSON.stringify(def.name)} must be 1–64 characters of [A-Za-z0-9_./-]`)
  }
  if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" needs a description`)
  if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" needs a handler function`)
  let input, output
  try {
    input = def.input === undefined ? compileSchema({ type: 'object', properties: {} }, 'input') : compileSchema(def.input, 'input')
    output = def.output === undefined ? undefined : compileSchema(def.output, 'output')
  } catch (err) {
    throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" has an invalid schema: ${(err as Error).message}`)
  }
  if (input.json.type !== 'object') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" input must be an object schema`)
  checkHeaderParams(def.name, input.json)
  const state = toolState(def.name, def as Parameters<typeof toolState>[1], input.json, kinds)
  const access = accessOf('tool', def.name, def)
  const limits = def.limits === undefined || def.limits === false
    ? def.limits
    : checkToolLimit(def.limits, `"${def.name}" limits`, (name, why) => { throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `${name} ${why}`) })
  // Field by field: access rules and limits are the server's, never sent.
  const descriptor = strip({
    name: def.name,
    title: def.title,
    description: state.description,
    inputSchema: input.json,
    outputSchema: output?.json,
    annotations: def.annotations,
    icons: def.icons,
    _meta: def._meta
  })
  return {
    descriptor,
    validateInput: input.validate,
    validateOutput: output?.validate ?? null,
    handler: handler as ToolEntry['handler'],
    access,
    limits,
    handle: state.handle,
    needsSession: state.needsSession
  }
}

function buildResource (def: ResourceDefinition, handler: ResourceHandler): ResourceEntry {
  if (typeof def?.uri !== 'string' || !URL.canParse(def.uri)) throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `uri ${JSON.stringify(def?.uri)} must be an absolute URI`)
  if (typeof def.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a name`)
  if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a description`)
  if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a handler function`)
  const access = accessOf('resource', def.uri, def)
  // The descriptor is the rest of the definition: what is not for clients is taken out.
  const { cache, scopes: _s, visible: _v, ...rest } = def
  return { descriptor: strip({ ...rest }), cache, handler, access }
}

function buildTemplate (def: ResourceTemplateDefinition, handler: TemplateHandler): TemplateEntry {
  if (typeof def?.uriTemplate !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', 'uriTemplate must be a string')
  if (typeof def.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a name`)
  if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a description`)
  if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a handler function`)
  let compiled
  try { compiled = compileTemplate(def.uriTemplate) } catch (err) {
    throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}": ${(err as Error).message}`)
  }
  const access = accessOf('resource template', def.uriTemplate, def)
  const { complete, scopes: _s, visible: _v, ...rest } = def
  return { descriptor: strip({ ...rest }), compiled, complete: complete ?? {}, handler, access }
}

function buildPrompt (def: PromptDefinition, handler: PromptHandler): PromptEntry {
  if (typeof def?.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', 'name must be a non-empty string')
  if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" needs a description`)
  if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" needs a handler function`)
  for (const a of def.arguments ?? []) {
    if (typeof a?.name !== 'string' || a.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" has an argument without a name`)
  }
  const access = accessOf('prompt', def.name, def)
  const { complete: _c, scopes: _s, visible: _v, ...rest } = def
  return { descriptor: strip({ ...rest }), def, handler, access }
}

/** One registration: its definition and handler (what `update()` merges into), and what readers see. */
interface Slot<D, H, E> {
  key: string
  def: D
  handler: H
  entry: E
  enabled: boolean
  removed: boolean
}

/**
 * The registrations of one kind: all of them (enabled or not) in registration order, and the
 * public map of the enabled ones (kept in the same order).
 */
class Catalog<D extends object, H, E> {
  readonly #all = new Map<string, Slot<D, H, E>>()

  constructor (
    readonly visible: Map<string, E>,
    readonly what: string,
    readonly list: ListKind,
    readonly keyOf: (def: D) => string,
    readonly build: (def: D, handler: H) => E,
    readonly changed: (kind: ListKind, visible: boolean) => void
  ) {}

  add (def: D, handler: H): Slot<D, H, E> {
    const entry = this.build(def, handler)
    const key = this.keyOf(def)
    if (this.#all.has(key)) throw new FST_ERR_MCP_INVALID_DEFINITION(this.what, `"${key}" is already registered`)
    const slot: Slot<D, H, E> = { key, def, handler, entry, enabled: true, removed: false }
    this.#all.set(key, slot)
    this.visible.set(key, entry)
    this.changed(this.list, true)
    return slot
  }

  /** Removes the registration under `key`; whether there was one. */
  remove (key: string): boolean {
    const slot = this.#all.get(key)
    if (slot === undefined) return false
    this.#all.delete(key)
    this.visible.delete(key)
    slot.removed = true
    this.changed(this.list, slot.enabled)
    return true
  }

  #live (slot: Slot<D, H, E>): void {
    if (slot.removed) throw new FST_ERR_MCP_INVALID_DEFINITION(this.what, `"${slot.key}" was removed; register it again`)
  }

  setEnabled (slot: Slot<D, H, E>, enabled: boolean): void {
    this.#live(slot)
    if (slot.enabled === enabled) return
    slot.enabled = enabled
    this.#refresh()
    this.changed(this.list, true)
  }

  /** Merges `changes` into the definition and rebuilds the entry (validated as a new one). */
  update (slot: Slot<D, H, E>, changes: Partial<D> & { handler?: H, enabled?: boolean }): void {
    this.#live(slot)
    if (typeof changes !== 'object' || changes === null) throw new FST_ERR_MCP_INVALID_DEFINITION(this.what, `"${slot.key}": update() takes an object`)
    const { handler, enabled, ...rest } = changes
    const def = { ...slot.def, ...rest } as D
    const nextHandler = handler ?? slot.handler
    const entry = this.build(def, nextHandler)
    const key = this.keyOf(def)
    if (key !== slot.key && this.#all.has(key)) throw new FST_ERR_MCP_INVALID_DEFINITION(this.what, `"${key}" is already registered`)
    const wasEnabled = slot.enabled
    if (key !== slot.key) {
      // A rename keeps the registration's place in the lists.
      const all = [...this.#all.values()]
      this.#all.clear()
      for (const s of all) this.#all.set(s === slot ? key : s.key, s)
      slot.key = key
    }
    slot.def = def
    slot.handler = nextHandler
    slot.entry = entry
    if (enabled !== undefined) slot.enabled = enabled
    this.#refresh()
    this.changed(this.list, wasEnabled || slot.enabled)
  }

  /** Rebuilds the public map from the registrations, in order. */
  #refresh (): void {
    this.visible.clear()
    for (const slot of this.#all.values()) if (slot.enabled) this.visible.set(slot.key, slot.entry)
  }
}

/** The methods every handle has, over a catalog's slot. */
class Handle<D extends object, H, E> {
  readonly #catalog: Catalog<D, H, E>
  readonly #slot: Slot<D, H, E>

  constructor (catalog: Catalog<D, H, E>, slot: Slot<D, H, E>) {
    this.#catalog = catalog
    this.#slot = slot
  }

  protected get key (): string { return this.#slot.key }
  get enabled (): boolean { return this.#slot.enabled && !this.#slot.removed }
  get removed (): boolean { return this.#slot.removed }
  enable (): void { this.#catalog.setEnabled(this.#slot, true) }
  disable (): void { this.#catalog.setEnabled(this.#slot, false) }
  update (changes: Partial<D> & { handler?: H, enabled?: boolean }): void { this.#catalog.update(this.#slot, changes) }
  remove (): void { if (!this.#slot.removed) this.#catalog.remove(this.#slot.key) }
}

type AnyToolDefinition = ToolDefinition<ToolSchema | undefined, ToolSchema | undefined>
type AnyToolHandler = ToolEntry['handler']

class ToolHandleImpl extends Handle<AnyToolDefinition, AnyToolHandler, ToolEntry> {
  get name (): string { return this.key }
}
class ResourceHandleImpl extends Handle<ResourceDefinition, ResourceHandler, ResourceEntry> implements ResourceHandle {
  get uri (): string { return this.key }
}
class TemplateHandleImpl extends Handle<ResourceTemplateDefinition, TemplateHandler, TemplateEntry> implements ResourceTemplateHandle {
  get uriTemplate (): string { return this.key }
}
class PromptHandleImpl extends Handle<PromptDefinition, PromptHandler, PromptEntry> implements PromptHandle {
  get name (): string { return this.key }
}

/**
 * The registry. Events: `changed` (kind) when a list clients see changes after `start()`, and
 * `resourceUpdated` (uri) when the application reports a resource change.
 */
export class Registry extends EventEmitter<{ changed: [ListKind], resourceUpdated: [string] }> {
  /** The enabled tools, by name, in registration order. */
  readonly tools = new Map<string, ToolEntry>()
  /** The enabled resources, by URI. */
  readonly resources = new Map<string, ResourceEntry>()
  /** The enabled resource templates, by URI template. */
  readonly templates = new Map<string, TemplateEntry>()
  /** The enabled prompts, by name. */
  readonly prompts = new Map<string, PromptEntry>()
  #started = false
  /** @internal Bumped by every change of the registrations (lets derived data be cached). */
  revision = 0

  readonly #changedBound = (kind: ListKind, visible: boolean): void => {
    this.revision++
    if (visible && this.#started) this.emit('changed', kind)
  }

  /** The registered state handle kinds, by name. */
  readonly handleKinds = new Map<string, HandleKind>()

  readonly #tools = new Catalog<AnyToolDefinition, AnyToolHandler, ToolEntry>(this.tools, 'tool', 'tools', d => d?.name,
    (d, h) => buildTool(d, h, this.handleKinds), this.#changedBound)
  readonly #resources = new Catalog<ResourceDefinition, ResourceHandler, ResourceEntry>(this.resources, 'resource', 'resources', d => d?.uri, buildResource, this.#changedBound)
  readonly #templates = new Catalog<ResourceTemplateDefinition, TemplateHandler, TemplateEntry>(this.templates, 'resource template', 'resources', d => d?.uriTemplate, buildTemplate, this.#changedBound)
  readonly #prompts = new Catalog<PromptDefinition, PromptHandler, PromptEntry>(this.prompts, 'prompt', 'prompts', d => d?.name, buildPrompt, this.#changedBound)

  /** @internal Called when the server is ready: later changes are announced. */
  start (): void { this.#started = true }

  /**
   * Registers a kind of state handle (`basket`): its handles are minted by tools
   * (`ctx.handles.create`), passed by clients as an argument that tools declare (`handle`), and
   * expire after `ttl` ms without use (at least 1000). Register a kind before the tools that
   * declare it, once.
   * @throws {FST_ERR_MCP_INVALID_DEFINITION} for a bad name or ttl, or a kind registered already.
   */
  handleKind (name: string, options: { ttl: number }): void {
    // A second is the least that outlives a call's round trip.
    const problem = kindProblem(name, options, 1000)
    if (problem !== null) throw new FST_ERR_MCP_INVALID_DEFINITION('handle kind', problem)
    // Tools describe the lifetime of their kind: it cannot change under them.
    if (this.handleKinds.has(name)) throw new FST_ERR_MCP_INVALID_DEFINITION('handle kind', `"${name}" is already registered`)
    this.handleKinds.set(name, { name, ttl: options.ttl })
  }

  /**
   * Adds a tool and returns its handle. The handler's arguments are typed from `input` and its
   * `structuredContent` from `output` (Standard Schema, TypeBox, or an `as const` JSON Schema).
   */
  tool<I extends ToolSchema | undefined = undefined, O extends ToolSchema | undefined = undefined> (
    def: ToolDefinition<I, O>, handler: ToolHandler<I, O>): ToolHandle<I, O> {
    const slot = this.#tools.add(def as AnyToolDefinition, handler as unknown as AnyToolHandler)
    return new ToolHandleImpl(this.#tools, slot) as unknown as ToolHandle<I, O>
  }

  /** Removes a tool (enabled or not); whether it existed. */
  removeTool (name: string): boolean {
    return this.#tools.remove(name)
  }

  /** Adds a resource with a fixed URI and returns its handle. */
  resource (def: ResourceDefinition, handler: ResourceHandler): ResourceHandle {
    return new ResourceHandleImpl(this.#resources, this.#resources.add(def, handler))
  }

  removeResource (uri: string): boolean {
    return this.#resources.remove(uri)
  }

  /** Adds an RFC 6570 resource template and returns its handle. */
  resourceTemplate (def: ResourceTemplateDefinition, handler: TemplateHandler): ResourceTemplateHandle {
    return new TemplateHandleImpl(this.#templates, this.#templates.add(def, handler))
  }

  removeResourceTemplate (uriTemplate: string): boolean {
    return this.#templates.remove(uriTemplate)
  }

  /** Adds a prompt and returns its handle. */
  prompt (def: PromptDefinition, handler: PromptHandler): PromptHandle {
    return new PromptHandleImpl(this.#prompts, this.#prompts.add(def, handler))
  }

  removePrompt (name: string): boolean {
    return this.#prompts.remove(name)
  }

  /**
   * Announces that a list changed for a reason the registry cannot see (e.g. it depends on
   * external state): `notifications/<kind>/list_changed` goes out as for add/remove.
   */
  listChanged (kind: ListKind): void {
    this.#changedBound(kind, true)
  }

  /** Tells subscribers that a resource's content changed (`notifications/resources/updated`). */
  resourceUpdated (uri: string): void {
    this.emit('resourceUpdated', uri)
  }

  /** @internal Finds the handler (and access rule) for a URI: a fixed resource, else the first matching template. */
  findResource (uri: string): { access: AccessRule | undefined, handler: (ctx: McpContext) => ResourceReturn | Promise<ResourceReturn> } | null {
    const fixed = this.resources.get(uri)
    if (fixed !== undefined) return { access: fixed.access, handler: (ctx) => fixed.handler(uri, ctx) }
    for (const t of this.templates.values()) {
      const vars = matchTemplate(t.compiled, uri)
      if (vars !== null) return { access: t.access, handler: (ctx) => t.handler(uri, vars, ctx) }
    }
    return null
  }

  /** @internal The access rule of what a request addresses (the route's scope gate asks). */
  accessRule (target: AccessTarget): AccessRule | undefined {
    switch (target.kind) {
      case 'tool': return this.tools.get(target.name)?.access
      case 'prompt': return this.prompts.get(target.name)?.access
      case 'template': return this.templates.get(target.uriTemplate)?.access
      case 'resource': {
        const fixed = this.resources.get(target.uri)
        if (fixed !== undefined) return fixed.access
        for (const t of this.templates.values()) if (matchTemplate(t.compiled, target.uri) !== null) return t.access
        return undefined
      }
    }
  }

  /** @internal Whether a list's content depends on the principal (an enabled entry has `visible`). */
  listDependsOnPrincipal (kind: 'tools' | 'resources' | 'templates' | 'prompts'): boolean {
    const entries: Map<string, { access: AccessRule | undefined }> =
      kind === 'tools' ? this.tools : kind === 'resources' ? this.resources : kind === 'templates' ? this.templates : this.prompts
    for (const e of entries.values()) if (dependsOnPrincipal(e.access)) return true
    return false
  }

  /** @internal Every scope the enabled definitions declare (the metadata's `scopes_supported`). */
  declaredScopes (): string[] {
    const out = new Set<string>()
    const all: Array<Map<string, { access: AccessRule | undefined }>> = [this.tools, this.resources, this.templates, this.prompts]
    for (const m of all) for (const e of m.values()) for (const s of e.access?.scopes ?? []) out.add(s)
    return [...out]
  }
}
