/**
 * The limiter over Redis, end to end: Redis stopped and restarted (fail open or closed, one log
 * pair per outage), two processes sharing one Redis (the totals hold), and a process killed while
 * it holds concurrency slots (they come back after the lease lifetime, not before).
 */
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { ToolLimitError } from '../../lib/limits/errors.js'
import { ToolLimiter, type LimiterLog } from '../../lib/limits/limiter.js'
import { resolveToolLimits, type ToolLimitsOptions } from '../../lib/limits/policy.js'
import { RedisLimitBackend } from '../../lib/limits/redis-backend.js'
import { startServer } from '../helpers/processes.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { until } from '../helpers/time.js'

const server = await startRedisServer(t)
if (server.external) throw new Error('these tests stop and kill Redis: they need a private redis-server (unset REDIS_URL)')
const admin = new Redis(server.url, { maxRetriesPerRequest: 1 })
admin.on('error', () => {})
t.teardown(() => { admin.disconnect() })
const FIXTURE = fileURLToPath(new URL('./fixtures/limiter-server.ts', import.meta.url))
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`

/** Log lines, by level. */
class Lines implements LimiterLog {
  readonly lines: Array<{ level: 'warn' | 'info', obj: Record<string, unknown>, msg: string }> = []
  warn (obj: object, msg: string): void { this.lines.push({ level: 'warn', obj: obj as Record<string, unknown>, msg }) }
  info (obj: object, msg: string): void { this.lines.push({ level: 'info', obj: obj as Record<string, unknown>, msg }) }
  count (level: 'warn' | 'info'): number { return this.lines.filter(l => l.level === level).length }
}

async function newLimiter (t: Test, limits: ToolLimitsOptions, prefix = newPrefix()): Promise<{ limiter: ToolLimiter, log: Lines }> {
  const backend = new RedisLimitBackend({ redis: server.url, prefix })
  await backend.ready()
  const log = new Lines()
  const limiter = new ToolLimiter({ limits: resolveToolLimits(limits), backend, log, ownsBackend: true })
  t.teardown(() => limiter.close())
  return { limiter, log }
}

t.test('Redis stopped: "open" tools run unchecked, "closed" tools get 503; one warning per outage, one info when back', async t => {
  const { limiter, log } = await newLimiter(t, {
    default: { rate: { calls: 1000, perMs: 60_000 }, concurrency: 10 },
    tools: { billing: { onBackendError: 'closed' } }
  })
  const alice = { principal: { id: 'alice' }, ip: '10.0.0.1' }
  const before = await limiter.acquire({ tool: 'search', ...alice })
  before.release()
  t.equal(log.lines.length, 0, 'nothing logged while Redis answers')

  await server.stop()
  let started = false
  t.teardown(async () => { if (!started) await server.start() })
  for (let i = 0; i < 20; i++) {
    const permit = await limiter.acquire({ tool: 'search', ...alice })
    permit.release()
  }
  t.pass('"open" (the default): 20 calls ran while Redis was down')
  const closed = await limiter.acquire({ tool: 'billing', ...alice }).then(() => null, (e: unknown) => e)
  t.type(closed, ToolLimitError)
  t.match(closed, {
    status: 503,
    code: -32000,
    limit: 'unavailable',
    headers: { 'retry-after': '1' },
    data: { limit: 'unavailable', retryAfterMs: 1000, tool: 'billing' }
  }, '"closed": refused with 503 and Retry-After')
  t.equal(log.count('warn'), 1, 'one warning for the whole outage')
  t.match(log.lines[0], { level: 'warn', obj: { tool: 'search', onBackendError: 'open' } })
  t.ok(log.lines[0]?.obj.err instanceof Error, 'with the cause')
  t.equal(limiter.backendDown, true)

  await server.start()
  started = true
  // Back: the next probe (at most one per second) reaches Redis again.
  await until(async () => {
    const permit = await limiter.acquire({ tool: 'billing', ...alice }).catch(() => null)
    permit?.release()
    return permit !== null && !limiter.backendDown
  }, { timeout: 10_000, every: 100, what: 'Redis to answer again' })
  t.equal(log.count('info'), 1, 'one info line when it answers again')
  t.equal(log.count('warn'), 1)

  // A second outage is reported again.
  await server.stop()
  await limiter.acquire({ tool: 'search', ...alice }).then(p => { p.release() })
  await limiter.acquire({ tool: 'search', ...alice }).then(p => { p.release() })
  t.equal(log.count('warn'), 2, 'a new outage, a new warning')
  await server.start()
  await until(async () => {
    const permit = await limiter.acquire({ tool: 'search', ...alice })
    permit.release()
    return !limiter.backendDown
  }, { timeout: 10_000, every: 100, what: 'Redis to answer again' })
  t.equal(log.count('info'), 2)
})

t.test('two processes on one Redis: 2 × 30 calls against a 20-call limit allow exactly 20', async t => {
  const prefix = newPrefix()
  const env = {
    REDIS_URL: server.url,
    LIMIT_PREFIX: prefix,
    LIMITS: JSON.stringify({ default: { rate: { calls: 20, perMs: 3_600_000 } } }) // no refill during the test
  }
  const [one, two] = await Promise.all([startServer(t, FIXTURE, env), startServer(t, FIXTURE, env)])
  // Both start their 30 checks at the same moment (processes of one machine share the clock),
  // one round trip after the other, so that the two processes' checks interleave in Redis.
  const at = Date.now() + 500
  const burst = async (url: string): Promise<{ allowed: number, refused: Record<string, number> }> => {
    const res = await fetch(url.replace(/\/mcp$/, '/acquire'), {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tool: 'search', principal: 'alice', n: 30, at, sequential: true })
    })
    t.equal(res.status, 200)
    return await res.json() as { allowed: number, refused: Record<string, number> }
  }
  const [a, b] = await Promise.all([burst(one.url), burst(two.url)])
  t.equal(a.allowed + b.allowed, 20, `exactly the limit in total (${a.allowed} + ${b.allowed})`)
  t.comment(`allowed per process: ${a.allowed} and ${b.allowed}`)
  t.equal((a.refused.rate ?? 0) + (b.refused.rate ?? 0), 40, 'the rest refused by the rate limit')
  // Another principal has its own bucket, in either process.
  const other = await fetch(one.url.replace(/\/mcp$/, '/acquire'), {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tool: 'search', principal: 'bob', n: 30 })
  }).then(async r => await r.json() as { allowed: number })
  t.equal(other.allowed, 20)
})

t.test("a killed process's concurrency slots come back after the lease lifetime (and not while it lives)", async t => {
  const prefix = newPrefix()
  const leaseMs = 1500
  const limits: ToolLimitsOptions = { default: { concurrency: 2 }, leaseMs }
  const child = await startServer(t, FIXTURE, { REDIS_URL: server.url, LIMIT_PREFIX: prefix, LIMITS: JSON.stringify(limits) })
  const held = await fetch(child.url.replace(/\/mcp$/, '/acquire'), {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tool: 'render', principal: 'alice', n: 2, hold: true })
  }).then(async r => await r.json() as { allowed: number, held: number })
  t.match(held, { allowed: 2, held: 2 }, 'the child holds both slots')

  const { limiter } = await newLimiter(t, limits, prefix)
  const call = { tool: 'render', principal: { id: 'alice' }, ip: '10.0.0.1' }
  const refused = async (): Promise<boolean> => await limiter.acquire(call).then(p => { p.release(); return false }, (e: unknown) => {
    if (!(e instanceof ToolLimitError)) throw e
    return e.limit === 'concurrency'
  })
  t.equal(await refused(), true, 'full while the child holds them')
  // The child renews its leases: they outlive several lifetimes while it is alive.
  await new Promise(resolve => setTimeout(resolve, 3 * leaseMs))
  t.equal(await refused(), true, 'still full after 3 lease lifetimes: the live holder renews')

  await child.kill()
  const killedAt = performance.now()
  t.equal(await refused(), true, 'killing the holder frees nothing by itself')
  // Both of its slots: their leases were renewed together but expire each on its own (and a probe
  // that got one lets it go asynchronously), so the test waits for the two at once.
  const bothFree = async (): Promise<boolean> => {
    const got = await Promise.allSettled([limiter.acquire(call), limiter.acquire(call)])
    for (const g of got) {
      if (g.status === 'fulfilled') g.value.release()
      else if (!(g.reason instanceof ToolLimitError)) throw g.reason
    }
    return got.every(g => g.status === 'fulfilled')
  }
  await until(bothFree, { timeout: leaseMs + 5000, every: 50, what: 'both slots of the killed process' })
  // Its last renewal was about leaseMs/3 before the kill at most: about 2/3 of a lifetime was left.
  t.comment(`freed ${Math.round(performance.now() - killedAt)} ms after the kill (lease ${leaseMs} ms)`)
  t.pass('both slots are free again')
})
