/**
 * `fastify.mcp`: the registry of tools, resources and prompts, plus what application code may do
 * with the running server (notify sessions, read its status). Also declares the request
 * decorators the plugin adds.
 */
import type { McpPrincipal } from './context.js'
import { Registry } from './features/registry.js'
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
export interface EngineStatus {
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
