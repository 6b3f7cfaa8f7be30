/**
 * The session lock across spawned demo processes that share a store (one private redis-server,
 * one temp directory):
 *
 * - lost updates: 50 parallel `counter_add {delayMs: 20}` on ONE session, round-robin through two
 *   processes. Redis store + Redis lock and file store + file lock (same directory) end at 50;
 *   with no lock (Redis store) the test sees increments lost, so it can tell the difference;
 * - a busy session answers 503 after the lock timeout, even when the holder is another process;
 * - a holder SIGKILLed mid-handler leaves its lease behind, which expires after the TTL: the
 *   session then works through another process;
 * - a holder SIGSTOPped past its TTL cannot overwrite the newer state when it wakes: it is told its
 *   lease is lost (or its save is fenced), it answers 503, and the final counter is exactly the
 *   other process's write.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { FileSessionLock, FileSessionStore } from '../../lib/index.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { startCluster, type DemoProcess } from './fixtures/cluster.js'
import { callTool, counterOf, initialize, type Reply } from '../helpers/http-client.js'
import { sleep, until } from '../helpers/time.js'
import type { Session } from '../helpers/wire.js'

// Starting eight processes on a busy machine can take a while; the tests themselves take ~10 s.
t.setTimeout(120_000)

const redisServer = await startRedisServer(t)
const redis = new Redis(redisServer.url)
t.teardown(async () => { await redis.quit().catch(() => redis.disconnect()) })
const dir = await mkdtemp(join(tmpdir(), 'mcp-processes-'))
t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })

const base = { MCP_STORE: 'redis', MCP_LOCK: 'redis', REDIS_URL: redisServer.url }
// All started together (starting is the slow part):
// - fast: lease TTL 1 s, lock timeout 200 ms (busy sessions are refused fast; the SIGKILL test);
// - patient: lease TTL 600 ms, lock timeout 20 s (lost updates; the SIGSTOP test, where a waiter
//   outlasts a lost lease);
// - file: file store + file lock on one directory; unlocked: Redis store, MCP_LOCK=none.
const startedAt = performance.now()
const [fast, patient, file, unlocked] = await Promise.all([
  startCluster(t, 2, { ...base, MCP_LOCK_TTL_MS: '1000', MCP_LOCK_TIMEOUT_MS: '200' }),
  startCluster(t, 2, { ...base, MCP_LOCK_TTL_MS: '600', MCP_LOCK_TIMEOUT_MS: '20000' }),
  startCluster(t, 2, { MCP_STORE: 'file', MCP_LOCK: 'file', MCP_SESSION_DIR: dir, MCP_LOCK_TIMEOUT_MS: '20000' }),
  startCluster(t, 2, { MCP_STORE: 'redis', MCP_LOCK: 'none', REDIS_URL: redisServer.url })
])
t.comment(`8 demo processes started in ${Math.round(performance.now() - startedAt)} ms`)
const [p1, p2] = fast as [DemoProcess, DemoProcess]
const [p3, p4] = patient as [DemoProcess, DemoProcess]

const BUSY = 'Another request of this session is still being processed.'
const lockKey = (sid: string): string => `mcp:{${sid}}:lock`
const counterIn = (r: Reply): unknown => r.last?.result?.structuredContent?.counter

/**
 * Resolves once the session's lease exists and was renewed (its PTTL went up): the holder has the
 * lease in hand (it read the reply of its acquire) and its renewal timer runs.
 */
async function leaseRenewed (sid: string): Promise<void> {
  await until(async () => await redis.exists(lockKey(sid)) === 1, { timeout: 3000, what: 'the lease to be taken' })
  let last = await redis.pttl(lockKey(sid))
  await until(async () => {
    const now = await redis.pttl(lockKey(sid))
    const renewed = now > last + 50
    last = now
    return renewed
  }, { timeout: 3000, what: 'the lease to be renewed' })
}

async function noLockKeys (t: Test): Promise<void> {
  await until(async () => (await redis.keys('mcp:*:lock')).length === 0, { timeout: 2000 }).catch(() => {})
  t.same(await redis.keys('mcp:*:lock'), [], 'no lock key left in Redis')
}

// ─── lost updates ────────────────────────────────────────────────────────────────────────────

const N = 50
const oneToN = Array.from({ length: N }, (_, i) => i + 1)

interface Run {
  session: Session
  /** `structuredContent.counter` of every reply that succeeded. */
  counters: number[]
  failures: string[]
  /** The counter afterwards, as each process reads it. */
  final: number[]
  ms: number
}

/** N parallel increments on one session, round-robin over the cluster. */
async function hammer (cluster: DemoProcess[]): Promise<Run> {
  const session = await initialize(cluster[0].url)
  const started = performance.now()
  const replies = await Promise.all(Array.from({ length: N }, async (_, i) =>
    await callTool(cluster[i % cluster.length].url, session, 'counter_add', { delayMs: 20 })))
  const ms = Math.round(performance.now() - started)
  const counters: number[] = []
  const failures: string[] = []
  for (const r of replies) {
    const counter = counterIn(r)
    if (r.status === 200 && r.last?.result?.isError !== true && typeof counter === 'number') counters.push(counter)
    else failures.push(`${r.status} ${r.text}`)
  }
  const final = await Promise.all(cluster.map(async p => await counterOf(p.url, session)))
  return { session, counters, failures, final, ms }
}

t.test('lost updates: Redis store + Redis lock keep all 50 increments across processes', async t => {
  const run = await hammer(patient)
  t.comment(`${N} increments through ${patient.length} processes in ${run.ms} ms`)
  t.same(run.failures, [], 'every call succeeded')
  t.same([...run.counters].sort((a, b) => a - b), oneToN, 'each call saw the previous one: counters 1..50, each once')
  t.same(run.final, [N, N], 'the counter ends at 50, as every process reads it')
  await noLockKeys(t)
})

t.test('lost updates: file store + file lock (one directory) keep all 50 increments across processes', async t => {
  const run = await hammer(file)
  t.comment(`${N} increments through ${file.length} processes in ${run.ms} ms`)
  t.same(run.failures, [], 'every call succeeded')
  t.same([...run.counters].sort((a, b) => a - b), oneToN, 'counters 1..50, each once')
  t.same(run.final, [N, N], 'the counter ends at 50, as every process reads it')
  const store = new FileSessionStore({ dir })
  t.equal((await store.load(run.session.sid))?.data.counter, N, 'the session file holds 50')
  const probe = new FileSessionLock({ dir, timeout: 0 })
  const lease = await probe.tryAcquire(run.session.sid)
  t.ok(lease !== null, 'nobody holds the session\'s file lock any more')
  await lease?.release()
  await probe.close()
})

t.test('lost updates: without a lock (Redis store) the test sees increments lost', async t => {
  const run = await hammer(unlocked)
  t.comment(`${N} increments without a lock in ${run.ms} ms ended at ${run.final[0]}`)
  t.same(run.failures, [], 'every call "succeeded" (last writer wins, silently)')
  t.ok(run.final[0] < N, `increments were lost: the counter ended at ${run.final[0]} < ${N}`)
  t.ok(new Set(run.counters).size < N, 'several calls read the same value')
  await noLockKeys(t)
})

// ─── one busy session, dead and frozen holders ───────────────────────────────────────────────

t.test('a request of a session busy in another process gets 503 after the lock timeout', async t => {
  const session = await initialize(p1.url)
  const first = callTool(p1.url, session, 'counter_add', { delayMs: 1000 })
  await until(async () => await redis.exists(lockKey(session.sid)) === 1, { timeout: 3000, what: 'the first request to take the lease' })
  const started = performance.now()
  const second = await callTool(p2.url, session, 'counter_add', { by: 5 })
  const waited = performance.now() - started
  t.equal(second.status, 503, 'HTTP 503 from the other process')
  t.same(second.last, { jsonrpc: '2.0', id: second.id, error: { code: -32000, message: BUSY } }, '-32000 under the request\'s id')
  t.ok(waited >= 180 && waited < 900, `after the 200 ms timeout, before the holder finished (${Math.round(waited)} ms)`)
  const r = await first
  t.equal(r.status, 200, 'the holder gets its 200')
  t.equal(counterIn(r), 1)
  t.equal(await counterOf(p2.url, session), 1, 'the session is intact (the refused request changed nothing)')
  t.ok(p2.logs.find(l => l.level === 40 && l.msg === 'session busy: lock wait timed out'), 'the refusing process logged a warning')
  await noLockKeys(t)
})

t.test('a holder SIGKILLed mid-handler: its lease expires after the TTL, then the session works elsewhere', async t => {
  const session = await initialize(p2.url)
  t.equal(counterIn(await callTool(p2.url, session, 'counter_add', { by: 1 })), 1)

  const doomed = callTool(p1.url, session, 'counter_add', { by: 100, delayMs: 10_000 }).then(() => 'answered', () => 'connection lost')
  await leaseRenewed(session.sid) // the holder is well inside its handler, and keeps the lease alive
  await p1.kill()
  const killedAt = performance.now()
  const pttl = await redis.pttl(lockKey(session.sid))
  t.ok(pttl > 0 && pttl <= 1000, `the lease outlives its holder (PTTL ${pttl} ms)`)
  t.equal(await doomed, 'connection lost', 'the holder\'s client lost its connection')

  // Poll through the other process (lock timeout 200 ms) until the lease has expired.
  const statuses: number[] = []
  let done: Reply | undefined
  while (performance.now() - killedAt < 5000) {
    const r = await callTool(p2.url, session, 'counter_add', { by: 1 })
    statuses.push(r.status)
    if (r.status === 200) { done = r; break }
    t.equal(r.last?.error?.message, BUSY, 'refused as busy while the dead holder\'s lease lasts')
  }
  const recovered = performance.now() - killedAt
  t.comment(`statuses ${statuses.join(',')}; recovered ${Math.round(recovered)} ms after the kill`)
  t.ok(done !== undefined, 'the session works again through another process')
  t.ok(statuses[0] === 503, 'right after the kill it was still locked (the lease, not luck, held it)')
  t.ok(recovered < 1000 + 1000, `within about the TTL (${Math.round(recovered)} ms)`)
  t.equal(counterIn(done!), 2, 'the killed handler wrote nothing')
  t.equal(await counterOf(p2.url, session), 2)
  await noLockKeys(t)
})

t.test('a holder SIGSTOPped past its TTL cannot overwrite the newer state when it resumes', async t => {
  const session = await initialize(p4.url)
  let continued = false
  t.teardown(() => { if (!continued) p3.signal('SIGCONT') })

  const a = callTool(p3.url, session, 'counter_add', { by: 100, delayMs: 500 })
  // Stop A only once it renewed the lease (every ttl/3 = 200 ms): then it has the lease in hand
  // and its handler is inside the 500 ms delay (stopped any earlier, A might not have read the
  // reply of its acquire yet, and would fail before running the handler at all).
  await leaseRenewed(session.sid)
  p3.signal('SIGSTOP')
  const stoppedAt = performance.now()
  t.equal(await redis.hget(`mcp:{${session.sid}}:s`, 'counter'), null, 'A is frozen inside its handler, before its save')

  // B waits for A's lease to run out (600 ms), then writes.
  const b = await callTool(p4.url, session, 'counter_add', { by: 1 })
  t.equal(b.status, 200, 'B gets the session once A\'s lease expired')
  t.equal(counterIn(b), 1, 'B did not see anything of A')
  t.comment(`B got through ${Math.round(performance.now() - stoppedAt)} ms after A was stopped (A is continued only now)`)

  await sleep(Math.max(0, 1500 - (performance.now() - stoppedAt)))
  p3.signal('SIGCONT')
  continued = true
  const ra = await a

  const final = await counterOf(p4.url, session)
  t.equal(final, 1, 'the final counter is B\'s write: nothing of A (100) was kept')
  t.equal(await counterOf(p3.url, session), 1, 'A\'s process reads the same')
  t.comment(`A answered ${ra.status} ${ra.text.slice(0, 200)}`)
  t.equal(ra.status, 503, 'A is not told its write of 100 succeeded: 503')
  t.same(ra.last?.error, { code: -32000, message: 'Session lock was lost; the changes of this request were not saved.' }, 'its changes were dropped, and it says so')
  t.equal(ra.last?.id, ra.id, 'under A\'s request id')
  // Which way A learns of the loss is timer order, not something to assert: woken past its lease's
  // deadline, A's process sees it from its lock's renewal clock (armed before A's handler delay
  // ends) and stops A's handler before it writes; a handler that finished first would send its
  // save, which the fence refuses (the handle path, whose handlers are not stopped, asserts that
  // in handles-processes.test.ts). Either way: 503, and the counter is B's (asserted above).
  t.comment(`A's process: ${p3.logs.find(l => l.result === 'fenced') === undefined ? 'handler stopped before the save' : 'save fenced'}`)
  t.ok(p3.logs.find(l => l.level === 40 && (l.result === 'fenced' || l.result === 'lost')), 'A\'s process logged the lost lock (a warning), whichever way it learned of it')
  await noLockKeys(t)
})
