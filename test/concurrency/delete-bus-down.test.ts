/**
 * DELETE tells the client what was kept: once the store has removed the session, the answer is 200
 * even when telling the other instances fails (the Redis bus is down), with a warning in the log;
 * the session is gone for the next request (404). Before, the bus failure after the removal was
 * answered 500, so a client was told its DELETE failed when it had happened.
 */
import Fastify from 'fastify'
import t from 'tap'
import { Redis } from 'ioredis'
import { registerDemoTools } from '../../examples/demo-tools.js'
import mcp, { LOCK_CLIENT_OPTIONS } from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { deleteSession, initialize, post } from '../helpers/http-client.js'
import { LogCapture } from './fixtures/app.js'
import { until } from '../helpers/time.js'
import { newId } from '../helpers/wire.js'

const server = await startRedisServer(t)

t.test('the Redis bus down after the store removed the session: 200, a warning, then 404', async t => {
  // No offline queue: a command while Redis is down fails at once instead of waiting.
  const redis = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
  redis.on('error', () => {})
  const logs = new LogCapture()
  const app = Fastify({ logger: { level: 'warn', stream: logs.stream } })
  await app.register(mcp, { redis })
  registerDemoTools(app.mcp)
  t.teardown(async () => { await app.close(); redis.disconnect() })
  const url = (await app.listen({ port: 0, host: '127.0.0.1' })) + '/mcp'

  const session = await initialize(url)
  await server.stop()
  await until(() => redis.status !== 'ready', { timeout: 3000, what: 'the client to notice' })

  t.equal(await deleteSession(url, session), 200, 'the session was removed from the store: the client is told so')
  t.ok(logs.lines.some(l => String(l.msg).includes('could not be told to other instances')), 'the failed announcement is logged')
  const after = await post(url, { jsonrpc: '2.0', id: newId(), method: 'tools/list' }, session)
  t.equal(after.status, 404, 'the session is gone')
})
