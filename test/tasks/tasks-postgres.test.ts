/**
 * Tasks across spawned demo processes on one PostgreSQL database (PostgreSQL store, lock with a
 * 1 s lease, bus, event log): created on A, polled on B, its input request answered on C;
 * cancelled on B while it runs on A; a runner SIGKILLed → `failed` once its lease row expired.
 */
import t from 'tap'
import { modernSend, readReply } from '../helpers/http-client.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { until } from '../helpers/time.js'
import { rpc } from '../helpers/wire.js'
import { startCluster } from '../concurrency/fixtures/cluster.js'

t.setTimeout(120_000)

const EXT = 'io.modelcontextprotocol/tasks'
const CAPS = { elicitation: {}, extensions: { [EXT]: {} } }
const db = await createTestDatabase(t)
const [A, B, C, D] = await startCluster(t, 4, {
  MCP_STORE: 'postgres',
  MCP_LOCK: 'postgres',
  DATABASE_URL: db.url,
  MCP_LOCK_TTL_MS: '1000',
  MCP_STATE_SECRET: 'tasks-postgres-secret',
  MCP_DEMO_TOKENS: 'alice-token:alice',
  MCP_TASK_TTL_MS: '5000'
})

async function ask (url: string, method: string, params: Record<string, unknown>): Promise<Record<string, any>> {
  const res = await modernSend(url, rpc(method, params, { caps: CAPS }), { headers: { authorization: 'Bearer alice-token' } })
  const last = (await readReply(res)).last
  if (last === undefined) throw new Error(`no answer (${res.status})`)
  return last.error !== undefined ? { error: last.error } : last.result
}

async function createOn (url: string, args: Record<string, unknown>): Promise<string> {
  const r = await ask(url, 'tools/call', { name: 'long_job', arguments: args })
  if (r.resultType !== 'task') throw new Error(`no task: ${JSON.stringify(r)}`)
  return r.taskId
}

async function statusOn (url: string, taskId: string, want: string, timeout = 10_000): Promise<Record<string, any>> {
  let last: Record<string, any> = {}
  await until(async () => { last = await ask(url, 'tasks/get', { taskId }); return last.status === want }, { timeout, what: `status ${want} (last: ${JSON.stringify(last).slice(0, 200)})` })
  return last
}

const leaseHeld = async (taskId: string): Promise<boolean> =>
  (await db.admin.query('SELECT 1 FROM mcp_leases WHERE id = $1 AND expires_at > clock_timestamp()', [`~task~${taskId}`])).rows.length === 1

t.test('created on A, polled on B, its question answered on C: completed with the answer', async t => {
  const taskId = await createOn(A!.url, { seconds: 2, ask: true })
  const waiting = await statusOn(B!.url, taskId, 'input_required')
  t.equal(waiting.inputRequests.confirm.method, 'elicitation/create', 'the question, seen on B')
  t.match(await ask(C!.url, 'tasks/update', { taskId, inputResponses: { confirm: { action: 'accept', content: { confirm: true } } } }), { resultType: 'complete' }, 'answered on C')
  const done = await statusOn(B!.url, taskId, 'completed')
  t.same(done.result.content, [{ type: 'text', text: 'long_job done after 2 s' }])
  t.equal(await leaseHeld(taskId), false, 'the runner let go of its lease')
})

t.test('cancelled on B while it runs on A: cancelled at once, the runner stops and lets go of its lease', async t => {
  const taskId = await createOn(A!.url, { seconds: 60 })
  await statusOn(B!.url, taskId, 'working')
  t.equal(await leaseHeld(taskId), true, 'A holds the task lease')
  t.match(await ask(B!.url, 'tasks/cancel', { taskId }), { resultType: 'complete' })
  t.equal((await ask(C!.url, 'tasks/get', { taskId })).status, 'cancelled', 'cancelled, seen on C')
  await until(async () => !await leaseHeld(taskId), { timeout: 5000, what: 'A to stop the handler and release the lease' })
})

t.test('the runner SIGKILLed: the task turns failed once its lease row expired', async t => {
  const taskId = await createOn(D!.url, { seconds: 60 })
  await statusOn(B!.url, taskId, 'working')
  await D!.kill()
  const failed = await statusOn(C!.url, taskId, 'failed', 10_000)
  t.match(failed.error, { code: -32603, message: /stopped before the task ended/ })
  t.equal((await ask(A!.url, 'tasks/get', { taskId })).status, 'failed', 'failed on every instance')
})
