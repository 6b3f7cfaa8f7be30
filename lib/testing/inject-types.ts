/**
 * The public types of {@link injectClient} (`inject-client.ts`): its options, what its calls
 * resolve with, and the client's methods.
 */
import type { ElicitResult, FormElicitParams, LogLevel, Root, SamplingParams, SamplingResult, UrlElicitParams } from '../context.js'

/** A notification the server sent on a request's stream (progress, log messages). */
export interface InjectNotification {
  method: string
  params: Record<string, any>
}

/** Options of {@link injectClient}. */
export interface InjectClientOptions {
  /**
   * The revision to speak: `2025-11-25` (default), `2025-06-18` or `2025-03-26` open a
   * handshake-era session; `2026-07-28` speaks the stateless wire.
   */
  protocolVersion?: string
  /**
   * The endpoint's URL path. Default: where the plugin registered on `app` serves it (prefixes
   * included); needed when `app` is not the instance the plugin was registered on or its parent.
   */
  path?: string
  /** Headers sent with every request (e.g. `authorization`). */
  headers?: Record<string, string>
  /** The client's name and version. Default `{ name: 'inject-client', version: '1.0.0' }`. */
  clientInfo?: { name: string, version: string, [key: string]: unknown }
  /** The client's capabilities. Default: what the handlers below give (elicitation, sampling, roots). */
  capabilities?: Record<string, unknown>
  /** Answers elicitation requests (`ctx.elicit`). */
  elicit?: (params: FormElicitParams | UrlElicitParams) => ElicitResult | Promise<ElicitResult>
  /** Answers sampling requests (`ctx.sample`). */
  sample?: (params: SamplingParams) => SamplingResult | Promise<SamplingResult>
  /** The client's roots (`ctx.roots`). */
  roots?: Root[] | (() => Root[] | Promise<Root[]>)
  /** Asks for `notifications/message` from this level up (`logging/setLevel`, or `_meta` on 2026-07-28). */
  logLevel?: LogLevel
  /** Called with every notification a request's stream carries (also kept in `notifications`). */
  onNotification?: (notification: InjectNotification) => void
  /** Rounds of `input_required` a 2026-07-28 request may take. Default 10. */
  maxRounds?: number
}

/** A `tools/call` result as a test reads it (every server result is one of these). */
export interface InjectToolResult {
  content: Array<{ type: string, text?: string, [key: string]: unknown }>
  structuredContent?: Record<string, any>
  isError?: boolean
  [key: string]: unknown
}

/** Options of one request. */
export interface InjectRequestOptions {
  /** Sent as `_meta.progressToken`: the handler's `ctx.progress` then sends notifications. */
  progressToken?: string | number
  /** Headers for this request only. */
  headers?: Record<string, string>
  /**
   * `callTool` only: sent as `params.idempotencyKey`; the server runs the call once per key and
   * answers a copy with the recorded result (docs/retries-and-idempotency.md).
   */
  idempotencyKey?: string
}

/** The client {@link injectClient} returns. */
export interface InjectClient {
  /** The handshake-era session id (after `initialize`), else `null`. */
  readonly sessionId: string | null
  /** The revision spoken (negotiated, on the handshake era). */
  readonly protocolVersion: string
  /** Every notification received on request streams, in order. */
  readonly notifications: InjectNotification[]
  /**
   * `initialize` + `notifications/initialized` (handshake era) or `server/discover` (2026-07-28);
   * the result. Runs by itself before the first request.
   */
  initialize (): Promise<Record<string, any>>
  /** Sends a request; resolves its result, rejects with an {@link McpError} for an error answer. */
  request (method: string, params?: Record<string, unknown>, options?: InjectRequestOptions): Promise<Record<string, any>>
  /** Sends a notification (202 expected). */
  notify (method: string, params?: Record<string, unknown>): Promise<void>
  /** `tools/call`: the tool's result (`isError: true` when the tool failed). */
  callTool (name: string, args?: Record<string, unknown>, options?: InjectRequestOptions): Promise<InjectToolResult>
  /** `tools/list`, every page: `{ tools }`, as the official client's `listTools()` resolves (one page there). */
  listTools (): Promise<{ tools: Array<Record<string, any>> }>
  /** `resources/read`. */
  readResource (uri: string, options?: InjectRequestOptions): Promise<Record<string, any>>
  /** `prompts/get`. */
  getPrompt (name: string, args?: Record<string, string>, options?: InjectRequestOptions): Promise<Record<string, any>>
  /** Ends the handshake-era session (DELETE); nothing to do on 2026-07-28. */
  close (): Promise<void>
}
