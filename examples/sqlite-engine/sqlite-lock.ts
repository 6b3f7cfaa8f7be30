/**
 * `SqliteSessionLock`: the lock of the worked example (docs/your-own-engine.md), a lease row per
 * held key in the SQLite file every process of the app opens. What the lock contract asks, and how:
 * - one holder at a time across processes: a lease row (id, random token, expiry), taken in one
 *   write transaction only when there is none or it expired;
 * - first come, first served within a process: waiters queue per key, only the first polls the file;
 * - a waiter that gives up (signal, timeout) leaves the queue at once;
 * - a lease is renewed (every ttl/3); a renewal that finds its row gone, taken or expired means the
 *   lease was lost, and its `signal` aborts (code `MCP_SESSION_LEASE_LOST`);
 * - the lease's `fence` (the token) lets the store refuse a stale holder's save.
 */
import { randomBytes } from 'node:crypto'
import { SessionLockError, SessionLockTimeoutError, type AcquireOptions, type SessionLease, type SessionLock } from '../../lib/index.js'
import { writing, type SqliteDb } from './sqlite-db.js'

/** Options of {@link SqliteSessionLock}. */
export interface SqliteSessionLockOptions {
  db: SqliteDb
  /** Default acquire timeout in ms (default 30,000; 0 tries once). */
  timeout?: number
  /** Lease TTL in ms, renewed every third of it while held (default 10,000). */
  ttl?: number
}

/** How often the first waiter of a key looks at the file again, in ms. */
const POLL = 5

const shown = (id: string): string => `${id.slice(0, 8)}…`
const closedError = (): SessionLockError => new SessionLockError('The session lock is closed.', { code: 'MCP_SESSION_LOCK_CLOSED' })

function checkTimeout (timeout: number): number {
  if (!(timeout >= 0)) throw new RangeError('timeout must be greater than or equal to 0.')
  return timeout
}

interface Waiter {
  owner?: object
  /** Run inside the take's transaction: `null` = the record is missing, take nothing. */
  read?: () => unknown
  resolve: (granted: { lease: SqliteLease, read: unknown } | null) => void
  reject: (err: unknown) => void
  done: () => void
  timer?: NodeJS.Timeout
}

/** A lease row held by this process. */
export class SqliteLease implements SessionLease {
  readonly id: string
  readonly fence: { key: string, token: string }
  readonly owner: object | undefined
  readonly #controller = new AbortController()
  readonly #lock: SqliteSessionLock
  #ended = false
  #renewal: NodeJS.Timeout

  constructor (lock: SqliteSessionLock, id: string, token: string, owner: object | undefined) {
    this.#lock = lock
    this.id = id
    this.owner = owner
    this.fence = { key: id, token }
    this.#renewal = setInterval(() => { this.#renew() }, Math.max(1, Math.floor(lock.ttl / 3)))
    this.#renewal.unref()
  }

  get signal (): AbortSignal { return this.#controller.signal }
  get ended (): boolean { return this.#ended }

  async release (): Promise<void> {
    if (this.#ended) {
      if (this.signal.aborted) return // lost or closed: nothing left to free
      throw new SessionLockError(`The lock of session ${shown(this.id)} is not held.`, { code: 'MCP_SESSION_LOCK_NOT_HELD' })
    }
    this.end()
    this.#lock.db.prepare('DELETE FROM leases WHERE id = ? AND token = ?').run(this.id, this.fence.token)
    this.#lock.pump(this.id)
  }

  /** The store's save + release deleted the row: stop holding, and the next waiter goes. */
  settled (): void {
    this.end()
    this.#lock.pump(this.id)
  }

  /** Stops holding locally (the row is the caller's business); `reason` aborts the signal. */
  end (reason?: unknown): void {
    if (this.#ended) return
    this.#ended = true
    clearInterval(this.#renewal)
    this.#lock.forget(this)
    if (reason !== undefined) this.#controller.abort(reason)
  }

  #renew (): void {
    const now = Date.now()
    const renewed = this.#lock.db.prepare('UPDATE leases SET expires_at = ? WHERE id = ? AND token = ? AND expires_at > ?')
      .run(now + this.#lock.ttl, this.id, this.fence.token, now).changes === 1
    if (renewed) return
    this.end(new SessionLockError(`The lock of session ${shown(this.id)} was lost`, { code: 'MCP_SESSION_LEASE_LOST' }))
    this.#lock.pump(this.id)
  }
}

/** See the module doc. */
export class SqliteSessionLock implements SessionLock {
  readonly db: SqliteDb
  readonly timeout: number
  readonly ttl: number
  readonly #queues = new Map<string, Waiter[]>()
  readonly #held = new Map<string, SqliteLease>()
  /** The next look at the file, per key whose first waiter found it taken. */
  readonly #polls = new Map<string, NodeJS.Timeout>()
  #closed = false

  constructor (options: SqliteSessionLockOptions) {
    this.db = options.db
    this.timeout = checkTimeout(options.timeout ?? 30_000)
    this.ttl = options.ttl ?? 10_000
  }

  /** Keys held or waited for in this process (0 when idle). */
  get size (): number { return new Set([...this.#held.keys(), ...this.#queues.keys()]).size }

  async acquire (id: string, options: AcquireOptions = {}): Promise<SessionLease> {
    return (await this.acquireAndRead(id, options))?.lease as SqliteLease
  }

  /**
   * Waits for the key like `acquire`, then takes the lease and runs `read` in one write
   * transaction; when `read` returns `null` nothing is taken and it resolves `null`.
   */
  async acquireAndRead (id: string, options: AcquireOptions = {}, read?: () => unknown): Promise<{ lease: SqliteLease, read: unknown } | null> {
    if (this.#closed) throw closedError()
    const timeout = options.timeout === undefined ? this.timeout : checkTimeout(options.timeout)
    const { signal, owner } = options
    if (signal?.aborted === true) throw signal.reason
    if (owner !== undefined && this.#held.get(id)?.owner === owner) throw this.#alreadyHeld(id)
    return await new Promise((resolve, reject) => {
      const queue = this.#queues.get(id) ?? []
      this.#queues.set(id, queue)
      const onAbort = (): void => { this.#leave(id, waiter); reject(signal?.reason) }
      const waiter: Waiter = {
        owner,
        read,
        resolve,
        reject,
        done: () => { clearTimeout(waiter.timer); signal?.removeEventListener('abort', onAbort) }
      }
      if (options.priority === true) queue.unshift(waiter); else queue.push(waiter)
      signal?.addEventListener('abort', onAbort, { once: true })
      waiter.timer = setTimeout(() => { this.#leave(id, waiter); reject(new SessionLockTimeoutError(id, timeout)) }, timeout)
      this.pump(id)
    })
  }

  async tryAcquire (id: string, options: Pick<AcquireOptions, 'owner'> = {}): Promise<SessionLease | null> {
    if (this.#closed) throw closedError()
    if (options.owner !== undefined && this.#held.get(id)?.owner === options.owner) throw this.#alreadyHeld(id)
    if (this.#held.has(id) || (this.#queues.get(id)?.length ?? 0) > 0) return null
    const token = this.#take(id)
    return token === null ? null : this.#grant(id, token, options.owner)
  }

  /** Gives the key to its first waiter when the file lets it; else looks again in a moment. */
  pump (id: string): void {
    const queue = this.#queues.get(id)
    const first = queue?.[0]
    if (first === undefined || this.#held.has(id) || this.#closed) return
    let granted: { lease: SqliteLease, read: unknown } | null | undefined
    try {
      granted = writing(this.db, () => {
        const read = first.read?.()
        if (read === null) return null
        const token = this.#take(id)
        return token === null ? undefined : { lease: this.#grant(id, token, first.owner), read }
      })
    } catch (err) {
      this.#leave(id, first)
      first.reject(new SessionLockError(`Failed to acquire the lock of session ${shown(id)} (${(err as Error).message})`, { cause: err }))
      return
    }
    if (granted === undefined) {
      if (!this.#polls.has(id)) this.#polls.set(id, setTimeout(() => { this.#polls.delete(id); this.pump(id) }, POLL))
      return
    }
    this.#leave(id, first)
    first.resolve(granted)
  }

  /** Inserts the lease row when the key is free or its lease expired: the token, or `null`. */
  #take (id: string): string | null {
    return writing(this.db, () => {
      const now = Date.now()
      const row = this.db.prepare('SELECT expires_at FROM leases WHERE id = ?').get(id) as { expires_at: number } | undefined
      if (row !== undefined && row.expires_at > now) return null
      const token = randomBytes(16).toString('hex')
      this.db.prepare('INSERT OR REPLACE INTO leases (id, token, expires_at) VALUES (?, ?, ?)').run(id, token, now + this.ttl)
      return token
    })
  }

  #grant (id: string, token: string, owner: object | undefined): SqliteLease {
    const lease = new SqliteLease(this, id, token, owner)
    this.#held.set(id, lease)
    return lease
  }

  #leave (id: string, waiter: Waiter): void {
    waiter.done()
    const queue = this.#queues.get(id)
    if (queue === undefined) return
    const at = queue.indexOf(waiter)
    if (at >= 0) queue.splice(at, 1)
    if (queue.length === 0) this.#queues.delete(id)
    else if (at === 0) queueMicrotask(() => { this.pump(id) })
  }

  /** Called by a lease that stopped being held. */
  forget (lease: SqliteLease): void {
    if (this.#held.get(lease.id) === lease) this.#held.delete(lease.id)
  }

  #alreadyHeld (id: string): SessionLockError {
    return new SessionLockError(`The lock of session ${shown(id)} is already held by this owner.`, { code: 'MCP_SESSION_LOCK_ALREADY_HELD' })
  }

  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    for (const timer of this.#polls.values()) clearTimeout(timer)
    this.#polls.clear()
    for (const [id, queue] of this.#queues) {
      for (const waiter of [...queue]) { this.#leave(id, waiter); waiter.reject(closedError()) }
    }
    for (const lease of [...this.#held.values()]) {
      lease.end(closedError())
      this.db.prepare('DELETE FROM leases WHERE id = ? AND token = ?').run(lease.id, lease.fence.token)
    }
  }
}
