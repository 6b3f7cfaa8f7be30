/**
 * The answers to a write too few replicas acknowledged (`redis/replica-ack.ts`): 503 with
 * `Retry-After` on every path that writes, in two kinds, because a client must retry them
 * differently.
 *
 * - A change (a session or handle saved or created, a task created or changed) that ran on the
 *   primary: it may survive a failover or not, so the client is told neither that it was kept nor
 *   that it was not. Retrying is the client's call (a retried append may then appear twice; see
 *   docs/failover.md).
 * - A lease whose take was not confirmed: the lock let it go before anything ran under it, so
 *   nothing was done and a retry is safe.
 */
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import { isUnconfirmed, isUnconfirmedLease } from '../redis/replica-ack.js'

export const UNCONFIRMED_MESSAGE = 'The change could not be confirmed by enough replicas: it may or may not have been kept; retry later.'
export const LEASE_UNCONFIRMED_MESSAGE = 'The lock could not be confirmed by enough replicas: nothing was done; retry later.'

/** Seconds a client is asked to wait: about one Sentinel failover's worth of replica catch-up. */
const RETRY_AFTER = '1'

/** The refusal of an unconfirmed write (see the module doc). */
export function unconfirmedRefusal (): McpError {
  return new McpError(ErrorCode.ServerError, UNCONFIRMED_MESSAGE, { reason: 'unconfirmed' }, 503, { 'retry-after': RETRY_AFTER })
}

/** The refusal of a lease whose take was not confirmed: nothing was done (see the module doc). */
export function leaseUnconfirmedRefusal (): McpError {
  return new McpError(ErrorCode.ServerError, LEASE_UNCONFIRMED_MESSAGE, { reason: 'lease_unconfirmed' }, 503, { 'retry-after': RETRY_AFTER })
}

/**
 * {@link leaseUnconfirmedRefusal} when `err` (or its cause) is an unconfirmed lease,
 * {@link unconfirmedRefusal} when it is another unconfirmed write, else null.
 */
export function unconfirmedAnswer (err: unknown): McpError | null {
  if (!isUnconfirmed(err)) return null
  return isUnconfirmedLease(err) ? leaseUnconfirmedRefusal() : unconfirmedRefusal()
}
