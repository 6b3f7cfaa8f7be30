/**
 * The Redis pairing: with a `RedisSessionStore` and a `RedisSessionLock` on the same server,
 * take-lock+read is one Lua script and save+release another, so a locked request costs two round
 * trips instead of four; and a request that changed nothing hands the lease, with the state it read,
 * to the next request of this process queued for the same key, for none.
 *
 * This pairing is the one place that knows both: it runs the store's scripts (and codec) on the
 * lock's fail-fast client, through the lock's lease machinery (FIFO, token, renewal, pass-on).
 */
import { LEASE_BUSY, SESSION_MISSING, type BackendLeases, type LeaseAttempt } from '../../locks/backend-leases.js'
import { redisLeaseEngine, type RedisSessionLock } from '../../locks/redis-lock.js'
import type { LocalAcquireOptions, SessionLease } from '../../locks/session-lock.js'
import { sessionKey } from '../../redis/keys.js'
import type { McpScripts, RedisClient } from '../../redis/scripts.js'
import { saveArguments, type RedisSessionStore } from '../../sessions/redis-store.js'
import type { SaveGuard, SaveResult, SessionChanges } from '../../sessions/session-store.js'
import { roundTrip } from '../../telemetry/index.js'
import { redisWrite } from '../../redis/write-outcome.js'
import type { CloseResult } from '../outcome.js'
import { AnyPairing } from './any-pairing.js'
import type { Taken, WriteItem } from './pairing.js'

/** The take-lock+read script's reply when it took the lease: '1 ', then a `SessionReply`. */
type TakenReply = Exclude<Awaited<ReturnType<McpScripts['mcpAcquireAndLoad']>>, '0' | '2'>

/** The take-lock+read script's reply as a lease attempt's outcome. */
function takenOrNot (reply: Awaited<ReturnType<McpScripts['mcpAcquireAndLoad']>>): TakenReply | typeof SESSION_MISSING | typeof LEASE_BUSY {
  if (reply === '2') return SESSION_MISSING
  return reply === '0' ? LEASE_BUSY : reply
}

/** Store + lock in one backend call each (see the module doc). */
export class RedisPairing extends AnyPairing {
  override readonly oneCall = true
  readonly #store: RedisSessionStore
  /** The lock's lease machinery. */
  readonly #leases: BackendLeases<RedisClient>
  /**
   * One try at the lease (see takeWith), made once rather than a closure per request. A
   * lease it read is passed on with the raw reply, which the next holder it takes decodes anew:
   * what one request mutated without saving never reaches the next.
   */
  readonly #attempt: LeaseAttempt<RedisClient, TakenReply>

  /** Both must use the same Redis server and database (nothing can check it). */
  constructor (store: RedisSessionStore, lock: RedisSessionLock) {
    super(store, lock, true)
    this.#store = store
    this.#leases = redisLeaseEngine(lock)
    // A Cluster keeps records in other slots: no script writes several of them.
    if (this.#leases.handle.isCluster) this.writeTogether = undefined
    // Not async: the script's promise and one `then`, no async function's frame kept alive (and
    // copied by the young-generation GC) across the round trip.
    this.#attempt = (client, key, token, id) => {
      roundTrip()
      return client.mcpAcquireAndLoad(key, sessionKey(store.prefix, id), token, lock.ttl, store.ttl).then(takenOrNot)
    }
  }

  /**
   * Waits for the key's lease as `lock.acquire()` does (FIFO, backoff, timeout, signal, owner,
   * errors) where each try is one script: `SET NX PX` of the lease, then HGETALL and PEXPIRE of the
   * state (returned as one JSON document). Resolves null, holding nothing, when the state does not exist. State that cannot be
   * decoded releases the lease and rejects.
   */
  protected override async takeWith (id: string, options: LocalAcquireOptions): Promise<Taken | null> {
    const taken = await this.#leases.acquireWith(id, options, this.#attempt)
    if (taken === null) return null
    let record
    try {
      record = this.#store.decode(id, taken.value, 2)
    } catch (err) {
      await taken.lease.release().catch(() => {})
      throw err
    }
    return { lease: taken.lease, record }
  }

  /**
   * Passes an unchanged state and its lease to the next request of this process waiting for it
   * (no round trip: nobody else can have written the state while the lease was held, since every
   * write goes through it). False when the lease cannot be passed on; release it then.
   */
  override passOn (_id: string, lease: SessionLease): boolean {
    return this.#leases.passOn(lease, this.#attempt)
  }

  /**
   * Several records' fenced saves and their leases' releases in one script, all or none (see
   * SAVE_AND_RELEASE_MANY). Every lease ends here, even when the call fails.
   */
  writeTogether?: (items: readonly WriteItem[]) => Promise<CloseResult[]> = async (items) => {
    const store = this.#store
    const leases = items.map(i => i.lease)
    let perItem: Array<Array<string | number>>
    try {
      if (leases.includes(null)) throw new TypeError('a write of several records takes their leases')
      // Keys and values are checked before anything is sent.
      perItem = items.map(i => {
        const args = saveArguments(store.ttl, i.changes, '', i.guard.version)
        args.splice(0, 1)
        args.splice(3, 0, i.changes.delete.length)
        return args
      })
    } catch (error) {
      await Promise.all(leases.map(async lease => await lease?.release().catch(() => {})))
      return items.map(() => ({ status: 'failed', error }))
    }
    try {
      const reply = await this.#leases.releaseAllWith(leases as SessionLease[], (client, keys, tokens) => {
        const keyArgs: string[] = []
        const args: Array<string | number> = [store.ttl, items.length]
        items.forEach((item, i) => {
          keyArgs.push(sessionKey(store.prefix, item.id), keys[i])
          perItem[i][0] = tokens[i]
          args.push(...perItem[i])
        })
        roundTrip()
        return redisWrite(client, () => client.mcpSaveAndReleaseMany(keyArgs.length, ...keyArgs, ...args))
      })
      return reply.split(' ').map(status => ({ status }) as CloseResult)
    } catch (error) {
      return items.map(() => ({ status: 'failed', error }))
    }
  }

  /**
   * Fenced save (by the lease's token, and `guard.version`) plus compare-and-delete of the lease,
   * in one script on the lock's client. The lease ends here even if the call fails (it then
   * expires in Redis after the lock's ttl).
   * Not async: the release's promise is returned as it is.
   * @throws {SessionLockError} "not held" for a lease released already (as a rejection).
   */
  protected override saveAndRelease (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease): Promise<SaveResult> {
    const store = this.#store
    let args: ReturnType<typeof saveArguments>
    try {
      // Keys and values are checked before anything is sent.
      args = saveArguments(store.ttl, changes, '', guard.version)
    } catch (err) {
      // Nothing to save: the lease ends all the same, as promised (its caller lets go of it).
      return lease.release().then(() => { throw err }, () => { throw err })
    }
    return this.#leases.releaseWith(lease, (client, key, token) => {
      args[1] = token
      roundTrip()
      return redisWrite(client, () => client.mcpSaveAndRelease(sessionKey(store.prefix, id), key, ...args))
    })
  }
}
