/**
 * Start-up logging: a random `requestState.secret` is fine for one process (info), and worth a
 * warning only when the configuration says several processes share sessions (Redis, a file or
 * custom store, a shared lock, bus or event log). `redis` given without a store: a warning that
 * sessions, handles and tasks stay in this process's memory.
 */
import t from 'tap'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import mcp, { FileSessionStore, MemoryBus, MemorySessionLock, MemorySessionStore, RedisSessionStore, type Bus, type McpPluginOptions } from '../../lib/index.js'
import { MEMORY_STATE_WARNING } from '../../lib/backends.js'
import { startRedisServer } from '../helpers/redis-server.js'

async function startLines (opts: McpPluginOptions): Promise<Array<{ level: number, msg: string }>> {
  const lines: Array<{ level: number, msg: string }> = []
  const app = Fastify({ logger: { level: 'trace', stream: { write: (l: string) => { lines.push(JSON.parse(l)) } } } })
  await app.register(mcp, opts)
  await app.ready()
  await app.close()
  return lines
}

async function secretLines (opts: McpPluginOptions): Promise<Array<{ level: number, msg: string }>> {
  return (await startLines(opts)).filter(l => /requestState\.secret/.test(l.msg))
}

t.test('one process (the defaults, memory store and lock): info, not warn', async (t) => {
  for (const opts of [{}, { sessions: { store: new MemorySessionStore(), lock: new MemorySessionLock() }, bus: new MemoryBus() }] as McpPluginOptions[]) {
    const lines = await secretLines(opts)
    t.equal(lines.length, 1)
    t.equal(lines[0].level, 30, 'info')
  }
})

t.test('several processes configured: warn', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-startup-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  // A bus of the app's own (a wrapper around the in-process one, as a stand-in for a shared one).
  const inner = new MemoryBus()
  const customBus: Bus = {
    publish: async (channel, message) => { await inner.publish(channel, message) },
    subscribe: async (channel, listener) => await inner.subscribe(channel, listener),
    close: async () => { await inner.close() }
  }
  for (const opts of [{ sessions: { store: new FileSessionStore({ dir }) } }, { bus: customBus }] as McpPluginOptions[]) {
    const lines = await secretLines(opts)
    t.equal(lines.length, 1)
    t.equal(lines[0].level, 40, 'warn')
  }
})

t.test('with a secret: no line about it', async (t) => {
  t.same(await secretLines({ requestState: { secret: 'a-secret-of-enough-length' } }), [])
})

t.test('redis without a sessions store: a warning that the state stays in this process', async (t) => {
  const server = await startRedisServer(t)
  const warned = async (opts: McpPluginOptions): Promise<boolean> =>
    (await startLines({ requestState: { secret: 'a-secret-of-enough-length' }, ...opts })).some(l => l.level === 40 && l.msg === MEMORY_STATE_WARNING)
  t.ok(await warned({ redis: server.url }), '{ redis } alone: warned')
  const client = new Redis(server.url)
  t.teardown(() => { client.disconnect() })
  t.notOk(await warned({ redis: server.url, sessions: { store: new RedisSessionStore({ redis: client as never }) } }), 'a Redis store: no warning')
  t.notOk(await warned({}), 'no redis: no warning')
})
