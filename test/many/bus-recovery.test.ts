/**
 * The Redis bus and the hub when the bus's Redis is slow or gone (in-process, private redis-server),
 * with a fail-fast publishing client (LOCK_CLIENT_OPTIONS: no offline queue, 500 ms command
 * timeout), as a deployment that gives every client those settings has:
 *
 * - a SUBSCRIBE sent while the subscriber is still connecting waits for the connection (it used to
 *   fail at once, or after the 500 ms command timeout on a busy machine, and the plugin's broadcast
 *   subscription then crashed the process with an unhandled rejection);
 * - a SUBSCRIBE that failed (Redis down) is not trusted afterwards: the next subscribe sends it again;
 * - a session whose bus subscription failed works again once Redis is back (its GET used to fail
 *   for good on that instance: the hub kept the rejected subscription).
 */
import t from 'tap'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import mcp, { LOCK_CLIENT_OPTIONS, RedisBus, type BusMessage } from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { getStream, initialize } from '../helpers/http-client.js'
import { sleep, until } from '../helpers/time.js'

t.setTimeout(60_000)
const server = await startRedisServer(t)

function failFastClient (): Redis {
  const client = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  return client
}

const note = (text: string): BusMessage => ({ t: 'broadcast', kind: 'custom', msg: { jsonrpc: '2.0', method: 'notifications/test', params: { text } } })
const textOf = (m: BusMessage): unknown => m.t === 'broadcast' ? (m.msg.params as { text?: string } | undefined)?.text : undefined

t.test('a SUBSCRIBE sent while the subscriber connects waits for it (fail-fast publishing client)', async t => {
  // A frozen server accepts the TCP connection but answers nothing: the subscriber stays "connecting".
  server.pause()
  let resumed = false
  t.teardown(() => { if (!resumed) server.resume() })
  const client = failFastClient()
  const bus = new RedisBus({ redis: client })
  t.teardown(() => bus.close())
  const got: unknown[] = []
  const subscribing = bus.subscribe('broadcast', (m) => { got.push(textOf(m)) })
  let settled: string | null = null
  subscribing.then(() => { settled = 'subscribed' }, (err: Error) => { settled = `failed: ${err.message}` })
  await sleep(1200) // past the 500 ms command timeout of LOCK_CLIENT_OPTIONS
  t.equal(settled, null, 'still waiting for the connection, not failed')
  server.resume()
  resumed = true
  await subscribing
  t.equal(settled, 'subscribed', 'subscribed once the server answers')
  await until(() => client.status === 'ready', { timeout: 5000, what: 'the publishing client' })
  await bus.publish('broadcast', note('hello'))
  await until(() => got.length > 0, { timeout: 3000, what: 'the message' })
  t.same(got, ['hello'], 'and receives what is published')
})

t.test('a SUBSCRIBE that failed (Redis down) is sent again by the next subscribe', async t => {
  const client = failFastClient()
  await until(() => client.status === 'ready', { timeout: 5000, what: 'the client' })
  const bus = new RedisBus({ redis: client })
  t.teardown(() => bus.close())
  await (await bus.subscribe('warm-up', () => {}))()
  await server.stop()
  const failed = await bus.subscribe('s:abc', () => {}).then(() => 'subscribed', (err: Error) => err.message)
  t.not(failed, 'subscribed', `refused while Redis is down (${failed})`)
  t.equal(bus.channels, 0, 'the failed listener is not kept')
  await server.start()
  await until(() => client.status === 'ready', { timeout: 5000, what: 'the client to reconnect' })
  const got: unknown[] = []
  await bus.subscribe('s:abc', (m) => { got.push(textOf(m)) })
  await bus.publish('s:abc', note('after'))
  await until(() => got.length > 0, { timeout: 3000, what: 'the message after the restart' })
  t.same(got, ['after'], 'subscribed for real this time')
})

t.test('a session whose bus subscription failed works again once Redis is back', async t => {
  // Sessions in memory, the bus on Redis: the store answers while the bus is down.
  const client = failFastClient()
  await until(() => client.status === 'ready', { timeout: 5000, what: 'the client' })
  const app = Fastify({ logger: false })
  await app.register(mcp, { redis: client, keepAliveIntervalMs: 0 })
  app.mcp.tool({ name: 'noop', description: 'x' }, async () => 'x')
  t.teardown(() => app.close())
  const url = `${await app.listen({ port: 0, host: '127.0.0.1' })}/mcp`
  const session = await initialize(url)
  const get = async (): Promise<number> => {
    const res = await getStream(url, session, { signal: AbortSignal.timeout(5000) })
    await res.body?.cancel()
    return res.status
  }
  await server.stop()
  const during = await get()
  t.not(during, 200, `no GET stream while the bus is down (${during})`)
  t.equal(during, 503, 'refused with 503 like a store or lock failure')
  await server.start()
  await until(() => client.status === 'ready', { timeout: 5000, what: 'the client to reconnect' })
  t.equal(await get(), 200, 'the same session opens its GET stream again on this instance')
  t.equal(await get(), 200, 'and again')
})
