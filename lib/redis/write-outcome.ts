/**
 * What a failed Redis write did, told by the error's type: a fail-fast client's write is sent
 * only while it is connected (otherwise it is refused here, unsent: nothing was written); once sent, an error Redis
 * answered (`ReplyError`: the script refused or failed) or too few replicas acknowledging
 * (`UnconfirmedWriteError`) is what happened, and any other failure — a timeout, the connection
 * closed under the command, ioredis giving up its retries — leaves the outcome unknown
 * (`OutcomeUnknownError`).
 */
import { OutcomeUnknownError } from '../errors.js'
import { isUnconfirmed } from './replica-ack.js'

/** A write not sent: the client was not connected. */
export class RedisNotConnectedError extends Error {
  constructor (status: string) {
    super(`Redis client not connected (${status}); the write was not sent`)
    this.name = 'RedisNotConnectedError'
  }
}

/** Whether Redis itself answered the command with an error (ioredis' `ReplyError`, by its class name). */
function answeredByRedis (err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError'
}

/**
 * Sends a write on `client` (see the module doc). A client that fails fast (no offline queue:
 * the plugin's own) is sent nothing while it is not connected; one that queues commands keeps
 * the write until it connects, and the write's outcome is unknown if it then fails.
 */
export function redisWrite<T> (client: { readonly status: string, readonly options: object }, send: () => Promise<T>): Promise<T> {
  if (client.status !== 'ready' && (client.options as { enableOfflineQueue?: boolean }).enableOfflineQueue === false) {
    return Promise.reject(new RedisNotConnectedError(client.status))
  }
  return send().catch((err: unknown) => {
    if (answeredByRedis(err) || isUnconfirmed(err)) throw err
    throw new OutcomeUnknownError('Redis did not confirm the write', { cause: err })
  })
}
