import assert from 'node:assert/strict'
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { SessionLockError, SessionLockTimeoutError } from '../../lib/locks/errors.js'
import { LOCK_CLIENT_OPTIONS, RedisSessionLock, redisLeaseEngine } from '../../lib/locks/redis-lock.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { lockContract } from '../../lib/testing/contracts/index.js'
import { sleep, until } from '../helpers/time.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => { admin.disconnect() })
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`

/** A lock with its own fail-fast client (built from the URL), connected, closed in teardown. */
async function newLock (t: Pick<Test, 'teardown'>, options: { timeout?: number, ttl?: number, prefix?: string } = {}): Promise<RedisSessionLock> {
  const lock = new RedisSessionLock({ redis: server.url, ...options })
  t.teardown(() => lock.close())
  await lock.ready()
  return lock
}

/** Calls per command since the server started (INFO itself left out). */
async function commandCalls (): Promise<Map<string, number>> {
  const info = await admin.info('commandstats')
  const calls = new Map<string, number>()
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (match[1] !== 'info') calls.set(match[1] as string, Number(match[2]))
  }
  return calls
}

const contractPrefix = newPrefix()
lockContract({
  test: t.test.bind(t),
  name: 'RedisSessionLock',
  make: async ({ timeout, ttl }, t) => await newLock(t, { timeout, ttl, prefix: contractPrefix }),
  leaseTtl: 200,
  idle: async (lock) => {
    assert.equal(lock.size, 0, 'no session held or waited for in this process')
    assert.equal(lock.pending, 0, 'no waiter left')
    assert.equal(lock.held, 0, 'no lease tracked')
    assert.deepEqual(await admin.keys(`${contractPrefix}*`), [], 'no lock key left in Redis')
  },
  sharedBackend: true
})

t.test('the lease: SET <prefix>{<sid>}:lock <fresh 128-bit token> NX PX <ttl>', async t => {
  const lock = await newLock(t, { ttl: 10_000 })
  t.equal(lock.prefix, 'mcp:', 'default prefix')
  const id = generateSessionId()
  const key = `mcp:{${id}}:lock`
  const first = await lock.acquire(id)
  t.same(first.fence?.key, key)
  t.match(first.fence?.token, /^[0-9a-f]{32}$/)
  t.equal(await admin.get(key), first.fence?.token)
  const pttl = await admin.pttl(key)
  t.ok(pttl > 0 && pttl <= 10_000, `expires (${pttl} ms)`)
  await first.release()
  t.equal(await admin.exists(key), 0, 'released: deleted')
  const second = await lock.acquire(id)
  t.not(second.fence?.token, first.fence?.token, 'a fresh token per acquisition')
  await second.release()

  const custom = await newLock(t, { prefix: 'app:' })
  const lease = await custom.acquire(id)
  t.equal(lease.fence?.key, `app:{${id}}:lock`)
  await lease.release()
  t.throws(() => new RedisSessionLock({ redis: admin, prefix: 'a{b}:' }), TypeError)
  t.throws(() => new RedisSessionLock({ redis: admin, ttl: 0 }), RangeError)
})

t.test('tokens stay fresh and 128-bit across refills of the token pool (256 per refill)', async t => {
  const lock = await newLock(t)
  const id = generateSessionId()
  const seen = new Set<string>()
  for (let i = 0; i < 600; i++) {
    const lease = await lock.acquire(id)
    const token = lease.fence?.token as string
    if (!/^[0-9a-f]{32}$/.test(token) || seen.has(token)) t.fail(`token ${i}: ${token}`)
    seen.add(token)
    await lease.release()
  }
  t.equal(seen.size, 600)
})

t.test('releaseWith: a finish that throws before sending rejects, frees the local slot and deletes the lease in Redis', async t => {
  const lock = await newLock(t)
  const id = generateSessionId()
  const lease = await lock.acquire(id)
  await t.rejects(redisLeaseEngine(lock).releaseWith(lease, () => { throw new TypeError('a key the script refuses') }), TypeError)
  t.equal(lock.held, 0, 'no lease tracked')
  await until(async () => await admin.exists(`mcp:{${id}}:lock`) === 0)
  const next = await lock.acquire(id, { timeout: 1000 })
  t.pass('the next request of this process gets the lease at once')
  await next.release()
})

t.test('renewal keeps a lease alive past its ttl while it is held', async t => {
  // Renewal runs every ttl/3: the ttl leaves room for timer delays on a loaded 2-core machine.
  const lock = await newLock(t, { ttl: 900 })
  const id = generateSessionId()
  const lease = await lock.acquire(id)
  await sleep(3000)
  t.equal(lease.signal.aborted, false)
  t.equal(await admin.get(lease.fence?.key as string), lease.fence?.token, 'still ours after 3+ ttls')
  await lease.release()
  await sleep(200)
  t.equal(await admin.exists(lease.fence?.key as string), 0, 'no renewal after release')
})

t.test('a lost lease aborts the signal; renewal never re-creates it; release never frees the next holder', async t => {
  const lock = await newLock(t, { ttl: 300 })
  const id = generateSessionId()
  const lease = await lock.acquire(id)
  const key = lease.fence?.key as string
  await admin.del(key) // the lease ran out (or was taken over) while the holder kept working
  const aborted = new Promise(resolve => lease.signal.addEventListener('abort', resolve, { once: true }))
  await Promise.race([aborted, sleep(1000)])
  t.equal(lease.signal.aborted, true, 'aborted at the next renewal')
  t.match(lease.signal.reason, { name: 'SessionLockError', code: 'MCP_SESSION_LEASE_LOST' })
  await sleep(150)
  t.equal(await admin.exists(key), 0, 'not re-created')
  await admin.set(key, 'next-holder', 'PX', 5000)
  await lease.release()
  t.equal(await admin.get(key), 'next-holder', "compare-and-delete: the next holder's lease survives")
  await admin.del(key)
  t.equal(lock.size, 0)
})

t.test('a waiting instance polls at least every 50 ms, however long it has waited (capped backoff)', async t => {
  const prefix = newPrefix()
  const [one, two] = [await newLock(t, { prefix }), await newLock(t, { prefix })]
  const id = generateSessionId()
  const held = await one.acquire(id)
  // What the waiter asks for is counted, not how long it took: a loaded machine fires timers late.
  // Every jitter draws its largest value, so each poll's delay is the backoff's ceiling at that attempt.
  const { random } = Math
  const realSetTimeout = globalThis.setTimeout
  const asked: number[] = []
  Math.random = () => 0.999
  globalThis.setTimeout = ((fn: () => void, ms?: number) => {
    asked.push(ms ?? 0)
    return realSetTimeout(fn, ms)
  }) as typeof setTimeout
  const restore = (): void => { Math.random = random; globalThis.setTimeout = realSetTimeout }
  t.teardown(restore)
  const waiting = two.acquire(id, { timeout: 60_000 })
  await new Promise(resolve => realSetTimeout(resolve, 600))
  restore()
  await held.release()
  await (await waiting).release()
  // The client's command timeout arms a timer per command (each poll's SET); the rest are the polls.
  const polls = asked.filter(ms => ms !== LOCK_CLIENT_OPTIONS.commandTimeout)
  t.ok(polls.length >= 8, `polled ${polls.length} times while the lease was held`)
  t.same(polls.slice(0, 4).map(Math.round), [5, 10, 20, 40], 'the delay doubles from 5 ms')
  t.ok(polls.every(ms => ms <= 50), `no delay above 50 ms: ${polls.map(Math.round).join(', ')}`)
})

t.test('only one request per process contends in Redis (in-process FIFO in front)', async t => {
  const prefix = newPrefix()
  const [one, two] = [await newLock(t, { prefix }), await newLock(t, { prefix })]
  const id = generateSessionId()
  const held = await one.acquire(id)
  const before = (await commandCalls()).get('set') ?? 0
  let granted = 0
  const waiters = Array.from({ length: 10 }, async () => {
    const lease = await two.acquire(id, { timeout: 5000 })
    granted++
    await lease.release()
  })
  await sleep(300)
  const polls = ((await commandCalls()).get('set') ?? 0) - before
  t.ok(polls > 0 && polls < 40, `${polls} SET NX polls for 10 waiters over 300 ms (one contender)`)
  await held.release()
  await Promise.all(waiters)
  t.equal(granted, 10)
  t.equal(two.size, 0)
  t.same(await admin.keys(`${prefix}*`), [])
})

t.test('an injected client is never closed; a client the lock created is', async t => {
  const injected = new Redis(server.url, { ...LOCK_CLIENT_OPTIONS })
  t.teardown(() => { injected.disconnect() })
  const withInjected = new RedisSessionLock({ redis: injected })
  await withInjected.ready()
  t.equal(withInjected.client, injected)
  const lease = await withInjected.acquire(generateSessionId())
  await withInjected.close()
  t.equal(lease.signal.aborted, true)
  t.equal(await admin.exists(lease.fence?.key as string), 0, 'held leases are released by close()')
  t.equal(injected.status, 'ready', 'injected client left open')

  const owning = new RedisSessionLock({ redis: server.url })
  await owning.ready()
  const options = owning.client.options as typeof LOCK_CLIENT_OPTIONS
  t.equal(options.enableOfflineQueue, false, 'its own client fails fast: no offline queue')
  t.equal(options.maxRetriesPerRequest, 0, 'no retries per command')
  t.equal(options.commandTimeout, 500, 'command timeout')
  await owning.close()
  t.equal(owning.client.status, 'end', 'own client closed')
  await owning.close()
})

// ---- fault injection: these stop, pause and restart the private server ------------------------

t.test('a hung Redis (SIGSTOP) makes acquire fail with SessionLockError within the command timeout', async t => {
  const lock = await newLock(t)
  server.pause()
  t.teardown(() => { try { server.resume() } catch {} })
  const started = performance.now()
  const err = await lock.acquire(generateSessionId(), { timeout: 30_000 }).then(() => null, (e: unknown) => e)
  const elapsed = performance.now() - started
  server.resume()
  t.type(err, SessionLockError)
  t.notOk(err instanceof SessionLockTimeoutError, 'a backend failure, not "busy"')
  t.ok(elapsed < 1500, `failed after ${Math.round(elapsed)} ms, not after the 30 s timeout`)
  t.equal(lock.size, 0)
})

t.test('the next waiter of this process sends its acquire right behind the release, not after its reply', async t => {
  const lock = await newLock(t)
  const id = generateSessionId()
  const first = await lock.acquire(id)
  const setsBefore = (await commandCalls()).get('set') ?? 0
  const next = lock.acquire(id, { timeout: 5000 })
  // Commands sent and not yet answered: with the server paused, nothing is answered.
  const unanswered = (): number => (lock.client as unknown as { commandQueue: { length: number } }).commandQueue.length
  server.pause()
  t.teardown(() => { try { server.resume() } catch {} })
  const released = first.release()
  await sleep(20)
  t.equal(unanswered(), 2, 'the release and the next acquire are both on the wire (one round trip per handoff)')
  server.resume()
  await released
  const lease = await next
  t.equal(((await commandCalls()).get('set') ?? 0) - setsBefore, 1, 'Redis ran the release first: the acquire took the lease at its first try')
  await lease.release()
  t.equal(lock.size, 0)
})

t.test('a free lock sends its acquire within the call (no wait for a slot nobody holds); an aborted signal still sends nothing', async t => {
  const lock = await newLock(t)
  const unanswered = (): number => (lock.client as unknown as { commandQueue: { length: number } }).commandQueue.length
  const pending = lock.acquire(generateSessionId())
  t.equal(unanswered(), 1, 'the SET is on the wire before acquire() returns')
  await (await pending).release()
  const gone = new AbortController()
  gone.abort(new Error('gone'))
  const refused = lock.acquire(generateSessionId(), { signal: gone.signal })
  t.equal(unanswered(), 0, 'nothing sent for an aborted acquire')
  await t.rejects(refused, { message: 'gone' })
  t.equal(lock.size, 0)
})

t.test('renewal errors are retried until the local deadline, then the signal aborts', async t => {
  const lock = await newLock(t, { ttl: 300 })
  const lease = await lock.acquire(generateSessionId())
  server.pause()
  t.teardown(() => { try { server.resume() } catch {} })
  const paused = performance.now()
  const aborted = new Promise(resolve => lease.signal.addEventListener('abort', resolve, { once: true }))
  await Promise.race([aborted, sleep(2000)])
  const elapsed = performance.now() - paused
  server.resume()
  t.equal(lease.signal.aborted, true)
  t.ok(elapsed <= 450, `aborted ${Math.round(elapsed)} ms after Redis hung (ttl 300 ms)`)
  t.match(lease.signal.reason, { code: 'MCP_SESSION_LEASE_LOST' })
  await lease.release().catch(() => {})
})

t.test('Redis down: acquire rejects with SessionLockError at once; works again after a restart', async t => {
  const lock = await newLock(t)
  const id = generateSessionId()
  await server.stop()
  await sleep(50)
  for (const attempt of [() => lock.acquire(id, { timeout: 30_000 }), () => lock.tryAcquire(id)]) {
    const started = performance.now()
    const err = await attempt().then(() => null, (e: unknown) => e)
    const elapsed = performance.now() - started
    t.type(err, SessionLockError)
    t.notOk(err instanceof SessionLockTimeoutError)
    t.ok((err as Error).cause instanceof Error, 'cause kept')
    t.match((err as Error).message, /Failed to acquire the lock of session/)
    // Without the offline queue it fails at once; with it, only after the 500 ms command timeout.
    t.ok(elapsed < LOCK_CLIENT_OPTIONS.commandTimeout * 0.8, `rejected in ${elapsed.toFixed(1)} ms`)
  }
  t.equal(lock.size, 0, 'the in-process slot was given back')

  await server.start()
  await lock.ready(5000)
  const lease = await lock.acquire(id, { timeout: 1000 })
  t.pass('recovered after the restart')
  await lease.release()
  t.equal(await admin.exists(lease.fence?.key as string), 0)
})
