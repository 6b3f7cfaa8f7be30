/**
 * The one answer to a write that ran but too few replicas acknowledged (`redis/replica-ack.ts`):
 * 503 with `Retry-After`, on every path that writes (a session or handle saved or created, a
 * lease taken, a task created or changed). The change may survive a failover or not, so the
 * client is told neither that it was kept nor that it was not: it was not confirmed. Retrying is
 * the client's call (a retried append may then appear twice; see docs/failover.md).
 */
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import { isUnconfirmed } from '../redis/replica-ack.js'

export const UNCONFIRMED_MESSAGE = 'The change could not be confirmed by enough replicas: it may or may not have been kept; retry later.'

/** Seconds a client is asked to wait: about one Sentinel failover's worth of replica catch-up. */
const RETRY_AFTER = '1'

/** The refusal of an unconfirmed write (see the module doc). */
export function unconfirmedRefusal (): McpError {
  return new McpError(ErrorCode.ServerError, UNCONFIRMED_MESSAGE, { reason: 'unconfirmed' }, 503, { 'retry-after': RETRY_AFTER })
}

/** {@link unconfirmedRefusal} when `err` (or its cause) is an unconfirmed write, else null. */
export function unconfirmedAnswer (err: unknown): McpError | null {
  return isUnconfirmed(err) ? unconfirmedRefusal() : null
}
