/**
 * Tool calls on a state handle, on both wires: the handle's scope is opened under its lock (lock →
 * load), the tool runs with it as `ctx.handle`, and what it changed is written back, fenced, before
 * the lease is released. What the client is told is what was kept: a save that failed, a lease lost
 * meanwhile, or a handle ended under the call answers with an error instead of the tool's result.
 *
 * Lock order: a handshake-era request holds its session, then takes the handle (never the other
 * way round), and around a wait for the client both are released and taken back session first.
 * A 2026-07-28 run that asks the client for input is repeated from the start with the answers: its
 * changes are dropped and the lease released, so the handle is not held across a round trip.
 * A read-only tool's call opens the handle as a snapshot instead: no lock, writes refused.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { HandleMinter, McpContext, McpPrincipal } from '../context.js'
import type { StateRunner } from '../features/methods.js'
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import type { JsonValue } from '../sessions/session-store.js'
import type { StateHandles } from '../state/handles.js'
import { SNAPSHOT, sealSnapshot } from '../state/snapshot.js'
import { LeaseLostError } from '../state/outcome.js'
import type { CloseResult, StateScope } from '../state/state-scope.js'
import type { BaseContext } from './base-context.js'
import { OutageLog, backendRetry, openFailure } from './open-failure.js'
import { unkeptOf } from './unkept-answers.js'

/** The refusals of a handle call, by what happened (all 503: the client may retry). */
export const handleRefusal = {
  busy: () => unavailable('Another call on this handle is still being processed.'),
  lockDown: () => unavailable('State lock is unavailable.', backendRetry()),
  storeDown: () => unavailable('State store is unavailable.', backendRetry()),
  unreadable: () => unavailable('Handle data cannot be read.'),
  nested: () => new McpError(ErrorCode.InternalError, 'A call works on one state handle at a time.')
}

function unavailable (message: string, headers?: Record<string, string>): McpError {
  return new McpError(ErrorCode.ServerError, message, undefined, 503, headers)
}

/** How {@link HandleCalls} serves. */
export interface HandleCallsOptions {
  /**
   * Whether handles may be minted without a principal (only when no authentication is
   * configured: an anonymous handle is usable by every anonymous caller that has its id).
   */
  anonymous: boolean
  /** Called after each handle minted: the store's GC policy may collect expired state now. */
  minted: () => void
  /** Whom a handle counts against in the store (the limiter's `clientKey`). */
  clientKey: (principal: McpPrincipal | null, ip: string | undefined) => string
}

/** @internal See the module doc. */
export class HandleCalls implements StateRunner {
  readonly #handles: StateHandles
  readonly #options: HandleCallsOptions
  /** The handles' backend outages (see `OutageLog`). */
  readonly #outages = new OutageLog()
  /** Calls of this instance queued for a handle's lock (the status and the lock-waiter gauge). */
  lockWaiters = 0

  constructor (handles: StateHandles, options: HandleCallsOptions) {
    this.#handles = handles
    this.#options = options
  }

  /** `ctx.handles` for a principal at an address (a bound function: contexts take it as it is). */
  readonly minter = (principal: McpPrincipal | null, ip?: string, log?: FastifyBaseLogger): HandleMinter => {
    const handles = this.#handles
    const { anonymous, minted, clientKey } = this.#options
    // The store failing is a 503 like on every other state path (never a tool error the model
    // reads); a misuse (unknown kind, data JSON cannot carry) stays the handler's TypeError.
    const down = (err: unknown, kind: string): never => {
      if (err instanceof TypeError || err instanceof RangeError || log === undefined) throw err
      throw openFailure(err, log, handleRefusal, 'handle', { handleKind: kind }, this.#outages)
    }
    return {
      create: async (kind, data) => {
        if (principal === null && !anonymous) throw new TypeError('a state handle needs a principal when authentication is configured')
        const id = await handles.create(kind, principal, data as Record<string, JsonValue> | undefined, clientKey(principal, ip)).catch((err: unknown) => down(err, kind))
        minted()
        return id
      },
      end: async (kind, id) => await handles.end(kind, id, principal).catch((err: unknown) => down(err, kind))
    }
  }

  async withHandle<T> (kind: string, id: unknown, mcpCtx: McpContext, work: () => Promise<T>, readOnly = false): Promise<T | null> {
    const ctx = mcpCtx as BaseContext
    const log = ctx.request.log
    if (ctx.handleScope !== null) throw handleRefusal.nested()
    let scope: StateScope | null
    // A read-only tool reads a snapshot: no queue, no lease (`state/snapshot.ts`).
    const waits = readOnly ? 0 : 1
    this.lockWaiters += waits
    try {
      // The cancellation, not its signal: made only if the call has to queue for the lock.
      scope = await this.#handles.open(kind, id, ctx.principal, readOnly ? SNAPSHOT : { lock: true, owner: ctx.request, signal: ctx.abort })
    } catch (err) {
      // Given up while queued: the wire answers for the request (cancelled, or its session ended).
      if (ctx.abort.aborted) throw ctx.abort.reason
      throw openFailure(err, log, handleRefusal, 'handle', { handleKind: kind }, this.#outages)
    } finally {
      this.lockWaiters -= waits
    }
    this.#outages.ok(log)
    if (scope === null) return null
    if (readOnly) sealSnapshot(scope, 'handle')
    // A lost lease stops the handler (as a session's does): nothing it does after is kept.
    scope.onLost(() => { ctx.abort.abort(new LeaseLostError('handle')) })
    ctx.useHandle(scope)
    let out: T
    try {
      out = await work()
    } catch (err) {
      // Its changes are dropped; a handler stopped by a lost lease (or that failed after its save
      // at a wait did not keep) is answered with why, not with its own error.
      const closed = await this.#end(ctx, scope, 'abandon')
      throw unkeptHandle(closed, ctx.abort.aborted ? ctx.abort.reason : undefined) ?? err
    }
    // A run that will be repeated (input_required), or whose client is not told its result
    // (cancelled, its session ended), keeps nothing.
    const closed = await this.#end(ctx, scope, ctx.repeats || ctx.abort.aborted ? 'abandon' : 'close')
    if (closed.status === 'gone') return null
    const refusal = unkeptHandle(closed, ctx.abort.aborted ? ctx.abort.reason : undefined)
    if (refusal !== null) throw refusal
    return out
  }

  /** Writes back (or drops) and releases; reports what did not go as planned. */
  async #end (ctx: BaseContext, scope: StateScope, how: 'close' | 'abandon'): Promise<CloseResult> {
    ctx.useHandle(null)
    const closed = how === 'close' ? await scope.close() : await scope.abandon()
    reportHandleClose(closed, ctx.request.log, scope.id, ctx.abort.aborted ? ctx.abort.reason : undefined)
    return closed
  }
}

/**
 * What the client is told instead of the result when the call's changes were not kept (`null`:
 * the result stands); `stoppedBy` is why the call was stopped, if it was.
 */
export function unkeptHandle (closed: CloseResult, stoppedBy?: unknown): McpError | null {
  const unkept = unkeptOf(closed, 'handle', stoppedBy)
  return unkept === null ? null : new McpError(unkept.code, unkept.message, unkept.data, unkept.status, unkept.headers)
}

/**
 * Logs what a close that did not write means. The key is logged, not the id: a handle id is a
 * bearer secret of whoever holds it.
 */
export function reportHandleClose (closed: CloseResult, log: FastifyBaseLogger, key: string, stoppedBy?: unknown): void {
  const handleKind = key.split('~')[1]
  switch (closed.status) {
    case 'unchanged':
      // A handler stopped by its lost lease before it changed anything dropped its work all the same.
      if (stoppedBy instanceof LeaseLostError) log.warn({ handleKind, result: 'lost' }, 'handle lock lost; changes dropped')
      break
    case 'lost': log.warn({ handleKind, result: 'lost' }, 'handle lock lost; changes dropped'); break
    case 'gone': log.info({ handleKind, result: 'gone' }, 'handle ended during the call; changes dropped'); break
    case 'fenced': log.warn({ handleKind, result: 'fenced' }, 'handle lock lost and the handle changed meanwhile; changes dropped'); break
    case 'abandoned': log.warn({ handleKind, result: 'abandoned' }, 'the call\'s client left and its lease was released after the grace; changes dropped'); break
    case 'failed': log.error({ err: closed.error, handleKind }, 'handle save failed')
  }
  if (closed.releaseError !== undefined) log.warn({ err: closed.releaseError, handleKind }, 'handle lock release failed; it expires in the backend')
}
