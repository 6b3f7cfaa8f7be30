/**
 * Requests from a handshake-era handler to the client (`elicit`, `sample`, `roots`): sent on the
 * POST's stream, answered in a separate POST that may land on any instance (the answer reaches the
 * waiting handler through the bus). Under the session lock the session is saved and the lease
 * released while waiting, then taken back and re-read before the handler goes on, so the
 * session's other requests, the client's answer among them, are never blocked by the wait.
 */
import type { Hub } from '../bus/hub.js'
import { FST_ERR_MCP_CLIENT_REQUEST, FST_ERR_MCP_CLIENT_TIMEOUT, FST_ERR_MCP_SESSION_BUSY } from '../errors.js'
import type { ResolvedOptions } from '../options.js'
import type { ClientRequester, LegacyContext } from './legacy-context.js'
import { reportClose } from './legacy-session.js'

/** @internal The sender of a session's requests to the client (see the module doc). */
export class ClientRequests implements ClientRequester {
  readonly #hub: Hub
  readonly #opts: ResolvedOptions

  constructor (hub: Hub, opts: ResolvedOptions) {
    this.#hub = hub
    this.#opts = opts
  }

  get retryInterval (): number { return this.#opts.retryInterval }

  async clientRequest (ctx: LegacyContext, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    const signal = ctx.signal
    const sid = ctx.scope.id
    if (signal.aborted) throw signal.reason
    const answers = this.#hub.answers
    if (answers.count(sid) >= this.#opts.maxPendingClientRequests) {
      throw new FST_ERR_MCP_CLIENT_REQUEST(method, 'too many pending requests to the client in this session')
    }
    const id = answers.nextId()
    // Registered before any await, so that the cap above counts requests made in the same turn.
    const { answer, cancel } = answers.wait(sid, id)
    try {
      await this.#hub.topics.ready(sid)
    } catch (err) {
      answer.catch(() => {})
      cancel(err as Error)
      throw err
    }
    const timeout = this.#opts.clientRequestTimeout
    const timer = setTimeout(() => cancel(new FST_ERR_MCP_CLIENT_TIMEOUT(method, timeout)), timeout)
    timer.unref()
    const onAbort = (): void => cancel(signal.reason instanceof Error ? signal.reason : new Error('aborted'))
    signal.addEventListener('abort', onAbort, { once: true })
    const locked = ctx.scope.held
    try {
      if (locked) reportClose(await ctx.scope.suspend(), ctx.request.log, sid)
      ctx.responseChannel.emit({ jsonrpc: '2.0', id, method, params })
      const msg = await answer
      if (msg.error !== undefined) {
        const e = msg.error as { message?: string }
        throw new FST_ERR_MCP_CLIENT_REQUEST(method, String(e.message ?? 'error'))
      }
      return (msg.result ?? {}) as Record<string, unknown>
    } finally {
      clearTimeout(timer)
      signal.removeEventListener('abort', onAbort)
      if (locked) await this.#resume(ctx, method)
    }
  }

  async #resume (ctx: LegacyContext, method: string): Promise<void> {
    try {
      await ctx.scope.resume()
    } catch (err) {
      ctx.request.log.warn({ err, sessionId: ctx.scope.id, method }, 'could not take the session back after the client answered')
      throw new FST_ERR_MCP_SESSION_BUSY((err as Error).message)
    }
  }
}
