/** The lease a `PgSessionLock` hands out (see `pg-lock.ts`): a row of `<prefix>leases`. */
import type { PgPoolLike } from '../postgres/pool.js'
import { pgText } from '../postgres/text-query.js'
import { BackendLease, type LeaseHome } from './backend-lease.js'
import type { FifoRelease } from './keyed-fifo.js'

/** A statement: its text, and a name that makes it a prepared statement on each connection. */
export interface LeaseStatement { readonly name: string, readonly text: string }

/**
 * A lease row of a `PgSessionLock`: renewed by pushing `expires_at` where the token is ours and the
 * lease has not expired (the lock's `extend` statement, made once per lock and given to each lease).
 */
export class PgLease extends BackendLease<PgPoolLike> {
  constructor (
    /** The lock's renewal statement. */
    readonly extend: LeaseStatement,
    id: string, home: LeaseHome<PgPoolLike>, token: string, slot: FifoRelease, passes: number, sentAt: number,
    read: unknown, readBy: object | null
  ) {
    // The row's key is the id itself.
    super(id, home, id, token, slot, passes, sentAt, read, readBy)
  }

  async extendLease (): Promise<number> {
    const { rows } = await pgText(this.home.handle, this.extend, [this.id, this.token, this.home.ttl])
    return rows[0]?.[0] === 't' ? 1 : 0
  }
}
