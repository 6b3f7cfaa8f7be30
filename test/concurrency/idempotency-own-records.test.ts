/**
 * Keyed calls on no state (no session, no handle) on Redis and on PostgreSQL, with two app
 * instances on one store: the call's record of its own (`~call~<digest>`) is made by the first,
 * a copy sent to the other instance while the first still runs is refused at once (409,
 * `Retry-After`), a copy after it completed is replayed there, and the record expires with
 * `idempotency.ttlMs`.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { injectClient, PgSessionLock, PgSessionStore, RedisSessionLock, RedisSessionStore, type McpPluginOptions } from '../../lib/index.js'
import { failFastRedis } from '../helpers/fail-fast-redis.js'
import { mcpErrorOf } from '../helpers/mcp-error.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { sleep, until } from '../helpers/time.js'

t.setTimeout(120_000)
const REPLAY = 'fastify-mcp-http/idempotentReplay'

type Sessions = () => Promise<McpPluginOptions['sessions']>

async function instance (t: Test, sessions: McpPluginOptions['sessions'], runs: Map<string, number>): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { requestState: { secret: 'own-records-secret-0123456789' }, sessions, idempotency: { ttlMs: 1000 } })
  app.mcp.tool({
    name: 'send_mail',
    description: 'Sends a mail (counted across instances).',
    input: Type.Object({ to: Type.String(), delayMs: Type.Optional(Type.Integer()) })
  }, async ({ to, delayMs = 0 }) => {
    runs.set(to, (runs.get(to) ?? 0) + 1)
    if (delayMs > 0) await sleep(delayMs)
    return `sent to ${to}`
  })
  await app.ready()
  return app
}

const redis = await startRedisServer(t)
const db = await createTestDatabase(t)
const BACKENDS: Record<string, (t: Test) => Sessions> = {
  redis: (t) => async () => {
    const lock = new RedisSessionLock({ redis: redis.url, timeout: 5000 })
    t.teardown(() => lock.close())
    await lock.ready()
    return { store: new RedisSessionStore({ redis: await failFastRedis(t, redis.url) }), lock }
  },
  postgres: (t) => async () => {
    const pool = db.pool({ max: 4 })
    return { store: new PgSessionStore({ pool }), lock: new PgSessionLock({ pool, timeout: 5000 }) }
  }
}

for (const [name, backend] of Object.entries(BACKENDS)) {
  t.test(`${name}: a keyed call on no state across two instances — in flight refused at once, done replayed, expired runs again`, async t => {
    const runs = new Map<string, number>()
    const make = backend(t)
    const [a, b] = await Promise.all([instance(t, await make(), runs), instance(t, await make(), runs)])
    const onA = injectClient(a, { protocolVersion: '2026-07-28' })
    const onB = injectClient(b, { protocolVersion: '2026-07-28' })
    const first = onA.callTool('send_mail', { to: 'ann', delayMs: 400 }, { idempotencyKey: 'mail-1' })
    await until(() => runs.get('ann') === 1, { timeout: 10_000, what: 'the first call to run' })
    const refused = await mcpErrorOf(onB.callTool('send_mail', { to: 'ann', delayMs: 400 }, { idempotencyKey: 'mail-1' }))
    t.equal(refused.status, 409, 'the copy on the other instance is refused while the first runs')
    t.match(refused.data, { reason: 'idempotency_key_in_flight' })
    t.same((await first).content, [{ type: 'text', text: 'sent to ann' }])
    const replay = await onB.callTool('send_mail', { to: 'ann', delayMs: 400 }, { idempotencyKey: 'mail-1' })
    t.equal((replay as Record<string, any>)._meta?.[REPLAY], true, 'once done, the copy is replayed on the other instance')
    t.equal(runs.get('ann'), 1, 'it ran once')
    await sleep(1500)
    const later = await onB.callTool('send_mail', { to: 'ann' }, { idempotencyKey: 'mail-1' })
    t.notOk((later as Record<string, any>)._meta?.[REPLAY], 'after ttlMs the record is gone: the key runs again')
    t.equal(runs.get('ann'), 2)
  })
}
