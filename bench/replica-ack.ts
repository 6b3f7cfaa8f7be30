/**
 * What replica acknowledgement costs a locked call: `basket_add` on one state handle (the Redis
 * store + lock fast path: two scripts per call), one call at a time and 8 at a time, against a
 * primary with one replica on loopback, without and with `waitReplicas: 1`. Prints median and p99
 * latency and calls per second of each as JSON.
 *
 *   npx tsx bench/replica-ack.ts [--calls 1000]
 *
 * Wall-clock figures: compare the two rows of one run, not runs on different machines.
 */
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'
import { buildDemo } from '../examples/server.js'
import { modernPost, readReply } from '../test/helpers/http-client.js'
import { startSentinelDeployment } from '../test/helpers/redis-sentinel.js'

const { values: args } = parseArgs({ options: { calls: { type: 'string', default: '1000' } } })
const calls = Number(args.calls)
const teardowns: Array<() => unknown> = []
const deployment = await startSentinelDeployment({ teardown: fn => { teardowns.push(fn) } })
await deployment.awaitSettled()

async function measure (label: string, env: Record<string, string>, concurrency: number): Promise<Record<string, unknown>> {
  const app = await buildDemo({
    logger: false,
    env: { MCP_STORE: 'redis', MCP_LOCK: 'redis', MCP_REDIS_SENTINELS: deployment.sentinelList, MCP_REDIS_MASTER: deployment.masterName, MCP_STATE_SECRET: 'bench-replica-ack', ...env }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp`
  const call = async (name: string, a: Record<string, unknown>): Promise<any> => (await readReply(await modernPost(url, 'tools/call', { name, arguments: a }))).last
  const latencies: number[] = []
  let left = 0
  // A basket holds at most 1,000 items: each worker takes a fresh one every 500 calls (calls on
  // one basket queue behind its lock, so each worker has its own).
  // Retried while the fail-fast clients connect (a call before that gets a 503).
  const newBasket = async (): Promise<string> => {
    for (let tries = 0; ; tries++) {
      const basket = (await call('basket_create', {}))?.result?.structuredContent?.basket
      if (typeof basket === 'string') return basket
      if (tries > 50) throw new Error('basket_create keeps failing')
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  }
  const worker = async (): Promise<void> => {
    let basket = await newBasket()
    for (let n = 1; left-- > 0; n++) {
      if (n % 500 === 0) basket = await newBasket()
      const started = performance.now()
      const r = await call('basket_add', { basket, item: `i${n}` })
      if (r?.result?.structuredContent === undefined) throw new Error(`basket_add failed: ${JSON.stringify(r)}`)
      latencies.push(performance.now() - started)
    }
  }
  left = Math.min(200, calls) // warm-up
  await Promise.all(Array.from({ length: concurrency }, worker))
  latencies.length = 0
  left = calls
  const started = performance.now()
  await Promise.all(Array.from({ length: concurrency }, worker))
  const seconds = (performance.now() - started) / 1000
  await app.close()
  latencies.sort((a, b) => a - b)
  const at = (q: number): number => Math.round(latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * q))] * 100) / 100
  return { label, concurrency, calls: latencies.length, medianMs: at(0.5), p99Ms: at(0.99), callsPerSecond: Math.round(latencies.length / seconds) }
}

const rows = []
for (const concurrency of [1, 8]) {
  rows.push(await measure('no waitReplicas', {}, concurrency))
  rows.push(await measure('waitReplicas 1', { MCP_REDIS_WAIT_REPLICAS: '1', MCP_REDIS_WAIT_TIMEOUT_MS: '200' }, concurrency))
}
console.log(JSON.stringify(rows, null, 2))
for (const fn of teardowns.reverse()) await fn()
process.exit(0)
