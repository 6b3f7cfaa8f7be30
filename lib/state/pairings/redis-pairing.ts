/**
 * The Redis pairing: with a `RedisSessionStore` and a `RedisSessionLock` on the same server,
 * take-lock+read is one Lua script and save+release another, so a locked request costs two round
 * trips instead of four; and a request that changed nothing hands the lease, with the state it read,
 * to the next request of this process queued for the same key, for none.
 *
 * This pairing is the one place that knows both: it runs the store's scripts (and codec) on the
 * lock's fail-fast client, through the lock's lease machinery (FIFO, token, renewal, pass-on).
 */
import { LEASE_BUSY, SESSION_MISSING, type LeaseAttempt } from '../../locks/backend-leases.js'
import { redisLeaseEngine, type RedisSessionLock } from '../../locks/redis-lock.js'
import { sessionKey } from '../../redis/keys.js'
import type { McpScripts, RedisClient } from '../../redis/scripts.js'
import { saveArguments, type RedisSessionStore } from '../../sessions/redis-store.js'
import type { SaveResult, SessionRecord } from '../../sessions/session-store.js'
import { roundTrip } from '../../telemetry/index.js'
import { redisWrite } from '../../redis/write-outcome.js'
import { LeasePairing, type LeaseWrites } from './lease-pairing.js'

/** The take-lock+read script's reply when it took the lease: '1 ', then a `SessionReply`. */
type TakenReply = Exclude<Awaited<ReturnType<McpScripts['mcpAcquireAndLoad']>>, '0' | '2'>

/** The take-lock+read script's reply as a lease attempt's outcome. */
function takenOrNot (reply: Awaited<ReturnType<McpScripts['mcpAcquireAndLoad']>>): TakenReply | typeof SESSION_MISSING | typeof LEASE_BUSY {
  if (reply === '2') return SESSION_MISSING
  return reply === '0' ? LEASE_BUSY : reply
}

/** A save's script arguments (see `saveArguments`): session ttl, fence token, version read, then the changes. */
type SaveArgs = Array<string | number>

/** The save scripts, on the lock's client (see `redis/scripts.ts`, FENCED_WRITE). */
function writes (store: RedisSessionStore): LeaseWrites<RedisClient, SaveArgs> {
  return {
    // Keys and values are checked before anything is sent.
    prepare: (changes, guard) => saveArguments(store.ttl, changes, '', guard.version),
    save: (client, id, key, token, args) => {
      args[1] = token
      roundTrip()
      return redisWrite(client, () => client.mcpSaveAndRelease(sessionKey(store.prefix, id), key, ...args)) as Promise<SaveResult>
    },
    // SAVE_AND_RELEASE_MANY: the keys of each record and its lease; then ttl, count, and per
    // record its token, version, numbers of set and deleted keys, and the changes.
    saveMany: async (client, items, prepared, keys, tokens) => {
      const keyArgs: string[] = []
      const args: Array<string | number> = [store.ttl, items.length]
      items.forEach((item, i) => {
        keyArgs.push(sessionKey(store.prefix, item.id), keys[i])
        const own = prepared[i].slice(1)
        own[0] = tokens[i]
        own.splice(3, 0, item.changes.delete.length)
        args.push(...own)
      })
      roundTrip()
      const reply = await redisWrite(client, () => client.mcpSaveAndReleaseMany(keyArgs.length, ...keyArgs, ...args))
      return reply.split(' ')
    }
  }
}

/** Store + lock in one backend call each (see the module doc). */
export class RedisPairing extends LeasePairing<RedisClient, TakenReply, SaveArgs> {
  readonly #store: RedisSessionStore

  /** Both must use the same Redis server and database (nothing can check it). */
  constructor (store: RedisSessionStore, lock: RedisSessionLock) {
    // Each try at the lease is one script: `SET NX PX` of the lease, then HGETALL and PEXPIRE of
    // the state (returned as one JSON document). Not async: the script's promise and one `then`,
    // no async function's frame kept alive (and copied by the young-generation GC) across the
    // round trip.
    const attempt: LeaseAttempt<RedisClient, TakenReply> = (client, key, token, id) => {
      roundTrip()
      return client.mcpAcquireAndLoad(key, sessionKey(store.prefix, id), token, lock.ttl, store.ttl).then(takenOrNot)
    }
    const leases = redisLeaseEngine(lock)
    super(store, lock, leases, attempt, writes(store))
    this.#store = store
    // A Cluster keeps records in other slots: no script writes several of them.
    if (leases.handle.isCluster) this.writeTogether = undefined
  }

  protected decode (id: string, reply: TakenReply): SessionRecord {
    return this.#store.decode(id, reply, 2)
  }
}
