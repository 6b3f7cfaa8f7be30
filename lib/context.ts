/**
 * The `ctx` a tool, resource or prompt handler receives. One handler serves every request; the
 * methods that talk to the client (`elicit`, `sample`, `roots`) send a request on the POST's SSE
 * stream and await the client's answer.
 */
import type { FastifyRequest } from 'fastify'
import type { SessionHandle } from './sessions/session-handle.js'

/** RFC 5424 levels used by MCP logging, least severe first. */
export const LOG_LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'] as const
export type LogLevel = typeof LOG_LEVELS[number]

/** Who made the request, as returned by `auth.authenticate` (or the resource server's token check). */
export interface McpPrincipal {
  /** Stable identifier; sessions are bound to it. */
  id: string
  [key: string]: unknown
}

/** Parameters of a form-mode elicitation (`elicitation/create`). */
export interface FormElicitParams {
  mode?: 'form'
  message: string
  requestedSchema: Record<string, unknown>
  _meta?: Record<string, unknown>
}

/** Parameters of a URL-mode elicitation (2025-11-25). */
export interface UrlElicitParams {
  mode: 'url'
  message: string
  url: string
  /** Generated when omitted. */
  elicitationId?: string
  _meta?: Record<string, unknown>
}

export interface ElicitResult {
  action: 'accept' | 'decline' | 'cancel'
  content?: Record<string, unknown>
  [key: string]: unknown
}

export interface SamplingParams {
  messages: Array<{ role: 'user' | 'assistant', content: unknown }>
  maxTokens: number
  systemPrompt?: string
  modelPreferences?: Record<string, unknown>
  includeContext?: 'none' | 'thisServer' | 'allServers'
  temperature?: number
  stopSequences?: string[]
  tools?: unknown[]
  toolChoice?: Record<string, unknown>
  metadata?: Record<string, unknown>
  [key: string]: unknown
}

export interface SamplingResult {
  role: 'assistant'
  content: unknown
  model: string
  stopReason?: string
  [key: string]: unknown
}

export interface Root { uri: string, name?: string, [key: string]: unknown }

export interface ProgressUpdate {
  progress: number
  total?: number
  message?: string
}

/** Minting and ending state handles from a handler (see `app.mcp.handleKind`). */
export interface HandleMinter {
  /**
   * Mints a handle of `kind`, bound to this request's principal (anonymous when there is none),
   * with initial application `data`; resolves its id (192 random bits, URL-safe).
   */
  create (kind: string, data?: Record<string, unknown>): Promise<string>
  /** Ends one of this principal's handles of `kind`; resolves whether it existed. */
  end (kind: string, id: string): Promise<boolean>
}

/** The context of one handler run. */
export interface McpContext {
  /** Aborted when the client cancels the request (or the session lock is lost). */
  readonly signal: AbortSignal
  /** The Fastify request that carried the MCP request. */
  readonly request: FastifyRequest
  /** The session handle (handshake-era requests), or `null`. */
  readonly session: SessionHandle | null
  /**
   * The state of the handle this call works on (a tool that declares `handle`), held under its
   * lock for the call (`get/set/has/delete/keys`, written back when the call ends), or `null`.
   */
  readonly handle: SessionHandle | null
  /** Mints and ends state handles. */
  readonly handles: HandleMinter
  /** The authenticated principal, or `null`. */
  readonly principal: McpPrincipal | null
  /** The JSON-RPC id of the request being handled. */
  readonly requestId: string | number
  /**
   * The idempotency key the client sent with this `tools/call` (`params.idempotencyKey`, the
   * `_meta` key `fastify-mcp-http/idempotencyKey`, or the `Idempotency-Key` header), or
   * `undefined`. The plugin runs a keyed call once per key; pass it on to an outside API with
   * idempotency of its own (payments, mail) to make the call's outside effects exactly-once too.
   */
  readonly idempotencyKey: string | undefined
  /** The request's `_meta`, if any. */
  readonly meta: Record<string, unknown> | undefined
  /**
   * The client's declared capabilities: on the 2026-07-28 wire as the request carries them; on a
   * handshake-era session the part `initialize` keeps (elicitation, sampling, roots).
   */
  readonly clientCapabilities: Record<string, unknown>
  /**
   * The handler's own data for this request. On the 2026-07-28 wire it survives the
   * `input_required` rounds: it travels sealed in `requestState` and the next round's run starts
   * with it (keep it small and JSON-serializable; a sealed state over 64 KiB fails the round). On
   * the handshake era a handler runs once per request (it awaits the client's answers in place),
   * so it is a plain object that lives as long as the request.
   */
  state: Record<string, unknown>
  /**
   * Reports progress. Does nothing when the request carried no progress token; values must
   * increase (a non-increasing value is dropped with a debug log); never sent after the response.
   */
  progress (update: ProgressUpdate): Promise<void>
  /** Sends `notifications/message` on this request's stream when `level` passes the client's filter. */
  log (level: LogLevel, data: unknown, logger?: string): Promise<void>
  /** Asks the user (form or URL mode) through the client. Throws when the client did not declare the mode. */
  elicit (key: string, params: FormElicitParams | UrlElicitParams): Promise<ElicitResult>
  /** Asks the client's LLM. Throws when the client did not declare `sampling`. */
  sample (key: string, params: SamplingParams): Promise<SamplingResult>
  /** Lists the client's roots. Throws when the client did not declare `roots`. */
  roots (key: string): Promise<Root[]>
  /**
   * Closes the current SSE connection (sending `retry` first) without ending the request: the
   * client reconnects with GET + `Last-Event-ID` and receives the rest (2025-11-25 SSE polling).
   */
  closeSSEStream (retryMs?: number): void
}

/**
 * Thrown (internally) out of `ctx.elicit`/`sample`/`roots` on the 2026-07-28 wire when the answer is
 * not in `inputResponses` yet: the run ends and the client gets an `input_required` result. A
 * handler that catches errors around those calls must let this one through.
 */
export class InputRequiredSignal extends Error {
  constructor () {
    super('input required from the client')
    this.name = 'InputRequiredSignal'
  }
}
