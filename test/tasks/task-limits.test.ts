/**
 * Tasks and the bounds an anonymous or hostile client meets (issue 40): a tool's concurrency limit
 * counts a task until its handler ends, as it counts an inline call; a cancelled task keeps its
 * slot of `tasks.maxPerPrincipal` until its handler returns (issue 47: create + cancel cycles
 * would otherwise run any number of handlers that ignore their signal), and what that handler
 * does afterwards is refused; a task whose client lacks a capability is logged as the inline call is
 * (info, no stack), never at error.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import mcp, { injectClient, type InjectClient, type McpPluginOptions } from '../../lib/index.js'
import { shownId } from '../../lib/util/shown-id.js'
import { until } from '../helpers/time.js'
import { rpc, modernHeaders } from '../helpers/wire.js'

const EXT = 'io.modelcontextprotocol/tasks'
const CAPS = { extensions: { [EXT]: {} } }

interface Gate { open: () => void, started: number, stubborn: () => void, late: string[] }

async function build (t: Test, extra: Partial<McpPluginOptions> = {}, lines?: Array<Record<string, any>>): Promise<{ app: FastifyInstance, gate: Gate }> {
  const app = Fastify({ logger: lines === undefined ? false : { level: 'info', stream: { write: (l: string) => { lines.push(JSON.parse(l)) } } } })
  t.teardown(() => app.close())
  await app.register(mcp, { requestState: { secret: 'task-limits-secret-0123456789' }, tasks: { ttlMs: 5_000, pollIntervalMs: 100 }, ...extra })
  let release!: () => void
  let opened = new Promise<void>(resolve => { release = resolve })
  let letGo!: () => void
  const stubborn = new Promise<void>(resolve => { letGo = resolve })
  const gate: Gate = { open: () => { release(); opened = new Promise<void>(resolve => { release = resolve }) }, started: 0, stubborn: () => { letGo() }, late: [] }
  t.teardown(() => { letGo() })
  app.mcp.tool({ name: 'stubborn', description: 'ignores its signal', taskSupport: 'optional' }, async (_a, ctx) => {
    await stubborn
    await ctx.progress({ progress: 1, message: 'after the cancel' }).catch((err: Error) => { gate.late.push(err.message) })
    gate.late.push('returned')
    return 'a late result'
  })
  app.mcp.tool({ name: 'one_at_a_time', description: 'waits for the test', taskSupport: 'optional', limits: { concurrency: 1 } }, async () => {
    gate.started++
    await opened
    return 'done'
  })
  app.mcp.tool({ name: 'asks', description: 'asks the user', taskSupport: 'optional' }, async (_a, ctx) => {
    const r = await ctx.elicit('name', { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
    return String(r.content?.name)
  })
  await app.ready()
  return { app, gate }
}

function client (app: FastifyInstance): InjectClient {
  return injectClient(app, { protocolVersion: '2026-07-28', capabilities: CAPS })
}

async function callTool (app: FastifyInstance, name: string, remoteAddress?: string): Promise<{ status: number, body: Record<string, any> }> {
  const body = rpc('tools/call', { name, arguments: {} }, { caps: CAPS })
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: body, ...(remoteAddress === undefined ? {} : { remoteAddress }) })
  return { status: res.statusCode, body: res.json() }
}

t.test('a concurrency-1 tool run as tasks: one at a time; the permit is given back when the task ends', async t => {
  const { app, gate } = await build(t)
  const answers: Array<{ status: number, body: Record<string, any> }> = []
  for (let i = 0; i < 5; i++) answers.push(await callTool(app, 'one_at_a_time'))
  t.equal(answers[0].status, 200)
  t.equal(answers[0].body.result.resultType, 'task', 'the first call became a task')
  t.same(answers.slice(1).map(a => a.status), [429, 429, 429, 429], 'the next four are refused while the task runs')
  t.match(answers[1].body, { error: { code: -32000, data: { limit: 'concurrency', tool: 'one_at_a_time' } } })
  await until(() => gate.started === 1, { what: 'the task handler to start' })
  t.equal(gate.started, 1, 'one handler ran')

  gate.open()
  const alice = client(app)
  await until(async () => (await alice.request('tasks/get', { taskId: answers[0].body.result.taskId })).status === 'completed', { what: 'the task to complete' })
  const next = await callTool(app, 'one_at_a_time')
  t.equal(next.status, 200, 'free again once the task ended')
  t.equal(next.body.result.resultType, 'task')
  await until(() => gate.started === 2, { what: 'the second task handler to start' })
  gate.open()
})

t.test('cancelled tasks whose handlers ignore the signal keep their slots until they return: create + cancel cycles run no more than maxPerPrincipal', async t => {
  const { app, gate } = await build(t, { tasks: { ttlMs: 1_000, pollIntervalMs: 100, maxPerPrincipal: 5 } })
  const anon = client(app)
  const ids: string[] = []
  const statuses: number[] = []
  // The attack of issue 47: create, cancel, create again — each cancelled handler runs on.
  for (let i = 0; i < 20; i++) {
    const r = await callTool(app, 'stubborn')
    statuses.push(r.status)
    if (r.status !== 200) continue
    ids.push(r.body.result.taskId)
    await anon.request('tasks/cancel', { taskId: r.body.result.taskId })
  }
  t.same(statuses, [...Array(5).fill(200), ...Array(15).fill(429)], 'five handlers run; every later create is refused (tasks.maxPerPrincipal)')
  t.equal(app.mcp.status().runningTasks, 5, 'five handlers run, no more')
  const refused = await callTool(app, 'stubborn')
  t.equal(refused.status, 429)
  t.match(refused.body, { error: { data: { limit: 'tasks', max: 5 } } })
  for (const taskId of ids) t.equal((await anon.request('tasks/get', { taskId })).status, 'cancelled', 'each task is cancelled for the client')

  // Past the slot's lease (10 s): the runner renews the slot while its handler runs.
  await new Promise(resolve => setTimeout(resolve, 11_000))
  t.equal((await callTool(app, 'stubborn')).status, 429, 'still counted after the slot lease would have run out')
  t.equal(gate.late.length, 0, 'no stubborn handler has returned yet')

  gate.stubborn()
  await until(() => gate.late.filter(x => x === 'returned').length === 5, { what: 'the stubborn handlers to return' })
  await until(async () => (await callTool(app, 'stubborn')).status === 200, { what: 'a slot to be free once a handler returned' })
  await until(async () => await anon.request('tasks/get', { taskId: ids[0] }).then(() => false, (err: { code?: number }) => err.code === -32602),
    { what: 'the cancelled task to expire', timeout: 8_000, every: 200 })
})

t.test('anonymous task slots: an IPv6 client is its /64, as for tool limits and listen streams', async t => {
  const { app, gate } = await build(t, { tasks: { ttlMs: 5_000, pollIntervalMs: 100, maxPerPrincipal: 3 } })
  const statuses: number[] = []
  for (let i = 1; i <= 4; i++) statuses.push((await callTool(app, 'stubborn', `2001:db8:0:1::${i.toString(16)}`)).status)
  t.same(statuses, [200, 200, 200, 429], 'four addresses of one /64 share its three slots')
  const other = await callTool(app, 'stubborn', '2001:db8:0:2::1')
  t.equal(other.status, 200, 'another /64 has its own')
  gate.stubborn()
  await until(() => gate.late.length === 4, { what: 'the tasks to end' })
})

t.test('a task whose client lacks a capability: failed with -32021, logged at info as inline, never at error', async t => {
  const lines: Array<Record<string, any>> = []
  const { app } = await build(t, {}, lines)
  const created = await callTool(app, 'asks')
  t.equal(created.body.result?.resultType, 'task')
  const taskId = created.body.result.taskId as string
  const anon = client(app)
  let last: Record<string, any> = {}
  await until(async () => { last = await anon.request('tasks/get', { taskId }); return last.status === 'failed' }, { what: 'the task to fail' })
  t.match(last.error, { code: -32021, data: { requiredCapabilities: { elicitation: {} } } })
  t.same(lines.filter(l => l.level >= 50).map(l => l.msg), [], 'no error line')
  const refused = lines.filter(l => l.msg === 'task refused: the client lacks a capability')
  t.equal(refused.length, 1, 'one info line')
  t.equal(refused[0]?.level, 30)
  t.notOk('err' in (refused[0] ?? {}), 'no stack')
  t.equal(refused[0]?.task, shownId(taskId), 'the task id cut to its prefix')

  const inline = rpc('tools/call', { name: 'asks', arguments: {} })
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(inline), payload: inline })
  t.equal(res.json().error?.code, -32021, 'the same call inline: -32021')
  t.same(lines.filter(l => l.level >= 50).map(l => l.msg), [], 'no error line inline either')
})
