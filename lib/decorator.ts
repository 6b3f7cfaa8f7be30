/**
 * `fastify.mcp`: the registry of tools, resources and prompts, plus what application code may do
 * with the running server (notify sessions, read its status). Also declares the request
 * decorators the plugin adds.
 */
import type { McpPrincipal } from './context.js'
import type {
  ListKind, PromptDefinition, PromptEntry, PromptHandle, PromptHandler, ResourceDefinition, ResourceEntry, ResourceHandle, ResourceHandler,
  ResourceTemplateDefinition, ResourceTemplateHandle, TemplateEntry, TemplateHandler, ToolDefinition, ToolEntry, ToolHandle, ToolHandler
} from './features/definitions.js'
import { Registry } from './features/registry.js'
import type { ToolSchema } from './features/schema.js'
import type { HandleKind } from './state/handles.js'
import type { McpEngine } from './protocol/engine.js'
import type { SessionHandle } from './sessions/session-handle.js'
import type { JsonValue } from './sessions/session-store.js'

/** `app.mcp.handles`: state handles from application code (see {@link McpDecorator.handles}). */
export interface HandleAdmin {
  /** Mints a handle of `kind` for `principal` (default anonymous) with initial `data`; resolves its id. */
  create (kind: string, options?: { principal?: McpPrincipal | null, data?: Record<string, unknown> }): Promise<string>
  /** A handle's application keys, or `null` when unknown, expired, ended (or not `principal`'s). */
  read (kind: string, id: string, principal?: McpPrincipal | null): Promise<Record<string, unknown> | null>
  /** Ends a handle; resolves whether it existed (and was `principal`'s, when given). */
  end (kind: string, id: string, principal?: McpPrincipal | null): Promise<boolean>
}

/** What this instance holds right now, for operators and tests (all counts; 0 when idle). */
export interface McpStatus {
  /** Sessions this instance holds something of (a request in flight, a waiting handler, a stream). */
  sessionsHeld: number
  /** Sessions' GET streams open on this instance. */
  getStreams: number
  /** 2026-07-28 listen streams open on this instance. */
  listenStreams: number
  /**
   * Requests of this instance queued for a lock: a session's (the handshake era with a
   * `sessions.lock`) or a state handle's (a tool on a handle, both eras). Tasks take their lease
   * without waiting, so they never queue.
   */
  lockWaiters: number
  /** Requests to clients (elicitation, sampling, roots) whose answer a handler of this instance waits for. */
  pendingClientRequests: number
  /** POSTs running on this instance (both wires), those a drain waits for. */
  inflightRequests: number
  /** 2026-07-28 tasks whose handler runs on this instance; a drain waits for them too. */
  runningTasks: number
  /** Whether `app.close()` has started draining this instance (new requests get 503). */
  draining: boolean
}

/**
 * The registry of `app.mcp`: adding and removing definitions (each add returns a handle: enable,
 * disable, update, remove), and read-only views of what is enabled — a change goes through the
 * registry, which validates it and tells clients.
 */
export interface McpRegistry {
  /** The enabled tools, by name, in registration order. */
  readonly tools: ReadonlyMap<string, ToolEntry>
  /** The enabled resources, by URI. */
  readonly resources: ReadonlyMap<string, ResourceEntry>
  /** The enabled resource templates, by URI template. */
  readonly templates: ReadonlyMap<string, TemplateEntry>
  /** The enabled prompts, by name. */
  readonly prompts: ReadonlyMap<string, PromptEntry>
  /** The registered state handle kinds, by name. */
  readonly handleKinds: ReadonlyMap<string, HandleKind>
  /**
   * Registers a kind of state handle (`basket`): its handles are minted by tools
   * (`ctx.handles.create`), passed by clients as an argument that tools declare (`handle`), and
   * expire after `ttl` ms without use (at least 1000). Register a kind before the tools that
   * declare it, once.
   * @throws {FST_ERR_MCP_INVALID_DEFINITION} for a bad name or ttl, or a kind registered already.
   */
  handleKind (name: string, options: { ttl: number }): void
  /**
   * Adds a tool and returns its handle. The handler's arguments are typed from `input` and its
   * `structuredContent` from `output` (Standard Schema, TypeBox, or an `as const` JSON Schema).
   */
  tool<I extends ToolSchema | undefined = undefined, O extends ToolSchema | undefined = undefined> (def: ToolDefinition<I, O>, handler: ToolHandler<I, O>): ToolHandle<I, O>
  /** Removes a tool (enabled or not); whether it existed. */
  removeTool (name: string): boolean
  /** Adds a resource with a fixed URI and returns its handle. */
  resource (def: ResourceDefinition, handler: ResourceHandler): ResourceHandle
  /** Removes a resource (enabled or not); whether it existed. */
  removeResource (uri: string): boolean
  /** Adds an RFC 6570 resource template and returns its handle. */
  resourceTemplate (def: ResourceTemplateDefinition, handler: TemplateHandler): ResourceTemplateHandle
  /** Removes a resource template (enabled or not); whether it existed. */
  removeResourceTemplate (uriTemplate: string): boolean
  /** Adds a prompt and returns its handle. */
  prompt (def: PromptDefinition, handler: PromptHandler): PromptHandle
  /** Removes a prompt (enabled or not); whether it existed. */
  removePrompt (name: string): boolean
  /**
   * Announces that a list changed for a reason the registry cannot see (e.g. it depends on
   * external state): `notifications/<kind>/list_changed` goes out as for add/remove.
   */
  listChanged (kind: ListKind): void
  /** Tells subscribers that a resource's content changed (`notifications/resources/updated`). */
  resourceUpdated (uri: string): void
}

/** `fastify.mcp`: the registry of tools, resources and prompts, and what application code may do with the running server. */
export interface McpDecorator extends McpRegistry {
  /**
   * Sends a notification to one session's GET stream, on whatever instance holds it (dropped
   * when the session has no open GET stream).
   */
  notify (sessionId: string, method: string, params?: Record<string, unknown>): Promise<void>
  /** Sends a notification to every session's GET stream, on every instance. */
  notifyAll (method: string, params?: Record<string, unknown>): Promise<void>
  /**
   * State handles out of band, for application code outside a tool call (an admin route, a job):
   * no lock is taken. Given a principal (`null`: anonymous), only that principal's handles are
   * found; without, any.
   */
  readonly handles: HandleAdmin
  /** What this instance holds right now (counts; 0 when idle). */
  status (): McpStatus
}

/** The object behind `fastify.mcp` (the package exports its type, {@link McpDecorator}, not the class). */
export class PluginDecorator extends Registry implements McpDecorator {
  #engine: McpEngine | null = null

  /** @internal Connects the decorator to the running engine. */
  attach (engine: McpEngine): void { this.#engine = engine }

  /**
   * Sends a notification to one session's GET stream, on whatever instance holds it (dropped
   * when the session has no open GET stream).
   */
  async notify (sessionId: string, method: string, params?: Record<string, unknown>): Promise<void> {
    await this.#engine?.notify(sessionId, method, params)
  }

  /** Sends a notification to every session's GET stream, on every instance. */
  async notifyAll (method: string, params?: Record<string, unknown>): Promise<void> {
    await this.#engine?.notifyAll(method, params)
  }

  /**
   * State handles out of band, for application code outside a tool call (an admin route, a job):
   * no lock is taken. Given a principal (`null`: anonymous), only that principal's handles are
   * found; without, any.
   */
  readonly handles: HandleAdmin = {
    create: async (kind, options) => await this.#live().handles.create(kind, options?.principal ?? null, options?.data as Record<string, JsonValue>),
    read: async (kind, id, principal) => await this.#live().handles.read(kind, id, principal),
    end: async (kind, id, principal) => await this.#live().handles.end(kind, id, principal)
  }

  #live (): McpEngine {
    if (this.#engine === null) throw new Error('fastify-mcp-http is not running')
    return this.#engine
  }

  /** What this instance holds right now (counts; 0 when idle). */
  status (): McpStatus {
    return this.#engine?.status() ?? { sessionsHeld: 0, getStreams: 0, listenStreams: 0, lockWaiters: 0, pendingClientRequests: 0, inflightRequests: 0, runningTasks: 0, draining: false }
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The MCP registry (tools, resources, prompts) and helpers. */
    mcp: McpDecorator
  }
  interface FastifyRequest {
    /** The MCP session of this request (handshake-era requests), or `null`. */
    mcpSession: SessionHandle | null
    /** The principal `auth` gave, or `null`. */
    mcpPrincipal: McpPrincipal | null
  }
}
