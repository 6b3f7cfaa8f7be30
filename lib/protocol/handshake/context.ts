/**
 * The `ctx` of one handshake-era request. Requests to the client (`elicit`, `sample`, `roots`) go
 * out on the POST's stream and their answers come back in later POSTs, through the wire's
 * {@link ClientRequester}; progress and log messages go out on the POST's stream.
 */
import { randomBytes } from 'node:crypto'
import type { LogLevel } from '../../context.js'
import type { SessionHandle } from '../../sessions/session-handle.js'
import { K } from '../../sessions/session-handle.js'
import type { StateScope } from '../../state/state-scope.js'
import { BaseContext, type ContextParts } from '../base-context.js'
import type { ResponseChannel } from '../exchange.js'
import type { RequestAbort } from '../request-abort.js'

/** @internal What the context needs from the wire to ask the client something. */
export interface ClientRequester {
  /** Sends a request to the client on the POST's stream and waits for the answer. */
  clientRequest (ctx: HandshakeContext, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>>
  /** Default `retry` of `closeSSEStream()`. */
  readonly retryIntervalMs: number
}

/** @internal */
export class HandshakeContext extends BaseContext {
  /** The session's scope (held under the lock, when one is configured). */
  readonly scope: StateScope
  readonly #wire: ClientRequester

  constructor (wire: ClientRequester, scope: StateScope, parts: ContextParts) {
    super(parts)
    this.#wire = wire
    this.scope = scope
  }

  get session (): SessionHandle { return this.scope.handle }

  get clientCapabilities (): Record<string, unknown> {
    return this.scope.handle.getProtocol<Record<string, unknown>>(K.capabilities) ?? {}
  }

  /** @internal The channel the request answers on. */
  get responseChannel (): ResponseChannel { return this.channel }

  /** @internal The request's cancellation. */
  get requestAbort (): RequestAbort { return this.abort }

  protected get minLogLevel (): LogLevel {
    return this.scope.handle.getProtocol<LogLevel>(K.logLevel) ?? 'debug'
  }

  protected async ask (_key: string, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (method === 'elicitation/create' && params.mode === 'url' && params.elicitationId === undefined) {
      params.elicitationId = randomBytes(12).toString('base64url')
    }
    return await this.#wire.clientRequest(this, method, params)
  }

  closeSSEStream (retryMs?: number): void {
    this.channel.disconnect(retryMs ?? this.#wire.retryIntervalMs)
  }
}
