/**
 * `fastify.mcp`: the registry of tools, resources and prompts, plus what application code may do
 * with the running server (notify sessions, read its status). Also declares the request
 * decorators the plugin adds.
 */
import type { McpPrincipal } from './context.js'
import { Registry } from './features/registry.js'
import type { EngineStatus, McpEngine } from './protocol/engine.js'
import type { SessionHandle } from './sessions/session-handle.js'

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

  /** What this instance holds right now (counts; 0 when idle). */
  status (): EngineStatus {
    return this.#engine?.status() ?? { sessionsHeld: 0, getStreams: 0, listenStreams: 0 }
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
