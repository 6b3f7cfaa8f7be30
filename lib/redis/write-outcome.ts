/**
 * What a failed Redis write did, told by the error's type: a write is sent only on a connected
 * client (otherwise it is refused here, unsent: nothing was written); once sent, an error Redis
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

/** Sends a write on `client` (see the module doc); `send` is called only on a connected client. */
export function redisWrite<T> (client: { readonly status: string }, send: () => Promise<T>): Promise<T> {
  if (client.status !== 'ready') return Promise.reject(new RedisNotConnectedError(client.status))
  return send().catch((err: unknown) => {
    if (answeredByRedis(err) || isUnconfirmed(err)) throw err
    throw new OutcomeUnknownError('Redis did not confirm the write', { cause: err })
  })
}
