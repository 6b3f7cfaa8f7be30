/**
 * A fail-fast ioredis client for a test's store (no offline queue, no retries: while Redis is
 * down a request is answered 503 at once instead of queued), connected before it is returned.
 * Such a client refuses every command until its connection is up, so a test that used it at
 * once would see a 503 whenever the machine is slow to connect (the plugin sends nothing on a
 * fail-fast client that is not connected: nothing was written).
 */
import { once } from 'node:events'
import { Redis, type RedisOptions } from 'ioredis'

interface Teardown {
  teardown (fn: () => unknown): void
}

/**
 * A connected fail-fast client on `url`, disconnected in teardown; its errors are swallowed (fault
 * tests stop the server). `options` go over the fail-fast ones (e.g. the plugin's `LOCK_CLIENT_OPTIONS`).
 */
export async function failFastRedis (t: Teardown, url: string, options: RedisOptions = {}): Promise<Redis> {
  const client = new Redis(url, { maxRetriesPerRequest: 0, enableOfflineQueue: false, ...options })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  if (client.status !== 'ready') await once(client, 'ready')
  return client
}
