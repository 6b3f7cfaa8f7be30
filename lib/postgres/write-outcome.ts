/**
 * What a failed PostgreSQL write did, told by the phase it failed in and the error's type: a
 * connection that cannot be had means the statement was never sent (nothing was written); an
 * error the server answered (pg's `DatabaseError`, with a SQLSTATE `code` and a `severity`) means
 * the statement failed and was rolled back; any other failure once it was sent — the connection
 * terminated, a read timeout — leaves the outcome unknown (`OutcomeUnknownError`).
 */
import { OutcomeUnknownError } from '../errors.js'
import { quietErrors, type PgPoolLike } from './pool.js'
import { pgTextOn, type PgStatement, type PgTextResult, type PgTextValue } from './text-query.js'

/** Whether the server answered with this error (pg's `DatabaseError`: a 5-character SQLSTATE and a severity). */
function answeredByServer (err: unknown): boolean {
  const e = err as { code?: unknown, severity?: unknown } | null
  return typeof e === 'object' && e !== null && typeof e.code === 'string' && e.code.length === 5 && typeof e.severity === 'string'
}

/** Runs a write statement on a connection of `pool` (see the module doc), its rows as text (`text-query.ts`). */
export async function pgWrite (pool: PgPoolLike, statement: PgStatement, values: readonly PgTextValue[]): Promise<PgTextResult> {
  // Not sent when this fails: the error is the store refusing the write.
  const client = await pool.connect()
  const listening = quietErrors(client)
  let result: PgTextResult
  try {
    result = await pgTextOn(pool, client, statement, values)
  } catch (err) {
    listening()
    if (answeredByServer(err)) {
      client.release()
      throw err
    }
    // The connection is in doubt: destroyed rather than handed to the next caller.
    client.release(true)
    throw new OutcomeUnknownError('PostgreSQL did not confirm the write', { cause: err })
  }
  listening()
  client.release()
  return result
}
