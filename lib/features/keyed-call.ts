/**
 * A `tools/call` that carries an idempotency key (or that `dedupe` absorbs), run at most once per
 * key: the state record the call runs on — its state handle, or its handshake-era session, held
 * under the lock — is read for the key's record first. A record with the same arguments is
 * replayed without running the handler or touching the state; one with other arguments refuses
 * the call (-32602, nothing runs); none runs the call and records its result (success or
 * `isError`) in that record, so the save that keeps the call's changes keeps the record too
 * (`state/idempotency.ts`). A call on no state gets a record of its own from the protocol layer
 * through {@link KeyedRunner}. What throws (a protocol error, a question to the client, a
 * cancellation) records nothing: the call did not complete.
 */
import type { McpContext } from '../context.js'
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import type { SessionHandle } from '../sessions/session-handle.js'
import { lookUp, record, type CallKey, type IdempotencyLimits } from '../state/idempotency.js'

type Params = Record<string, unknown>
type Result = Record<string, unknown>

/** Keyed calls, as the protocol layer serves them (`protocol/keyed-calls.ts`). */
export interface KeyedRunner {
  readonly limits: IdempotencyLimits
  /**
   * The identity of this call under its key (`params.idempotencyKey`, the `_meta` key, the
   * `Idempotency-Key` header) or, without one, its `dedupe` identity; `null` when it has neither.
   * Throws an `McpError` for a malformed or ambiguous key; sets `ctx.idempotencyKey`.
   */
  keyOf (tool: string, params: Params, args: object, ctx: McpContext): CallKey | null
  /**
   * Runs `run` under `key` in a record of the call's own (a call on no session and no handle):
   * a duplicate in flight on any instance is refused at once (retryable), a completed one replayed.
   */
  own (key: CallKey, ctx: McpContext, run: () => Promise<Result>): Promise<Result>
  /** What became of a keyed call (telemetry). */
  seen (outcome: 'recorded' | 'replay' | 'conflict' | 'in_flight'): void
}

/** The answer to a key sent again with other arguments. */
export function keyReused (): McpError {
  return new McpError(ErrorCode.InvalidParams, 'This idempotency key was used with other arguments; nothing was run. Use a new key for a new call.',
    { reason: 'idempotency_key_reused' })
}

/** Runs `run` at most once per key in `state`, the record the call runs on (see the module doc). */
export async function keyedOnState (state: SessionHandle, key: CallKey, keyed: KeyedRunner, run: () => Promise<Result>): Promise<Result> {
  const found = lookUp(state, key)
  if (found.kind === 'replay') { keyed.seen('replay'); return found.result }
  if (found.kind === 'conflict') { keyed.seen('conflict'); throw keyReused() }
  const result = await run()
  record(state, key, result, keyed.limits)
  keyed.seen('recorded')
  return result
}
