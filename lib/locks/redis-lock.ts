/**
 * `RedisSessionLock`: the per-session lock of many machines, a Redis lease.
 *
 * - Acquire: `SET <prefix>{<sid>}:lock <token> NX PX <ttl>` with a fresh random 128-bit token per
 *   acquisition. In front of it, an in-process FIFO, so only one request per process contends in
 *   Redis; while the lease is busy, polls with exponential backoff and full jitter (cap 50 ms).
 * - Release: compare-and-delete (a Lua script), so a holder whose lease ran out never frees the
 *   next holder's lease.
 * - Renewal: every ttl/3, compare-and-PEXPIRE; it never re-creates a lease that expired. "Not
 *   ours any more" aborts `lease.signal` at once; transport errors are retried until the local
 *   deadline (when the lease would have expired in Redis, measured from the last renewal sent),
 *   then the signal aborts.
 * - Fencing: `lease.fence` (`{key, token}`) lets the Redis store refuse the save of a holder whose
 *   lease was lost once someone else took it or wrote the session.
 *
 * Failing fast: a lock must answer "Redis is down" at once, not after queueing and retrying for
 * seconds. Give it a dedicated client with {@link LOCK_CLIENT_OPTIONS} (or pass a URL/options and
 * the lock creates such a client itself, and closes it on `close()`); an injected client is never
 * closed. Its backend errors reject `acquire()` with a `SessionLockError` (cause kept).
 */
import { randomBytes } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { createLockClient, isRedisClient } from '../redis/client.js'
import { DEFAULT_KEY_PREFIX, assertKeyPrefix, lockKey } from '../redis/keys.js'
import { confirmed, replicaAckFor, replicaAckOf, requireReplicaAck, sendWait, type ReplicaAck } from '../redis/replica-ack.js'
import { defineScripts, type RedisClient, type RedisClientLike, type RedisConnectionOptions } from '../redis/scripts.js'
import {
  SessionLockError, SessionLockTimeoutError, alreadyHeldError, backendError, closedError, notHeldError
} from './errors.js'
import { KeyedFifo, type FifoRelease } from './keyed-fifo.js'
import { Lease } from './lease.js'
import { RedisLease } from './redis-lease.js'
import { RenewalClock } from './renewal.js'
import { signalOf, type AcquireOptions, type LocalAcquireOptions, type SessionLease, type SessionLock } from './session-lock.js'
import { DEFAULT_LOCK_TIMEOUT, checkTimeout, delay, fullJitter } from './wait.js'
import { roundTrip } from '../telemetry/index.js'
import { settleWithin } from '../util/settle.js'
import { SteadySet } from '../util/steady-map.js'

export { LOCK_CLIENT_OPTIONS, createLockClient } from '../redis/client.js'

/** Options of {@link RedisSessionLock}. */
export interface RedisSessionLockOptions {
  /**
   * An ioredis (5 or 6) client (standalone, Sentinel or Cluster), never closed by the lock; or a
   * URL or ioredis options, from which the lock creates a fail-fast client of the app's ioredis
   * that `close()` closes.
   * An injected client should use {@link LOCK_CLIENT_OPTIONS}, or acquire may hang while Redis is
   * down instead of failing.
   */
  redis: RedisClientLike | string | RedisConnectionOptions
  /** Default acquire timeout in milliseconds (default 30,000; `0` tries once). Must be >= 0. */
  timeout?: number
  /** Lease time-to-live in milliseconds (default 30,000), renewed every ttl/3 while held. */
  ttl?: number
  /** Key prefix (default `'mcp:'`); the lease is `<prefix>{<sid>}:lock`. */
  prefix?: string
  /**
   * Replicas that must acknowledge a lease (taken or renewed) and, on the store + lock fast path,
   * each save, before it counts (Redis `WAIT`; default 0: none). A lease too few replicas hold
   * is released and `acquire()` rejects with a `SessionLockError` whose cause is an
   * `UnconfirmedWriteError`; a renewal too few hold counts as a failed one. Not on a Cluster.
   */
  waitReplicas?: number
  /** How long each of those waits for the replicas, in ms (default 200). */
  waitTimeoutMs?: number
}

/** What a {@link LeaseAttempt} resolves when the lease is busy (someone else holds it). */
export const LEASE_BUSY: unique symbol = Symbol('lease busy')
/** What a {@link LeaseAttempt} resolves when the session does not exist (no lease taken). */
export const SESSION_MISSING: unique symbol = Symbol('session missing')
/** What an `adopt` of {@link RedisSessionLock.acquireWith} returns for a value it does not know. */
export const NOT_ADOPTED: unique symbol = Symbol('not adopted')

/**
 * One try at the lease, given the token, the lock key and the session id (see
 * {@link RedisSessionLock.acquireWith}): resolves the value read when the lease was taken, else
 * {@link LEASE_BUSY} or {@link SESSION_MISSING}. (Markers rather than a result object: no object
 * per try on the request path.)
 */
export type LeaseAttempt<T> = (client: RedisClient, key: string, token: string, id: string) =>
Promise<T | typeof LEASE_BUSY | typeof SESSION_MISSING>

/**
 * Leases passed on in a row inside one process before the lease goes back through Redis: the
 * release and the next acquire re-read the session and refresh its idle TTL in Redis (a chain of
 * requests that change nothing would otherwise never touch the session key).
 */
export const MAX_PASS_ON = 16

/**
 * A lease on its way from one holder of this process to the next (see `passOn`): the token stays
 * valid in Redis, so the next holder skips the round trip that would take it again.
 */
interface Baton {
  readonly key: string
  readonly token: string
  /** When the last command that confirmed the lease was sent (`performance.now()`). */
  readonly confirmedAt: number
  /** How many times in a row it has been passed on. */
  readonly passes: number
  /** What the passing holder hands over (the Redis store: the session as read under the lease). */
  readonly value: unknown
}

/**
 * Fresh 128-bit lease tokens, cut from a pooled random text: a randomBytes() call per acquisition
 * cost more than the rest of the acquire on the request path, and hex-encoding each token's 16
 * bytes (`Buffer#toString`, a call into C++) costs far more than a slice of 256 tokens' worth of
 * hex encoded at once (docs/performance.md).
 */
const TOKEN_CHARS = 32
let tokenPool = ''
let tokenOffset = 0
function newToken (): string {
  if (tokenOffset + TOKEN_CHARS > tokenPool.length) { tokenPool = randomBytes(TOKEN_CHARS / 2 * 256).toString('hex'); tokenOffset = 0 }
  const token = tokenPool.slice(tokenOffset, tokenOffset + TOKEN_CHARS)
  tokenOffset += TOKEN_CHARS
  return token
}

/** How long close() waits for the lease releases and the client's QUIT (ms). */
const CLOSE_TIMEOUT = 1000

/** Session lock backed by a Redis lease. */
export class RedisSessionLock implements SessionLock {
  readonly timeout: number
  /** Lease time-to-live in milliseconds. */
  readonly ttl: number
  /** Key prefix. */
  readonly prefix: string
  readonly #client: RedisClient
  readonly #ownsClient: boolean
  /** The replicas a lease taken by `acquire()` must reach (see the options), if any. */
  readonly #ack: ReplicaAck | undefined
  readonly #fifo = new KeyedFifo()
  /** A lease enters and leaves on every request: a set whose table never empties. */
  readonly #leases = new SteadySet<Lease>()
  readonly #closing = new AbortController()
  /** Leases being passed on, by session id: set just before the slot goes to the next waiter. */
  readonly #batons = new Map<string, Baton>()
  /** Renews every held lease of this lock, on one timer. */
  readonly #renewals: RenewalClock

  /**
   * @throws {RangeError} for a negative `timeout` or a `ttl` that is not positive.
   */
  constructor (options: RedisSessionLockOptions) {
    this.timeout = checkTimeout(options.timeout ?? DEFAULT_LOCK_TIMEOUT)
    const ttl = options.ttl ?? 30_000
    if (!Number.isInteger(ttl) || ttl < 3) throw new RangeError('ttl must be an integer greater than or equal to 3.')
    this.ttl = ttl
    this.#renewals = new RenewalClock(ttl)
    const prefix = options.prefix ?? DEFAULT_KEY_PREFIX
    assertKeyPrefix(prefix)
    this.prefix = prefix
    // A client marked already (a store's, with its waitReplicas) lends its numbers: the default
    // lock on the store's client confirms its leases as the store confirms its writes.
    const ack = replicaAckOf(options) ?? (isRedisClient(options.redis) ? replicaAckFor(options.redis) : undefined)
    this.#ack = ack
    if (isRedisClient(options.redis)) {
      this.#client = defineScripts(requireReplicaAck(options.redis, ack))
      this.#ownsClient = false
    } else {
      this.#client = defineScripts(createLockClient(options.redis, options))
      this.#ownsClient = true
      // Without a listener ioredis reports every failed reconnect on stderr; acquire() already
      // reports the failures that matter to the request that hit them.
      this.#client.on('error', () => {})
    }
  }

  /** The ioredis client this lock uses (its own fail-fast one, or the injected one). */
  get client (): RedisClient {
    return this.#client
  }

  /** Sessions held or waited for by this instance right now (0 when idle). */
  get size (): number {
    return this.#fifo.size
  }

  /** Requests of this process queued behind a holder, over all sessions. */
  get pending (): number {
    return this.#fifo.waiting
  }

  /** Leases this instance holds right now. */
  get held (): number {
    return this.#leases.size
  }

  /**
   * Resolves once the client is connected (at most `timeout` ms): a fail-fast client refuses
   * commands until then, so await this before serving.
   */
  async ready (timeout = 5000): Promise<void> {
    const client = this.#client
    if (client.status === 'ready') return
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { done(); reject(new SessionLockError('Redis did not become ready in time')) }, timeout)
      const onReady = (): void => { done(); resolve() }
      const onEnd = (): void => { done(); reject(new SessionLockError('The Redis connection was closed')) }
      const done = (): void => {
        clearTimeout(timer)
        client.off('ready', onReady)
        client.off('end', onEnd)
      }
      client.on('ready', onReady)
      client.on('end', onEnd)
    })
  }

  async acquire (id: string, options: LocalAcquireOptions = {}): Promise<SessionLease> {
    const ack = this.#ack
    const taken = await this.acquireWith(id, options, async (client, key, token) => {
      roundTrip()
      const set = client.set(key, token, 'PX', this.ttl, 'NX')
      if (ack === undefined) return await set === 'OK' ? undefined : LEASE_BUSY
      // WAIT right behind the SET, on the same connection: one round trip for both.
      const acknowledged = sendWait(client, ack)
      // Handled now: it may time out before the SET's reply comes, and is awaited after it.
      acknowledged.catch(() => {})
      const reply = await set
      return confirmed(reply, await acknowledged, ack, r => r === 'OK') === 'OK' ? undefined : LEASE_BUSY
    },
    () => undefined) // a lease passed on is as good as a fresh one here
    return (taken as NonNullable<typeof taken>).lease
  }

  async tryAcquire (id: string, options: Pick<AcquireOptions, 'owner'> = {}): Promise<SessionLease | null> {
    try {
      return await this.acquire(id, { owner: options.owner, timeout: 0 })
    } catch (err) {
      if (err instanceof SessionLockTimeoutError) return null
      throw err
    }
  }

  /**
   * Rejects waiters, stops renewals, releases held leases (aborting their signals) and closes the
   * client if the lock created it. Bounded; never throws.
   */
  async close (): Promise<void> {
    if (this.#closing.signal.aborted) return
    this.#closing.abort(closedError())
    this.#fifo.rejectAll(closedError())
    // Leases on their way to a next holder, who will find the lock closed: released here, before
    // the QUIT below (a release sent after it would find the connection closing).
    const passing = [...this.#batons.values()].map(b => this.#client.mcpLockRelease(b.key, b.token).catch(() => {}))
    await settleWithin(Promise.all([...passing, ...this.#leases.values().map(lease => lease.revoke(closedError()))]), CLOSE_TIMEOUT, { keepAlive: false })
    this.#renewals.stopAll()
    if (this.#ownsClient && this.#client.status !== 'end') {
      const client = this.#client
      const ended = new Promise(resolve => client.once('end', resolve))
      await settleWithin(client.quit(), CLOSE_TIMEOUT, { keepAlive: false })
      client.disconnect() // after a QUIT that timed out (hung server), or while reconnecting
      await settleWithin(ended, CLOSE_TIMEOUT, { keepAlive: false })
    }
  }

  /**
   * Waits for the lease like `acquire()`, taking it with `attempt` (one round trip). Resolves
   * null, holding nothing, when the attempt reports the session missing. When the previous holder
   * of this process passed the lease on ({@link passOn}), `adopt` turns what it handed over into
   * the value, and no command is sent; `adopt` returning {@link NOT_ADOPTED} sends the
   * lease's release and takes it afresh. For the store + lock fast path (`state/redis-fast-path.ts`).
   * @internal
   */
  async acquireWith<T> (id: string, options: LocalAcquireOptions, attempt: LeaseAttempt<T>,
    adopt: (handed: unknown) => T | typeof NOT_ADOPTED = () => NOT_ADOPTED): Promise<{ lease: Lease, value: T } | null> {
    if (this.#closing.signal.aborted) throw closedError()
    const timeout = options.timeout === undefined ? this.timeout : checkTimeout(options.timeout)
    if (this.#fifo.isHeldBy(id, options.owner)) throw alreadyHeldError(id)
    const deadline = performance.now() + timeout
    const onTimeout = (): Error => new SessionLockTimeoutError(id, timeout)
    // A free slot is taken without waiting: no promise and no job, and the attempt below is sent
    // within this call.
    const slot = this.#fifo.grantNow(id, options) ??
      await this.#fifo.acquire(id, { timeout, signal: options.signal, owner: options.owner, front: options.priority, onTimeout })
    const key = lockKey(this.prefix, id)
    const baton = this.#batons.get(id)
    if (baton !== undefined) {
      this.#batons.delete(id)
      // close() released it already.
      if (this.#closing.signal.aborted) { slot(); throw closedError() }
      const adopted = adopt(baton.value)
      if (adopted !== NOT_ADOPTED) {
        return { lease: this.#lease(id, baton.key, baton.token, slot, baton.confirmedAt, baton.passes), value: adopted }
      }
      // Sent before our own attempt on the same connection: Redis runs the two in order.
      this.#client.mcpLockRelease(baton.key, baton.token).catch(() => {})
    }
    const token = newToken()
    try {
      for (let poll = 0; ; poll++) {
        const sentAt = performance.now()
        let result: Awaited<ReturnType<LeaseAttempt<T>>>
        try {
          result = await attempt(this.#client, key, token, id)
        } catch (err) {
          // A command that timed out on our side may still have run on the server: free what we
          // may hold, or it would stay busy until its TTL.
          this.#client.mcpLockRelease(key, token).catch(() => {})
          throw backendError(id, err)
        }
        if (result !== LEASE_BUSY && result !== SESSION_MISSING) {
          if (this.#closing.signal.aborted) {
            // close() ran while we were taking it: nobody would release this lease.
            this.#client.mcpLockRelease(key, token).catch(() => {})
            throw closedError()
          }
          return { lease: this.#lease(id, key, token, slot, sentAt), value: result }
        }
        if (result === SESSION_MISSING) {
          slot()
          return null
        }
        const remaining = deadline - performance.now()
        if (remaining <= 0) throw onTimeout()
        await delay(Math.max(1, Math.min(remaining, fullJitter(poll, 5, 50))), signalOf(options.signal), this.#closing.signal)
      }
    } catch (err) {
      slot()
      throw err
    }
  }

  #lease (id: string, key: string, token: string, slot: FifoRelease, sentAt: number, passes = 0): Lease {
    return new RedisLease(id, this, this.ttl, this.#client, key, token, slot, passes, this.#leases, this.#renewals, sentAt)
  }

  /**
   * Passes a held lease to the next request of this process waiting for the same session, with
   * `value` for it (see {@link acquireWith}'s `adopt`): no command is sent, and the lease token stays
   * valid in Redis, renewed as before. Ends the caller's lease (like `release()`) and returns
   * true; returns false, changing nothing, when there is no such waiter, when the lease was lost
   * or is not confirmed recently enough, when the lock is closing, or after
   * {@link MAX_PASS_ON} passes in a row (the caller then releases it normally, so another
   * instance can take it).
   * @internal
   */
  passOn (lease: SessionLease, value: unknown): boolean {
    if (!(lease instanceof RedisLease) || !lease.tracked || lease.lock !== this || lease.lost || !lease.held) return false
    if (this.#closing.signal.aborted || lease.passes >= MAX_PASS_ON || !this.#fifo.hasWaiters(lease.id)) return false
    // Renewals confirm the lease every ttl/3; one overdue means Redis is slow or gone.
    if (performance.now() - lease.renewal.confirmedAt > this.ttl / 2) return false
    lease.claim() // held, checked above
    lease.forget()
    this.#batons.set(lease.id, { key: lease.key, token: lease.token, confirmedAt: lease.renewal.confirmedAt, passes: lease.passes + 1, value })
    lease.slot()
    return true
  }

  /**
   * Ends a lease of this lock with `finish` (one round trip that also releases it in Redis)
   * instead of the plain compare-and-delete; the local slot is freed once `finish` is sent.
   * @internal
   */
  async releaseWith<T> (
    lease: SessionLease,
    finish: (client: RedisClient, key: string, token: string) => Promise<T>
  ): Promise<T> {
    const state = lease instanceof RedisLease && lease.tracked && lease.lock === this ? lease : undefined
    if (state === undefined) {
      if (lease instanceof Lease && !lease.held) throw notHeldError(lease.id)
      throw new TypeError('Not a lease of a RedisSessionLock')
    }
    if (!state.claim()) throw notHeldError(lease.id)
    state.forget()
    let finished: Promise<T>
    try {
      finished = finish(state.client, state.key, state.token)
    } catch (err) {
      // A `finish` that throws before it sends: handled below as a failed script.
      finished = Promise.reject(err)
    }
    // The release is on the wire: the local slot is freed now, not when its reply arrives. The
    // next waiter of this process for the session sends its acquire on the same connection, behind
    // the release, and Redis runs the two in order; so a handoff costs one round trip, not two,
    // and one busy session's throughput is made of handoffs.
    state.slot()
    try {
      return await finished
    } catch (err) {
      // The script failed (Redis refusing writes, a timeout): it may not have released the lease.
      // A compare-and-delete frees it now where Redis still takes commands (DEL is allowed under
      // maxmemory), instead of leaving the session busy for the lease's ttl.
      state.client.mcpLockRelease(state.key, state.token).catch(() => {})
      throw err
    }
  }
}
