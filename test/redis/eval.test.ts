/**
 * The plugin's scripts as plain EVALSHA/EVAL commands (lib/redis/eval.ts): the same commands on
 * the wire as ioredis' defineCommand sent (EVAL first on a connection, EVALSHA after), and the
 * NOSCRIPT fallback after a SCRIPT FLUSH or a new connection.
 */
import t from 'tap'
import { once } from 'node:events'
import { Redis } from 'ioredis'
import { defineScripts, type RedisClientLike } from '../../lib/redis/scripts.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => admin.disconnect())

t.test('EVAL on a connection\'s first call, EVALSHA after; NOSCRIPT (SCRIPT FLUSH) → EVAL again', async t => {
  const client = new Redis(server.url)
  t.teardown(() => client.disconnect())
  await admin.script('FLUSH')
  const scripts = defineScripts(client as unknown as RedisClientLike)
  t.equal(defineScripts(client as unknown as RedisClientLike), scripts, 'defined once')
  await admin.set('k', 'tok')

  const first = await commandsSent(admin, async () => await scripts.mcpLockExtend('k', 'tok', 5000))
  t.equal(first.value, 1)
  t.same(first.commands, ['eval'], 'first call on the connection: EVAL loads the script')

  const next = await commandsSent(admin, async () => await scripts.mcpLockExtend('k', 'tok', 5000))
  t.equal(next.value, 1)
  t.same(next.commands, ['evalsha'], 'then EVALSHA')

  await admin.script('FLUSH')
  const flushed = await commandsSent(admin, async () => await scripts.mcpLockExtend('k', 'tok', 5000))
  t.equal(flushed.value, 1, 'the call still answers after SCRIPT FLUSH')
  t.same(flushed.commands, ['evalsha', 'eval'], 'EVALSHA answered NOSCRIPT, sent again as EVAL')
  const reloaded = await commandsSent(admin, async () => await scripts.mcpLockExtend('k', 'tok', 5000))
  t.same(reloaded.commands, ['evalsha'], 'loaded again: EVALSHA')

  // Another script, never sent on this connection: EVAL, whatever the server's cache holds.
  const release = await commandsSent(admin, async () => await scripts.mcpLockRelease('k', 'tok'))
  t.equal(release.value, 1)
  t.equal(await admin.exists('k'), 0, 'and it ran')
  t.same(release.commands, ['eval'])
})

t.test('a new connection (reconnect) starts with EVAL again; script errors other than NOSCRIPT are not retried', async t => {
  const client = new Redis(server.url)
  t.teardown(() => client.disconnect())
  const scripts = defineScripts(client as unknown as RedisClientLike)
  await scripts.mcpLockRelease('gone', 'tok')
  const before = client.stream
  const ready = once(client, 'ready')
  client.disconnect(true) // and reconnect: a new socket
  await ready
  t.not(client.stream, before, 'a new socket')
  const again = await commandsSent(admin, async () => await scripts.mcpLockRelease('gone', 'tok'))
  t.equal(again.value, 0)
  t.same(again.commands, ['eval'], 'new socket: EVAL')

  await admin.hset('h', 'f', 'v') // GET on a hash: WRONGTYPE inside the script
  const failed = await commandsSent(admin, async () => await scripts.mcpLockRelease('h', 'tok').then(() => null, (err: Error) => err))
  t.match(failed.value, { message: /WRONGTYPE/ }, 'the script\'s error rejects the call')
  t.same(failed.commands, ['evalsha'], 'sent once')
})
