import t from 'tap'
import type { Redis } from 'ioredis'
import { LOCK_CLIENT_OPTIONS, createRedisClient as create, type CreateRedisClientOptions, type RedisConnectionOptions } from '../../lib/index.js'

/** The plugin types what it makes structurally; here it is the ioredis client it is. */
const createRedisClient = (connection: RedisConnectionOptions, options?: CreateRedisClientOptions): Redis => create(connection, options) as unknown as Redis

t.test('createRedisClient: the fail-fast settings win over what is passed, and an error listener is always there', async t => {
  const client = createRedisClient({ lazyConnect: true, enableOfflineQueue: true, maxRetriesPerRequest: 20 })
  t.teardown(() => client.disconnect())
  t.equal(client.options.lazyConnect, true, 'the caller\'s other options are kept')
  for (const [key, value] of Object.entries(LOCK_CLIENT_OPTIONS)) {
    t.equal((client.options as Record<string, unknown>)[key], value, `${key}`)
  }
  t.ok(client.listenerCount('error') >= 1, 'an error listener: ioredis prints nothing itself')
})

t.test('createRedisClient: one warn per outage through `log`, retries at debug, the end at info', async t => {
  const lines: Array<[string, string]> = []
  const log = {
    warn: (_o: object, msg: string) => { lines.push(['warn', msg]) },
    debug: (_o: object, msg: string) => { lines.push(['debug', msg]) },
    info: (_o: object, msg: string) => { lines.push(['info', msg]) }
  }
  const client = createRedisClient({ lazyConnect: true }, { log })
  t.teardown(() => client.disconnect())
  client.emit('error', new Error('a'))
  client.emit('error', new Error('b'))
  client.emit('ready')
  client.emit('error', new Error('c'))
  t.same(lines, [
    ['warn', 'redis connection error'],
    ['debug', 'redis connection error (still down)'],
    ['info', 'redis connection restored'],
    ['warn', 'redis connection error']
  ])
  // Without a logger: silent, and no throw.
  const quiet = createRedisClient({ lazyConnect: true })
  t.teardown(() => quiet.disconnect())
  t.doesNotThrow(() => quiet.emit('error', new Error('x')))
})
