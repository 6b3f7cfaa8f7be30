/** The lease a `RedisSessionLock` hands out (see `redis-lock.ts`): a key holding the lease's token. */
import type { RedisClient } from '../redis/scripts.js'
import { BackendLease } from './backend-lease.js'

/** A lease of a `RedisSessionLock`: renewed by compare-and-PEXPIRE. */
export class RedisLease extends BackendLease<RedisClient> {
  async extendLease (): Promise<number> {
    return await this.home.handle.mcpLockExtend(this.key, this.token, this.home.ttl)
  }
}
