/**
 * Tool calls on a state handle, on both wires: the handle's scope is opened under its lock (lock →
 * load) in the request's unit of work, the tool runs with it as `ctx.handle`, and what it changed
 * is written back, fenced, when the request ends, with the rest of what the request changed. What
 * the client is told is what was kept (`unkept-answers.ts`): a save that failed, a lease lost
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
import type { StateRunner } from '../features/tool-call.js'
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import type { JsonValue } from '../sessions/session-store.js'
import type { StateEngine } from '../state/engine.js'
import type { StateScope } from '../state/state-scope.js'
import { StateRefusedError, type Opening, type UnitOfWork } from '../state/unit-of-work.js'
import type { BaseContext } from './base-context.js'
import { refusalAnswer } from './refusals.js'
import { stoppedAnswer } from './unkept-answers.js'

/** A call on one handle that asks for another one (a handler calling a tool of another handle). */
function nested (): McpError {
  return new McpError(ErrorCode.InternalError, 'A call works on one state handle at a time.')
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
  readonly #state: StateEngine
  readonly #options: HandleCallsOptions

  constructor (state: StateEngine, options: HandleCallsOptions) {
    this.#state = state
    this.#options = options
  }

  /** `ctx.handles` for a principal at an address (a bound function: contexts take it as it is). */
  readonly minter = (principal: McpPrincipal | null, ip?: string, log?: FastifyBaseLogger): HandleMinter => {
    const state = this.#state
    const handles = state.handles
    const { anonymous, minted, clientKey } = this.#options
    // The store failing is a 503 like on every other state path (never a tool error the model
    // reads); a misuse (unknown kind, data JSON cannot carry) stays the handler's TypeError.
    const down = (err: unknown, kind: string): never => {
      if (err instanceof TypeError || err instanceof RangeError || log === undefined) throw err
      throw refusalAnswer(state.refused('handle', `~${kind}~`, err, log).refusal, 'handle', err)
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

  /**
   * Runs `work` on the handle, in the request's unit of work: its scope is opened there (a batch's
   * second call on the same handle finds it held) and written back when the request ends, with
   * what else the request changed. A call that failed, was stopped or will be repeated lets go of
   * its handle now, writing nothing.
   */
  async withHandle<T> (kind: string, id: unknown, mcpCtx: McpContext, work: () => Promise<T>, readOnly = false): Promise<T | null> {
    const ctx = mcpCtx as BaseContext
    if (ctx.handleScope !== null) throw nested()
    const unit = ctx.unit
    if (unit === null) throw new Error('state handles are served in a request\'s unit of work')
    const opening = this.#state.handles.opening(kind, id, ctx.principal, readOnly ? 'snapshot' : 'lock')
    if (opening === null) return null
    opening.abort = ctx.abort
    opening.member = ctx.member
    const scope = await this.#open(unit, opening, ctx)
    if (scope === null) return null
    ctx.useHandle(scope)
    let out: T
    try {
      out = await work()
    } catch (err) {
      await unit.drop(scope)
      // A call stopped by a lost lease (or by its session's end) is answered with why, not with its own error.
      const stopped = ctx.abort.aborted ? stoppedAnswer(ctx.abort.reason) : null
      throw stopped === null ? err : new McpError(stopped.code, stopped.message, stopped.data, stopped.status, stopped.headers)
    } finally {
      ctx.useHandle(null)
    }
    // A run that will be repeated (input_required), or whose client is not told its result
    // (cancelled, its session ended), keeps nothing.
    if (ctx.repeats || ctx.abort.aborted) await unit.drop(scope)
    return out
  }

  /** The handle's scope in `unit`: held already, or opened now (`null`: not this caller's to use). */
  async #open (unit: UnitOfWork, opening: Opening, ctx: BaseContext): Promise<StateScope | null> {
    const held = unit.held(opening.key, opening.member)
    if (held !== undefined) return opening.admit?.(held) === false ? null : held
    try {
      return await unit.open(opening)
    } catch (err) {
      // Given up while queued: the wire answers for the request (cancelled, or its session ended).
      if (ctx.abort.aborted) throw ctx.abort.reason
      if (err instanceof StateRefusedError) throw refusalAnswer(err.refusal, 'handle', err.cause)
      throw err
    }
  }
}
