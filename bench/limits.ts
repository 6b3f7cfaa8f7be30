/**
 * Micro-benchmark of one tool limit check (not part of `npm test` or `npm run bench`):
 *   node --expose-gc --import tsx bench/limits.ts
 * Memory backend: µs per check (acquire + release through the ToolLimiter) and heap bytes per
 * (tool, caller) entry. Redis backend (a private redis-server from PATH): µs per check one at a
 * time (a round trip) and with 64 in flight, the server's own µs per script call (INFO
 * commandstats), and Redis memory per caller (INFO memory, MEMORY USAGE).
 */
import { spawn } from 'node:child_process'
import { createServer } from 'node:net'
import { Redis } from 'ioredis'
import { ToolLimiter } from '../lib/limits/limiter.js'
import { MemoryLimitBackend } from '../lib/limits/memory-backend.js'
import { resolveToolLimits } from '../lib/limits/policy.js'
import { RedisLimitBackend, limitKeys } from '../lib/limits/redis-backend.js'

const silent = { warn: () => {}, info: () => {} }
const limits = resolveToolLimits({ default: { rate: { calls: 1_000_000, perMs: 1000 }, concurrency: 1_000_000 } })
const gc = (globalThis as { gc?: () => void }).gc

async function timeChecks (limiter: ToolLimiter, n: number, inFlight: number, callers: number): Promise<number> {
  let next = 0
  const started = process.hrtime.bigint()
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next < n) {
      const i = next++
      const permit = await limiter.acquire({ tool: 'search', principal: { id: `user${i % callers}` }, ip: '10.0.0.1' })
      permit.release()
    }
  }))
  return Number(process.hrtime.bigint() - started) / 1000 / n
}

async function memory (): Promise<void> {
  const backend = new MemoryLimitBackend({ max: 1_000_000, sweepInterval: 0 })
  const limiter = new ToolLimiter({ limits, backend, log: silent })
  await timeChecks(limiter, 200_000, 1, 100) // warm-up
  const rounds = [] as number[]
  for (let r = 0; r < 5; r++) rounds.push(await timeChecks(limiter, 200_000, 1, 100))
  rounds.sort((a, b) => a - b)
  console.log(`memory: ${rounds[2]?.toFixed(2)} µs per check (acquire + release, rate + concurrency; median of 5 × 200k)`)
  const rateOnly = new ToolLimiter({ limits: resolveToolLimits({ default: { rate: { calls: 1_000_000, perMs: 1000 } } }), backend, log: silent })
  await timeChecks(rateOnly, 200_000, 1, 100)
  console.log(`memory: ${(await timeChecks(rateOnly, 200_000, 1, 100)).toFixed(2)} µs per check (rate only)`)
  await backend.close()

  // Heap per entry: 100k distinct anonymous callers, each holding a token and a lease.
  const fresh = new MemoryLimitBackend({ max: 1_000_000, sweepInterval: 0 })
  const spec = { intervalUs: 1_000_000, burst: 10, concurrency: 4, leaseMs: 30_000 }
  gc?.()
  const before = process.memoryUsage().heapUsed
  const n = 100_000
  for (let i = 0; i < n; i++) await fresh.acquire(`search|a:10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, spec, `c${i}`)
  gc?.()
  const after = process.memoryUsage().heapUsed
  console.log(`memory: ${Math.round((after - before) / n)} heap bytes per (tool, caller) entry with a lease${gc === undefined ? ' (no --expose-gc: rough)' : ''}; ${fresh.size} entries`)
  await fresh.close()
}

async function freePort (): Promise<number> {
  return await new Promise((resolve) => {
    const s = createServer()
    s.listen(0, '127.0.0.1', () => { const a = s.address() as { port: number }; s.close(() => resolve(a.port)) })
  })
}

async function redis (): Promise<void> {
  const port = await freePort()
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  try {
    const url = `redis://127.0.0.1:${port}`
    const admin = new Redis(url, { retryStrategy: () => 50 })
    admin.on('error', () => {}) // until the server listens
    await admin.ping()
    const backend = new RedisLimitBackend({ redis: url, prefix: 'bench:' })
    await backend.ready()
    const limiter = new ToolLimiter({ limits, backend, log: silent })
    await timeChecks(limiter, 5000, 1, 100)
    await admin.config('RESETSTAT')
    const one = await timeChecks(limiter, 10_000, 1, 100)
    const stats = await admin.info('commandstats')
    const evalsha = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats)
    const zrem = /cmdstat_zrem:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats)
    console.log(`redis: ${one.toFixed(1)} µs per check one at a time (script round trip + ZREM; client and server on this machine)`)
    // The same machine's cost of the cheapest script, for scale.
    await admin.config('RESETSTAT')
    const trivial = await admin.script('LOAD', 'return 1') as string
    for (let i = 0; i < 2000; i++) await admin.evalsha(trivial, 0)
    const baseline = /cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(await admin.info('commandstats'))
    console.log(`redis: server time ${evalsha?.[3]} µs per check script, ${zrem?.[3]} µs per ZREM (INFO commandstats; a script that only returns 1: ${baseline?.[1]} µs)`)
    const many = await timeChecks(limiter, 20_000, 64, 100)
    console.log(`redis: ${many.toFixed(1)} µs per check with 64 in flight (auto-pipelined): ${Math.round(1e6 / many)} checks/s`)

    await admin.flushall()
    const memBefore = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1])
    const n = 20_000
    const spec = { intervalUs: 1_000_000, burst: 10, concurrency: 4, leaseMs: 30_000 }
    for (let i = 0; i < n; i += 500) {
      await Promise.all(Array.from({ length: 500 }, async (_, k) => await backend.acquire(`search|a:10.0.${(i + k) >> 8}.${(i + k) & 255}`, spec, `c${i + k}`)))
    }
    const memAfter = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1])
    const { bucket, leases } = limitKeys('bench:', 'search|a:10.0.0.1')
    const [b, c] = [await admin.memory('USAGE', bucket), await admin.memory('USAGE', leases)]
    console.log(`redis: ${Math.round((memAfter - memBefore) / n)} bytes per caller with a token taken and a lease held (used_memory); MEMORY USAGE: bucket ${b} B, lease set ${c} B`)
    await limiter.close()
    await backend.close()
    admin.disconnect()
  } finally {
    proc.kill('SIGKILL')
  }
}

console.log(`Node ${process.version}`)
await memory()
await redis()
