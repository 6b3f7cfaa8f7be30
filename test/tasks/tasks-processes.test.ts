/**
 * Tasks across spawned demo processes sharing one private redis-server (Redis store, Redis lock
 * with a 1 s lease, the Redis bus): created on A, polled on B, its input request answered on C,
 * cancelled on B while it runs on A; the same through a round-robin proxy; a runner SIGKILLed →
 * `failed` once its lease expired; a runner SIGSTOPped past its lease cannot undo that when it
 * wakes; progress shows as `statusMessage`; results expire; another principal can neither read nor
 * cancel.
 */
import t from 'tap'
import { shownId } from '../../lib/util/shown-id.js'
import { Redis } from 'ioredis'
import { startRedisServer } from '../helpers/redis-server.js'
import { modernSend, readReply } from '../helpers/http-client.js'
import { until } from '../helpers/time.js'
import { rpc } from '../helpers/wire.js'
import { startProxy } from '../many/fixtures/proxy.js'
import { startCluster } from '../concurrency/fixtures/cluster.js'

t.setTimeout(120_000)

const EXT = 'io.modelcontextprotocol/tasks'
const CAPS = { elicitation: {}, extensions: { [EXT]: {} } }
const TASK_TTL = 2000
const LEASE_TTL = 1000

const redisServer = await startRedisServer(t)
const redis = new Redis(redisServer.url)
t.teardown(async () => { await redis.quit().catch(() => redis.disconnect()) })

const env = {
  MCP_STORE: 'redis',
  MCP_LOCK: 'redis',
  REDIS_URL: redisServer.url,
  MCP_LOCK_TTL_MS: String(LEASE_TTL),
  MCP_STATE_SECRET: 'tasks-processes-secret',
  MCP_DEMO_TOKENS: 'alice-token:alice,bob-token:bob',
  MCP_TASK_TTL_MS: String(TASK_TTL)
}
const [A, B, C, D, E] = await startCluster(t, 5, env)
const ALICE = 'alice-token'
const BOB = 'bob-token'

/** One request on `url` as `token`: its result, or its error (`{ error }`). */
async function ask (url: string, token: string, method: string, params: Record<string, unknown>): Promise<Record<string, any>> {
  const res = await modernSend(url, rpc(method, params, { caps: CAPS }), { headers: { authorization: `Bearer ${token}` } })
  const reply = await readReply(res)
  const last = reply.last
  if (last === undefined) throw new Error(`no answer (${reply.status}): ${reply.text}`)
  return last.error !== undefined ? { error: last.error } : last.result
}

async function createOn (url: string, args: Record<string, unknown>, token = ALICE): Promise<string> {
  const r = await ask(url, token, 'tools/call', { name: 'long_job', arguments: args })
  if (r.resultType !== 'task') throw new Error(`no task: ${JSON.stringify(r)}`)
  return r.taskId
}

async function statusOn (url: string, taskId: string, want: string, timeout = 10_000): Promise<Record<string, any>> {
  let last: Record<string, any> = {}
  await until(async () => { last = await ask(url, ALICE, 'tasks/get', { taskId }); return last.status === want }, { timeout, what: `status ${want} (last: ${JSON.stringify(last).slice(0, 200)})` })
  return last
}

const lockKey = (taskId: string): string => `mcp:{~task~${taskId}}:lock`

t.test('created on A, polled on B, its question answered on C: completed with the answer', async t => {
  const taskId = await createOn(A!.url, { seconds: 2, ask: true })
  let seen: Record<string, any> = {}
  await until(async () => { seen = await ask(B!.url, ALICE, 'tasks/get', { taskId }); return typeof seen.statusMessage === 'string' }, { what: 'a statusMessage' })
  t.match(seen.statusMessage, /^second \d of 2$/, 'progress shows as statusMessage, on B')
  const waiting = await statusOn(B!.url, taskId, 'input_required')
  t.equal(waiting.inputRequests.confirm.method, 'elicitation/create', 'the question, seen on B')
  t.match(await ask(C!.url, ALICE, 'tasks/update', { taskId, inputResponses: { confirm: { action: 'accept', content: { confirm: true } } } }), { resultType: 'complete' }, 'answered on C')
  const done = await statusOn(B!.url, taskId, 'completed')
  t.same(done.result.content, [{ type: 'text', text: 'long_job done after 2 s' }])
  // The end and the release are one script: when B reads the end, the key is free.
  t.equal(await redis.exists(lockKey(taskId)), 0, 'the runner let go of its lease')
})

t.test('cancelled on B while it runs on A: cancelled at once, the runner on A stops and lets go of its lease', async t => {
  const taskId = await createOn(A!.url, { seconds: 60 })
  await statusOn(B!.url, taskId, 'working')
  t.equal(await redis.exists(lockKey(taskId)), 1, 'A holds the task lease')
  t.match(await ask(B!.url, ALICE, 'tasks/cancel', { taskId }), { resultType: 'complete' })
  t.equal((await ask(C!.url, ALICE, 'tasks/get', { taskId })).status, 'cancelled', 'cancelled, seen on C')
  // The handler sleeps 60 s unless its ctx.signal aborts: the lease goes only when it stopped.
  await until(async () => await redis.exists(lockKey(taskId)) === 0, { timeout: 5000, what: 'A to stop the handler and release the lease' })
  t.equal((await ask(B!.url, ALICE, 'tasks/get', { taskId })).status, 'cancelled', 'still cancelled after the runner ended')
})

t.test('through a round-robin proxy: every request may land anywhere', async t => {
  const proxy = await startProxy(t, [A!.url, B!.url, C!.url])
  const taskId = await createOn(proxy.url, { seconds: 2, ask: true })
  await statusOn(proxy.url, taskId, 'input_required')
  await ask(proxy.url, ALICE, 'tasks/update', { taskId, inputResponses: { confirm: { action: 'accept', content: { confirm: false } } } })
  const done = await statusOn(proxy.url, taskId, 'completed')
  t.same(done.result.content, [{ type: 'text', text: 'long_job stopped at second 1, as asked' }])
})

t.test('another principal can neither read, answer nor cancel', async t => {
  const taskId = await createOn(A!.url, { seconds: 60 })
  for (const [url, method] of [[B!.url, 'tasks/get'], [C!.url, 'tasks/update'], [B!.url, 'tasks/cancel']] as const) {
    t.match(await ask(url, BOB, method, { taskId, inputResponses: {} }), { error: { code: -32602, message: 'Invalid params: task not found' } }, `bob: ${method}`)
  }
  t.equal((await ask(C!.url, ALICE, 'tasks/get', { taskId })).status, 'working', 'bob changed nothing')
  await ask(C!.url, ALICE, 'tasks/cancel', { taskId })
})

t.test('results expire after ttlMs', async t => {
  const taskId = await createOn(A!.url, { seconds: 0 })
  const done = await statusOn(B!.url, taskId, 'completed')
  t.equal(done.ttlMs, TASK_TTL)
  const finished = Date.now()
  await until(async () => (await ask(C!.url, ALICE, 'tasks/get', { taskId })).error?.code === -32602, { timeout: 10_000, what: 'the task to expire' })
  t.ok(Date.now() - finished >= TASK_TTL - 500, `gone after about ${TASK_TTL} ms`)
})

t.test('the runner SIGKILLed: the task turns failed once its lease expired, never working forever', async t => {
  const taskId = await createOn(D!.url, { seconds: 60 })
  await statusOn(B!.url, taskId, 'working')
  // Renewed at least once: D is inside the handler with a live lease.
  let ttl = await redis.pttl(lockKey(taskId))
  await until(async () => { const now = await redis.pttl(lockKey(taskId)); const renewed = now > ttl + 50; ttl = now; return renewed }, { timeout: 3000, what: 'the lease to be renewed' })
  await D!.kill()
  const early = await ask(B!.url, ALICE, 'tasks/get', { taskId })
  // A lease still there after that read was there during it: the task was not failed early.
  if (await redis.exists(lockKey(taskId)) === 1) t.equal(early.status, 'working', 'still working while the lease lives')
  const failed = await statusOn(C!.url, taskId, 'failed', 10_000)
  t.match(failed.error, { code: -32603, message: /stopped before the task ended/ })
  t.notOk('result' in failed)
  t.equal((await ask(A!.url, ALICE, 'tasks/get', { taskId })).status, 'failed', 'failed on every instance')
})

/** Resolves once the task's lease was renewed: its runner is inside the handler with a live lease. */
async function leaseRenewed (taskId: string): Promise<void> {
  let ttl = await redis.pttl(lockKey(taskId))
  await until(async () => { const now = await redis.pttl(lockKey(taskId)); const renewed = now > ttl + 50; ttl = now; return renewed }, { timeout: 3000, what: 'the lease to be renewed' })
}

t.test('the runner SIGSTOPped past its lease: failed elsewhere; when it wakes it stops and cannot undo that', async t => {
  const taskId = await createOn(E!.url, { seconds: 60 })
  await statusOn(B!.url, taskId, 'working')
  await leaseRenewed(taskId)
  E!.signal('SIGSTOP')
  let failed: Record<string, any>
  try {
    failed = await statusOn(C!.url, taskId, 'failed', 10_000)
  } finally {
    E!.signal('SIGCONT')
  }
  t.match(failed.error, { message: /stopped before the task ended/ })
  await until(() => E!.logs.some(l => l.task === shownId(taskId) && /task runner stops/.test(String(l.msg))), { timeout: 10_000, what: 'E to notice its lease is lost' })
  t.notOk(E!.logs.some(l => JSON.stringify(l).includes(taskId)), 'no log line carries the whole task id (a credential)')
  // E's runner has stopped (its handler aborted, its end not written): the verdict stands.
  await until(async () => await redis.exists(lockKey(taskId)) === 0, { timeout: 5000, what: 'no lease on the task' })
  const after = await ask(E!.url, ALICE, 'tasks/get', { taskId })
  t.equal(after.status, 'failed')
  t.same(after.error, failed.error, 'the error is the one the other instance wrote')
})
