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
import { dependsOnPrincipal, type AccessRule, type AccessTarget } from '../auth/access.js'
import type { McpContext } from '../context.js'
import { FST_ERR_MCP_INVALID_DEFINITION } from '../errors.js'
import { kindProblem, type HandleKind } from '../state/handles.js'
import { buildPrompt, buildResource, buildTemplate, buildTool } from './build-entries.js'
import { Catalog, PromptHandleImpl, ResourceHandleImpl, TemplateHandleImpl, ToolHandleImpl, type AnyToolDefinition, type AnyToolHandler } from './catalog.js'
import type {
  ListKind, PromptDefinition, PromptEntry, PromptHandle, PromptHandler, ResourceDefinition, ResourceEntry,
  ResourceHandle, ResourceHandler, ResourceReturn, ResourceTemplateDefinition, ResourceTemplateHandle,
  TemplateEntry, TemplateHandler, ToolDefinition, ToolEntry, ToolHandle, ToolHandler
} from './definitions.js'
import type { ToolSchema } from './schema.js'
import { matchTemplate } from './uri-template.js'

// The public types live with the definitions; importers of the registry keep one door.
export type * from './definitions.js'

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
  readonly #templates = new Catalog<ResourceTemplateDefinition, TemplateHandler, TemplateEntry>(this.templates,
    'resource template', 'resources', d => d?.uriTemplate, buildTemplate, this.#changedBound)

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
