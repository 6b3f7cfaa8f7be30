/**
 * Start-up logging: a random `requestStateSecret` is fine for one process (info), and worth a
 * warning only when the configuration says several processes share sessions (Redis, a file or
 * custom store, a shared lock, bus or event log).
 */
import t from 'tap'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import mcp, { FileSessionStore, MemoryBus, MemorySessionLock, MemorySessionStore, type Bus, type McpPluginOptions } from '../../lib/index.js'

async function secretLines (opts: McpPluginOptions): Promise<Array<{ level: number, msg: string }>> {
  const lines: Array<{ level: number, msg: string }> = []
  const app = Fastify({ logger: { level: 'trace', stream: { write: (l: string) => { lines.push(JSON.parse(l)) } } } })
  await app.register(mcp, opts)
  await app.ready()
  await app.close()
  return lines.filter(l => /requestStateSecret/.test(l.msg))
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
  t.same(await secretLines({ requestStateSecret: 'a-secret-of-enough-length' }), [])
})
