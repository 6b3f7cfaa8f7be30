/**
 * Idempotency keys on `tools/call`, both wires (`features/keyed-call.ts` runs a keyed call; this
 * is the part that reads the wire and the store):
 * - **the key** comes from `params.idempotencyKey`, from `params._meta["fastify-mcp-http/idempotencyKey"]`
 *   or from the `Idempotency-Key` header of a POST that holds one call; 1–255 printable ASCII
 *   characters; where several are sent they must agree. Without one, `dedupe` (off by default)
 *   may give an identical call an identity of its own.
 * - **a call on no state** (no session, no handle) keeps its record in a record of its own,
 *   `~call~<digest>`, created at its first sight and opened under the lock like a handle: a
 *   duplicate running on any instance holds that lease, so a second copy is refused at once with a
 *   409 and `Retry-After` (it waits at most {@link IN_FLIGHT_WAIT_MS} for the lease) instead of
 *   queueing; a completed one is replayed. A copy `dedupe` absorbs waits for the first instead
 *   (its client never meant to send it, and would read a 409 as a failure). A record lives `ttlMs`.
 */
import type { McpContext } from '../context.js'
import type { KeyedRunner } from '../features/keyed-call.js'
import { keyedOnState } from '../features/keyed-call.js'
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import type { StateEngine } from '../state/engine.js'
import { KEY_META, callKey, dedupeKey, isIdempotencyKey, type CallKey, type ResolvedIdempotency } from '../state/idempotency.js'
import { StateRefusedError, type Stoppable } from '../state/unit-of-work.js'
import type { KeyedOutcome } from '../telemetry/telemetry.js'
import type { BaseContext } from './base-context.js'
import { refusalAnswer } from './refusals.js'

/** The store keys of call records (a kind name no handle may take: see `state/handles.ts`). */
export const CALL_RECORD_PREFIX = '~call~'

/** How long a copy waits for the lease of its call record before it is told the first is still running (ms). */
export const IN_FLIGHT_WAIT_MS = 100

/** Who an own record counts against in a bounded store. */
export type RecordOwner = (ctx: McpContext) => string

/** The wait for a call record's lease: the request's cancellation, or the short wait running out. */
class ShortWait implements Stoppable {
  readonly #parent: Stoppable
  readonly #own = new AbortController()
  readonly #timer: NodeJS.Timeout

  constructor (parent: Stoppable, ms: number) {
    this.#parent = parent
    this.#timer = setTimeout(() => { this.#own.abort(new Error('the call is in flight')) }, ms)
  }

  get aborted (): boolean { return this.#own.signal.aborted || this.#parent.aborted }
  get reason (): unknown { return this.#parent.aborted ? this.#parent.reason : this.#own.signal.reason }
  get signal (): AbortSignal { return AbortSignal.any([this.#parent.signal, this.#own.signal]) }
  /** Whether the wait ran out (the first copy still holds the lease). */
  get ranOut (): boolean { return this.#own.signal.aborted && !this.#parent.aborted }
  /** A lost lease of the record stops the request. */
  abort (reason: unknown): void { this.#parent.abort(reason) }
  clear (): void { clearTimeout(this.#timer) }
}

function invalidKey (where: string): McpError {
  return new McpError(ErrorCode.InvalidParams, `${where} must be 1–255 printable ASCII characters`, { reason: 'idempotency_key_invalid' })
}

/** The answer to a copy of a call that is still running (its first copy holds the record's lease). */
export function inFlight (): McpError {
  return new McpError(ErrorCode.ServerError, 'A call with this idempotency key is still running; retry it shortly to get its result.',
    { reason: 'idempotency_key_in_flight' }, 409, { 'retry-after': '1' })
}

/** See the module doc. */
export class KeyedCalls implements KeyedRunner {
  readonly limits: ResolvedIdempotency
  readonly #state: StateEngine
  readonly #owner: RecordOwner

  readonly seen: (outcome: KeyedOutcome) => void

  constructor (state: StateEngine, limits: ResolvedIdempotency, owner: RecordOwner, seen: (outcome: KeyedOutcome) => void = () => {}) {
    this.#state = state
    this.limits = limits
    this.#owner = owner
    this.seen = seen
  }

  keyOf (tool: string, params: Record<string, unknown>, args: object, ctx: McpContext): CallKey | null {
    const key = sentKey(params, ctx)
    const principal = ctx.principal?.id ?? null
    if (key !== undefined) {
      (ctx as BaseContext).idempotencyKey = key
      return callKey(principal, tool, key, args)
    }
    const dedupe = this.limits.dedupe
    if (dedupe === null || (dedupe.tools !== null && !dedupe.tools.has(tool))) return null
    return dedupeKey(principal, tool, args, dedupe.windowMs)
  }

  async own (key: CallKey, mcpCtx: McpContext, run: () => Promise<Record<string, unknown>>): Promise<Record<string, unknown>> {
    const ctx = mcpCtx as BaseContext
    const unit = ctx.unit
    if (unit === null) return await run()
    const id = CALL_RECORD_PREFIX + key.digest
    const store = this.#state.backend.store
    // Made at first sight; a copy finds it made (the store refuses a second create: ignored, the
    // open below reads what is there, and answers for a store that is down).
    await store.create(id, {}, { ttl: this.limits.ttlMs, owner: this.#owner(ctx) }).catch(() => {})
    // A copy of a keyed call in flight is refused at once; one `dedupe` absorbs (its client did
    // not mean to send it) waits for the first and gets its result.
    const wait = key.windowMs === undefined ? new ShortWait(ctx.abort, IN_FLIGHT_WAIT_MS) : null
    let scope
    try {
      scope = await unit.open({ subject: 'call', key: id, mode: 'lock', abort: wait ?? ctx.abort, member: ctx.member })
    } catch (err) {
      if (wait?.ranOut === true) { this.seen('in_flight'); throw inFlight() }
      if (ctx.abort.aborted) throw ctx.abort.reason
      if (err instanceof StateRefusedError) throw refusalAnswer(err.refusal, 'call', err.cause)
      throw err
    } finally {
      wait?.clear()
    }
    // Gone between its creation and its read (evicted, expired): nothing ran, nothing recorded.
    if (scope === null) throw refusalAnswer('store-down', 'call')
    return await keyedOnState(scope.handle, key, this, run)
  }
}

/** The key the call carries (`undefined`: none); throws for a malformed one or keys that differ. */
function sentKey (params: Record<string, unknown>, ctx: McpContext): string | undefined {
  let key: string | undefined
  const take = (value: unknown, where: string): void => {
    if (value === undefined) return
    if (!isIdempotencyKey(value)) throw invalidKey(where)
    if (key !== undefined && key !== value) throw new McpError(ErrorCode.InvalidParams, 'The idempotency keys of this call differ', { reason: 'idempotency_key_invalid' })
    key = value
  }
  take(params.idempotencyKey, 'params.idempotencyKey')
  const meta = params._meta
  if (typeof meta === 'object' && meta !== null) take((meta as Record<string, unknown>)[KEY_META], `_meta["${KEY_META}"]`)
  const header = ctx.request.headers['idempotency-key']
  if (header !== undefined) {
    // One key names one call: a batch's several calls cannot share it.
    if (isBatch(ctx.request.body)) {
      throw new McpError(ErrorCode.InvalidRequest,
        'The Idempotency-Key header names one call: send it on a POST that holds a single tools/call, or put each call\'s key in its params.',
        { reason: 'idempotency_key_invalid' }, 400)
    }
    take(header, 'the Idempotency-Key header')
  }
  return key
}

/** Whether a POST's body (its text, as the routes read it) is a JSON-RPC batch. */
function isBatch (body: unknown): boolean {
  return Array.isArray(body) || (typeof body === 'string' && body.trimStart().startsWith('['))
}
