/**
 * The limiter over the memory backend and over fakes: option validation, per-tool policies, who
 * a call counts against, the refusal an HTTP client gets, lease renewal, and backend failures
 * (open/closed, one log pair per outage, at most one probe per second while failing).
 */
import t from 'tap'
import type { LimitBackend, LimitDecision, LimitSpec } from '../../lib/limits/backend.js'
import { ToolLimitError, retryAfterSeconds } from '../../lib/limits/errors.js'
import { ToolLimiter, buildToolLimiter, type LimiterLog } from '../../lib/limits/limiter.js'
import { MemoryLimitBackend } from '../../lib/limits/memory-backend.js'
import { addressKey, limitSubject, resolveToolLimits, toolPolicy, type ToolLimitsOptions } from '../../lib/limits/policy.js'
import { errorReply } from '../../lib/jsonrpc/errors.js'
import { sleep } from '../helpers/time.js'

class Lines implements LimiterLog {
  readonly lines: Array<{ level: string, obj: Record<string, unknown>, msg: string }> = []
  warn (obj: object, msg: string): void { this.lines.push({ level: 'warn', obj: obj as Record<string, unknown>, msg }) }
  info (obj: object, msg: string): void { this.lines.push({ level: 'info', obj: obj as Record<string, unknown>, msg }) }
}

/** A backend that records its calls and fails while `failing`. */
class FakeBackend implements LimitBackend {
  failing = false
  readonly calls: Array<{ op: string, key: string, spec?: LimitSpec, callId: string }> = []
  readonly inner = new MemoryLimitBackend({ sweepInterval: 0 })
  async acquire (key: string, spec: LimitSpec, callId: string): Promise<LimitDecision> {
    this.calls.push({ op: 'acquire', key, spec, callId })
    if (this.failing) throw new Error('backend down')
    return await this.inner.acquire(key, spec, callId)
  }

  async renew (key: string, callId: string, leaseMs: number): Promise<boolean> {
    this.calls.push({ op: 'renew', key, callId })
    if (this.failing) throw new Error('backend down')
    return await this.inner.renew(key, callId, leaseMs)
  }

  async release (key: string, callId: string): Promise<void> {
    this.calls.push({ op: 'release', key, callId })
    if (this.failing) throw new Error('backend down')
    await this.inner.release(key, callId)
  }

  count (op: string): number { return this.calls.filter(c => c.op === op).length }
}

function limiterWith (limits: ToolLimitsOptions, backend: LimitBackend = new MemoryLimitBackend({ sweepInterval: 0 })): { limiter: ToolLimiter, log: Lines } {
  const log = new Lines()
  const limiter = new ToolLimiter({ limits: resolveToolLimits(limits), backend, log, ownsBackend: true })
  t.teardown(() => limiter.close())
  return { limiter, log }
}

const alice = { principal: { id: 'alice' }, ip: '10.0.0.1' }

/** The error a refused acquire rejects with (null when it was allowed). */
async function refusal (acquiring: Promise<{ release: () => void }>): Promise<unknown> {
  return await acquiring.then(p => { p.release(); return null }, (e: unknown) => e)
}

t.test('the limits option: defaults, and every problem named by its path', async t => {
  const r = resolveToolLimits({})
  t.match(r, { default: null, onBackendError: 'open', leaseMs: 30_000, busyRetryMs: 1000, ipv6PrefixLength: 64, backend: undefined })
  t.equal(r.tools.size, 0)
  const bad: Array<[unknown, RegExp]> = [
    [null, /^limits must be an object/],
    [{ rate: {} }, /^limits\.rate is not an option/],
    [{ default: { rate: { calls: 0, perMs: 1000 } } }, /^limits\.default\.rate\.calls must be an integer ≥ 1, got 0$/],
    [{ default: { rate: { calls: 1, perMs: 1.5 } } }, /^limits\.default\.rate\.perMs must be an integer/],
    [{ default: { rate: { calls: 10_000, perMs: 1 } } }, /^limits\.default\.rate allows more than one call per microsecond/],
    [{ default: { rate: { calls: 1, perMs: 1000, burst: 0 } } }, /^limits\.default\.rate\.burst must be/],
    [{ default: { rate: 5 } }, /^limits\.default\.rate must be \{ calls, perMs, burst\? \} or null/],
    [{ default: { concurrency: 0 } }, /^limits\.default\.concurrency must be an integer from 1 to 1000000, got 0$/],
    [{ default: { burst: 3 } }, /^limits\.default\.burst is not a limit/],
    [{ tools: { search: { concurrency: -1 } } }, /^limits\.tools\.search\.concurrency must be/],
    [{ tools: { search: true } }, /^limits\.tools\.search must be \{ rate\?, concurrency\?, onBackendError\? \}/],
    [{ tools: [] }, /^limits\.tools must be an object/],
    [{ onBackendError: 'fail' }, /^limits\.onBackendError must be "open" or "closed"/],
    [{ tools: { x: { onBackendError: 'half' } } }, /^limits\.tools\.x\.onBackendError must be/],
    [{ leaseMs: 10 }, /^limits\.leaseMs must be an integer from 30/],
    [{ busyRetryMs: 0 }, /^limits\.busyRetryMs must be/],
    [{ ipv6PrefixLength: 129 }, /^limits\.ipv6PrefixLength must be an integer from 1 to 128/],
    [{ backend: {} }, /^limits\.backend must implement the LimitBackend contract/]
  ]
  for (const [value, message] of bad) t.throws(() => resolveToolLimits(value), message, JSON.stringify(value))
  // The plugin passes its own `fail` (FST_ERR_MCP_INVALID_OPTION).
  const fail = (name: string, why: string): never => { throw new Error(`option ${name}: ${why}`) }
  t.throws(() => resolveToolLimits({ default: { concurrency: 0 } }, fail), /^option limits\.default\.concurrency: must be/)
})

t.test('a tool\'s policy: default, then the definition\'s own limits, then limits.tools, field by field', async t => {
  const limits = resolveToolLimits({
    default: { rate: { calls: 60, perMs: 60_000 }, concurrency: 4 },
    tools: {
      expensive: { rate: { calls: 5, perMs: 60_000, burst: 1 }, onBackendError: 'closed' },
      free: false,
      uncapped: { concurrency: null },
      ops: { concurrency: 1 }
    },
    leaseMs: 9000
  })
  t.same(toolPolicy(limits, 'search'), {
    rate: { calls: 60, perMs: 60_000, burst: 60 },
    concurrency: 4,
    onBackendError: 'open',
    spec: { intervalUs: 1_000_000, burst: 60, concurrency: 4, leaseMs: 9000 }
  }, 'the default; burst defaults to calls')
  t.match(toolPolicy(limits, 'expensive'), { rate: { calls: 5, burst: 1 }, concurrency: 4, onBackendError: 'closed', spec: { intervalUs: 12_000_000, burst: 1 } })
  t.equal(toolPolicy(limits, 'free'), null, 'false exempts')
  t.match(toolPolicy(limits, 'uncapped'), { concurrency: null, spec: { concurrency: 0 } }, 'null removes an inherited limit')
  t.match(toolPolicy(limits, 'search', { concurrency: 2 }), { concurrency: 2, rate: { calls: 60 } }, "the definition's own limits over the default")
  t.match(toolPolicy(limits, 'ops', { concurrency: 2, rate: null }), { concurrency: 1, rate: null }, 'limits.tools over the definition')
  t.equal(toolPolicy(limits, 'search', false), null, 'a definition may exempt itself')
  t.equal(toolPolicy(resolveToolLimits({}), 'search'), null, 'nothing configured: unlimited')
  t.match(toolPolicy(resolveToolLimits({ default: { rate: { calls: 3, perMs: 1000 } } }), 'x'), { spec: { intervalUs: 333_333 } }, 'whole microseconds')
})

t.test('who a call counts against', async t => {
  t.equal(limitSubject({ id: 'alice' }, '10.0.0.1'), 'p:alice', 'the principal, wherever it calls from')
  t.match(limitSubject({ id: 'x'.repeat(65) }, '10.0.0.1'), /^p#[A-Za-z0-9_-]{43}$/, 'a long id by its SHA-256')
  t.equal(limitSubject(null, '203.0.113.9'), 'a:203.0.113.9')
  t.equal(limitSubject(null, '::ffff:203.0.113.9'), 'a:203.0.113.9', 'IPv4-mapped is IPv4')
  t.equal(addressKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd'), '2001:db8:1:2:0:0:0:0/64', 'IPv6: its /64')
  t.equal(addressKey('2001:db8:1:2::1'), addressKey('2001:db8:1:2:ffff::9'), 'one /64, one subject')
  t.not(addressKey('2001:db8:1:2::1'), addressKey('2001:db8:1:3::1'), 'another /64, another subject')
  t.equal(addressKey('2001:db8:1:2::1', 48), '2001:db8:1:0:0:0:0:0/48')
  t.equal(addressKey('2001:db8::1', 128), '2001:db8:0:0:0:0:0:1/128')
  t.equal(addressKey('::1'), '0:0:0:0:0:0:0:0/64')
  t.equal(addressKey('fe80::1%eth0'), 'fe80:0:0:0:0:0:0:0/64', 'zone id dropped')
  t.equal(addressKey('64:ff9b::192.0.2.33', 128), '64:ff9b:0:0:0:0:c000:221/128', 'a dotted tail')
  t.equal(addressKey('not an address'), 'not an address')
})

t.test('a rate refusal: 429, Retry-After in whole seconds, -32000 with data the client can act on', async t => {
  const { limiter } = limiterWith({ default: { rate: { calls: 2, perMs: 5000 } } })
  ;(await limiter.acquire({ tool: 'search', ...alice })).release()
  ;(await limiter.acquire({ tool: 'search', ...alice })).release()
  const err = await limiter.acquire({ tool: 'search', ...alice }).then(() => null, (e: unknown) => e) as ToolLimitError
  t.type(err, ToolLimitError)
  t.equal(err.status, 429)
  t.equal(err.code, -32000)
  t.equal(err.limit, 'rate')
  t.ok(err.retryAfterMs > 0 && err.retryAfterMs <= 2500, `until the next token (${err.retryAfterMs} ms)`)
  t.same(err.data, { limit: 'rate', retryAfterMs: err.retryAfterMs, tool: 'search' })
  t.same(err.headers, { 'retry-after': String(Math.ceil(err.retryAfterMs / 1000)) })
  t.match(err.message, /^Rate limit of tool "search" exceeded; retry after \d+ ms$/)
  // THE error mapping answers it under the request's id with its status (headers: INTEGRATION.md).
  const reply = errorReply(err, 7, { status: 200, log: { error: () => t.fail('not a server error') } })
  t.match(reply, { status: 429, body: { jsonrpc: '2.0', id: 7, error: { code: -32000, message: err.message, data: err.data } } })
  t.same(reply.body.error, { code: -32000, message: err.message, data: err.data })
  t.equal(retryAfterSeconds(1), '1')
  t.equal(retryAfterSeconds(1000), '1')
  t.equal(retryAfterSeconds(1001), '2')
  t.equal(retryAfterSeconds(0), '1', 'never 0')
  // Others are not affected.
  ;(await limiter.acquire({ tool: 'search', principal: { id: 'bob' }, ip: '10.0.0.1' })).release()
  ;(await limiter.acquire({ tool: 'other', ...alice })).release()
  ;(await limiter.acquire({ tool: 'search', principal: null, ip: '10.0.0.1' })).release()
  t.pass('other principals, tools and anonymous callers have their own buckets')
})

t.test('a concurrency refusal waits busyRetryMs at most; a released permit frees the slot', async t => {
  const { limiter } = limiterWith({ default: { concurrency: 2 }, busyRetryMs: 250 })
  const [a, b] = [await limiter.acquire({ tool: 'render', ...alice }), await limiter.acquire({ tool: 'render', ...alice })]
  t.equal(limiter.held, 2)
  const err = await limiter.acquire({ tool: 'render', ...alice }).then(() => null, (e: unknown) => e) as ToolLimitError
  t.match(err, { status: 429, limit: 'concurrency', retryAfterMs: 250, headers: { 'retry-after': '1' }, data: { limit: 'concurrency', retryAfterMs: 250, tool: 'render' } })
  t.match(err.message, 'Too many calls of tool "render" in progress')
  a.release()
  a.release() // idempotent
  t.equal(limiter.held, 1)
  const c = await limiter.acquire({ tool: 'render', ...alice })
  const anonymous = await limiter.acquire({ tool: 'render', principal: null, ip: '10.9.9.9' })
  b.release()
  c.release()
  anonymous.release()
  t.equal(limiter.held, 0)
})

t.test('unlimited tools never reach the backend', async t => {
  const backend = new FakeBackend()
  const { limiter } = limiterWith({ tools: { limited: { rate: { calls: 5, perMs: 1000 } } } }, backend)
  for (let i = 0; i < 10; i++) (await limiter.acquire({ tool: 'free', ...alice })).release()
  t.equal(backend.calls.length, 0)
  ;(await limiter.acquire({ tool: 'limited', ...alice })).release()
  t.match(backend.calls, [{ op: 'acquire', key: 'limited|p:alice', spec: { intervalUs: 200_000, burst: 5, concurrency: 0 } }])
  t.equal(backend.count('release'), 0, 'no cap: no lease to release')
})

t.test('the definition\'s own limits are honoured (and a changed definition is seen)', async t => {
  const { limiter } = limiterWith({})
  const own = { concurrency: 1 }
  const p = await limiter.acquire({ tool: 'mine', ...alice, limits: own })
  t.match(await refusal(limiter.acquire({ tool: 'mine', ...alice, limits: own })), { limit: 'concurrency' })
  const relaxed = { concurrency: 2 }
  const q = await limiter.acquire({ tool: 'mine', ...alice, limits: relaxed })
  p.release()
  q.release()
})

t.test('held leases are renewed while the call runs, and no more once released', async t => {
  const backend = new FakeBackend()
  // Renewed every 100 ms: the lease survives event-loop stalls of up to 200 ms.
  const { limiter } = limiterWith({ default: { concurrency: 1 }, leaseMs: 300 }, backend)
  const long = await limiter.acquire({ tool: 'slow', ...alice })
  await sleep(1200) // 4 lease lifetimes
  t.match(await refusal(limiter.acquire({ tool: 'slow', ...alice })), { limit: 'concurrency' }, 'the running call keeps its slot')
  t.ok(backend.count('renew') >= 3, `renewed (${backend.count('renew')} times)`)
  long.release()
  const renewals = backend.count('renew')
  await sleep(400)
  t.equal(backend.count('renew'), renewals, 'no renewal once released (the timer stops with the last permit)')
  ;(await limiter.acquire({ tool: 'slow', ...alice })).release()
})

t.test('a lease the backend lost is no longer renewed; the call goes on', async t => {
  const backend = new FakeBackend()
  const { limiter } = limiterWith({ default: { concurrency: 1 }, leaseMs: 60 }, backend)
  const permit = await limiter.acquire({ tool: 'x', ...alice })
  await backend.inner.release('x|p:alice', backend.calls[0]?.callId as string) // lost in the backend
  await sleep(150)
  t.equal(limiter.held, 0, 'dropped at the first renewal that found it gone')
  const renewals = backend.count('renew')
  await sleep(100)
  t.equal(backend.count('renew'), renewals)
  permit.release()
})

t.test('backend failures: open or closed per tool, one warning per outage, at most one probe per second', async t => {
  const backend = new FakeBackend()
  const { limiter, log } = limiterWith({
    default: { rate: { calls: 100, perMs: 1000 }, concurrency: 5 },
    tools: { pay: { onBackendError: 'closed' } },
    busyRetryMs: 2500
  }, backend)
  backend.failing = true
  const permit = await limiter.acquire({ tool: 'search', ...alice })
  permit.release()
  t.equal(backend.count('release'), 0, 'failing open holds no lease')
  for (let i = 0; i < 20; i++) (await limiter.acquire({ tool: 'search', ...alice })).release()
  t.match(await refusal(limiter.acquire({ tool: 'pay', ...alice })), {
    status: 503, limit: 'unavailable', retryAfterMs: 2500, headers: { 'retry-after': '3' }
  })
  t.equal(backend.count('acquire'), 1, 'while failing, calls within a second do not wait for the backend')
  t.equal(log.lines.length, 1)
  t.match(log.lines[0], { level: 'warn', obj: { tool: 'search', onBackendError: 'open' }, msg: /Tool limit backend failed/ })
  await sleep(1050)
  ;(await limiter.acquire({ tool: 'search', ...alice })).release()
  t.equal(backend.count('acquire'), 2, 'one probe after a second')
  t.equal(log.lines.length, 1, 'still the same outage')
  backend.failing = false
  await sleep(1050)
  ;(await limiter.acquire({ tool: 'search', ...alice })).release()
  t.equal(limiter.backendDown, false)
  t.equal(log.lines.length, 2)
  t.match(log.lines[1], { level: 'info', msg: /answers again/ })
  backend.failing = true
  await limiter.acquire({ tool: 'search', ...alice })
  t.equal(log.lines.length, 3, 'the next outage is logged again')
})

t.test('close() releases the leases this process holds and stops renewing', async t => {
  const backend = new FakeBackend()
  const limiter = new ToolLimiter({ limits: resolveToolLimits({ default: { concurrency: 3 }, leaseMs: 60 }), backend, log: new Lines() })
  await limiter.acquire({ tool: 'x', ...alice })
  await limiter.acquire({ tool: 'x', ...alice })
  await limiter.close()
  t.equal(backend.count('release'), 2)
  t.equal(limiter.held, 0)
  const renewals = backend.count('renew')
  await sleep(100)
  t.equal(backend.count('renew'), renewals)
})

t.test('buildToolLimiter: the given backend, else Redis with the plugin\'s client, else memory', async t => {
  const log = new Lines()
  const given = new FakeBackend()
  const a = buildToolLimiter(resolveToolLimits({ backend: given, default: { concurrency: 1 } }), { log })
  await a.acquire({ tool: 'x', ...alice })
  t.equal(given.count('acquire'), 1)
  await a.close()
  const { Redis } = await import('ioredis')
  const client = new Redis({ lazyConnect: true, enableOfflineQueue: false })
  t.teardown(() => { client.disconnect() })
  const b = buildToolLimiter(resolveToolLimits({ default: { concurrency: 1 } }), { log, redis: client, prefix: 'app:' })
  // The client is not connected (and has no offline queue): the check goes to Redis and fails open.
  ;(await b.acquire({ tool: 'x', ...alice })).release()
  t.match(log.lines, [{ level: 'warn', obj: { err: { message: /Stream isn't writeable/ } } }], 'the check went to Redis')
  t.equal(typeof (client as unknown as Record<string, unknown>).mcpLimitAcquire, 'function', 'the scripts are defined on the plugin\'s client')
  await b.close()
  t.not(client.status, 'end', 'an injected client is never closed')
  const c = buildToolLimiter(resolveToolLimits({ default: { concurrency: 1 } }), { log })
  await c.acquire({ tool: 'x', ...alice })
  await c.close()
})
