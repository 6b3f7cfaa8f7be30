/**
 * `fastify.mcp`: the registry of tools, resources and prompts, plus what application code may do
 * with the running server (notify sessions, read its status). Also declares the request
 * decorators the plugin adds.
 */
import type { McpPrincipal } from './context.js'
import { Registry } from './features/registry.js'
import type { EngineStatus, McpEngine } from './protocol/engine.js'
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

/** `fastify.mcp`: the registry of tools, resources and prompts, and helpers. */
export class McpDecorator extends Registry {
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
  status (): EngineStatus {
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
    /** The principal `authenticate` returned, or `null`. */
    mcpPrincipal: McpPrincipal | null
  }
}
