/**
 * The official tasks client (`@modelcontextprotocol/ext-tasks` on `@modelcontextprotocol/client`,
 * 2026-07-28) against the plugin: every task answer parses under the extension's own published
 * schemas (`core/v2`: `CreateTaskResult`, `tasks/get` in each status, the `tasks/update` and
 * `tasks/cancel` acks), and the client settles a task that asks a question (elicitation →
 * `input_required` → `tasks/update` → `completed`) on one instance and with its requests spread
 * over two instances sharing one Redis. The client goes through `examples/clients/ext-tasks-dispatch.ts`,
 * the raw dispatch docs/client-guide.md tells users to copy.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client'
import { createTaskSessionFromClient, resultFromTaskOutcome, TaskFailedError } from '@modelcontextprotocol/ext-tasks/client'
import {
  CallToolResultV2Schema, CancelTaskResultV2Schema, CreateTaskResultV2Schema, GetTaskResultV2Schema, UpdateTaskResultV2Schema
} from '@modelcontextprotocol/ext-tasks/core/v2'
import mcp, { ErrorCode, McpError, RedisSessionLock, RedisSessionStore, type McpPluginOptions } from '../../lib/index.js'
import { rawDispatch } from '../../examples/clients/ext-tasks-dispatch.js'
import { serve } from '../helpers/http-client.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { failFastRedis } from '../helpers/fail-fast-redis.js'
import { until } from '../helpers/time.js'

const EXT = 'io.modelcontextprotocol/tasks'
const SECRET = 'ext-tasks-interop-secret-0123456789'
const MODERN = '2026-07-28'
const CLIENT_INFO = { name: 'ext-tasks-interop', version: '1.0.0' }
const nameSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }

/** Where each task ran, and the gate the `slow` tool waits on. */
interface Probe { ranOn: string[], open: () => void }

function tools (app: FastifyInstance, label: string, probe: Probe, gate: Promise<void>): void {
  app.mcp.tool({ name: 'greet', description: 'Asks a name, then greets (a task)', taskSupport: 'required' }, async (_a, ctx) => {
    probe.ranOn.push(label)
    const r = await ctx.elicit('name', { message: 'Your name?', requestedSchema: nameSchema })
    return r.action === 'accept' ? `Hello, ${String(r.content?.name)}!` : `no: ${r.action}`
  })
  app.mcp.tool({ name: 'slow', description: 'Waits for the test', taskSupport: 'required' }, async (_a, ctx) => {
    await Promise.race([gate, new Promise(resolve => ctx.signal.addEventListener('abort', resolve))])
    return 'slow done'
  })
  app.mcp.tool({ name: 'broken', description: 'Fails', taskSupport: 'required' }, async () => {
    throw new Error('broken on purpose')
  })
  app.mcp.tool({ name: 'refuse', description: 'Fails with a JSON-RPC error', taskSupport: 'required' }, async () => {
    throw new McpError(ErrorCode.InvalidParams, 'refused on purpose')
  })
}

async function instance (t: Test, label: string, probe: Probe, gate: Promise<void>, extra: Partial<McpPluginOptions> = {}): Promise<string> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { requestState: { secret: SECRET }, tasks: { pollIntervalMs: 100 }, ...extra })
  tools(app, label, probe, gate)
  return (await serve(t, app)).url
}

function newProbe (): { probe: Probe, gate: Promise<void> } {
  let open!: () => void
  const gate = new Promise<void>(resolve => { open = resolve })
  return { probe: { ranOn: [], open }, gate }
}

/** A v2 client pinned to 2026-07-28 and an ext-tasks session on it; requests go to `urls` in turn. */
async function taskSession (t: Test, urls: string[], answer: string | null) {
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: { pin: MODERN } } })
  await client.connect(new StreamableHTTPClientTransport(new URL(urls[0]!)))
  let turn = 0
  const used: string[] = []
  const session = createTaskSessionFromClient(client, {
    endpointId: 'ext-tasks-interop',
    rawDispatch: rawDispatch(() => { const url = urls[turn++ % urls.length]!; used.push(url); return url }),
    v2RequestFraming: { protocolVersion: MODERN, clientInfo: CLIENT_INFO, clientCapabilities: { elicitation: {} } },
    onInputRequest: async (request) => {
      if (request.kind !== 'elicitation' || answer === null) return { action: 'decline' } as never
      return { action: 'accept', content: { name: answer } } as never
    }
  })
  t.teardown(async () => { await session.close(); await client.close() })
  return { session, used }
}

t.test('every task answer parses under the extension\'s published schemas', async t => {
  const { probe, gate } = newProbe()
  const url = await instance(t, 'one', probe, gate)
  const send = rawDispatch(url)
  const meta = {
    'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientInfo': CLIENT_INFO, 'io.modelcontextprotocol/clientCapabilities': { elicitation: {}, extensions: { [EXT]: {} } }
  }
  const call = async (method: string, params: Record<string, unknown>): Promise<any> => {
    const r = await send({ method, params: { ...params, _meta: meta } } as never)
    if (r.kind === 'error') throw new Error(`${method}: ${r.error.message}`)
    return r.result
  }
  const parses = (schema: { safeParse: (v: unknown) => { success: boolean, error?: unknown } }, value: unknown, what: string): void => {
    const parsed = schema.safeParse(value)
    t.ok(parsed.success, what, parsed.success ? {} : { diagnostic: true, error: String(parsed.error), value })
  }
  const get = async (id: string, status: string): Promise<any> => {
    let last: any
    await until(async () => { last = await call('tasks/get', { taskId: id }); return last.status === status }, { what: `status ${status}`, timeout: 30_000, every: 50 })
    return last
  }

  const greet = await call('tools/call', { name: 'greet', arguments: {} })
  parses(CreateTaskResultV2Schema, greet, 'CreateTaskResult')
  parses(GetTaskResultV2Schema, await get(greet.taskId, 'input_required'), 'tasks/get: input_required, with its inputRequests')
  const ack = await call('tasks/update', { taskId: greet.taskId, inputResponses: { name: { action: 'accept', content: { name: 'Ada' } } } })
  parses(UpdateTaskResultV2Schema, ack, 'tasks/update ack')
  const done = await get(greet.taskId, 'completed')
  parses(GetTaskResultV2Schema, done, 'tasks/get: completed, its tool result inlined')
  parses(CallToolResultV2Schema, done.result, 'the inlined result is a complete CallToolResult (the client decodes it so)')
  t.match(done.result.content, [{ type: 'text', text: 'Hello, Ada!' }])

  const slow = await call('tools/call', { name: 'slow', arguments: {} })
  parses(GetTaskResultV2Schema, await get(slow.taskId, 'working'), 'tasks/get: working')
  parses(CancelTaskResultV2Schema, await call('tasks/cancel', { taskId: slow.taskId }), 'tasks/cancel ack')
  parses(GetTaskResultV2Schema, await get(slow.taskId, 'cancelled'), 'tasks/get: cancelled')

  const broken = await call('tools/call', { name: 'broken', arguments: {} })
  const failed = await get(broken.taskId, 'completed')
  parses(GetTaskResultV2Schema, failed, 'tasks/get: a tool error is completed with isError')
  t.equal(failed.result.isError, true)
  parses(CallToolResultV2Schema, failed.result, 'the inlined tool error too')

  const refused = await call('tools/call', { name: 'refuse', arguments: {} })
  const error = await get(refused.taskId, 'failed')
  parses(GetTaskResultV2Schema, error, 'tasks/get: failed, its JSON-RPC error inlined')
  t.match(error.error, { code: ErrorCode.InvalidParams, message: 'refused on purpose' })
  probe.open()
})

t.test('the ext-tasks client settles a task with a question on one instance', async t => {
  const { probe, gate } = newProbe()
  const url = await instance(t, 'one', probe, gate)
  const { session } = await taskSession(t, [url], 'Ada')
  const execution = await session.callTool('greet', {})
  t.equal(execution.kind, 'task', 'run as a task')
  const { outcome } = await execution.settle()
  t.equal(outcome.status, 'completed')
  t.match(resultFromTaskOutcome(outcome), { content: [{ type: 'text', text: 'Hello, Ada!' }] })
  probe.open()
})

t.test('a declined question and a failed handler come back as the client types them', async t => {
  const { probe, gate } = newProbe()
  const url = await instance(t, 'one', probe, gate)
  const { session } = await taskSession(t, [url], null)
  const declined = await (await session.callTool('greet', {})).settle()
  t.match(resultFromTaskOutcome(declined.outcome), { content: [{ text: 'no: decline' }] }, 'declined: the handler saw it')
  const broken = await (await session.callTool('broken', {})).settle()
  t.equal(broken.outcome.status, 'completed', 'a throwing handler is a tool error (completed, isError)')
  t.match(resultFromTaskOutcome(broken.outcome), { isError: true })
  t.notOk(broken.outcome.status === 'failed' && broken.outcome.error instanceof TaskFailedError && /schema/.test(broken.outcome.error.message), 'no schema failure')
  probe.open()
})

t.test('two instances on one Redis: created on one, asked, answered and settled through both', async t => {
  const redis = await startRedisServer(t)
  const { probe, gate } = newProbe()
  const urls: string[] = []
  for (const label of ['A', 'B']) {
    const client = await failFastRedis(t, redis.url)
    const lock = new RedisSessionLock({ redis: redis.url })
    t.teardown(async () => { await lock.close() })
    urls.push(await instance(t, label, probe, gate, { sessions: { store: new RedisSessionStore({ redis: client }), lock }, redis: redis.url }))
  }
  const { session, used } = await taskSession(t, urls, 'Grace')
  const { outcome } = await (await session.callTool('greet', {})).settle()
  t.match(resultFromTaskOutcome(outcome), { content: [{ type: 'text', text: 'Hello, Grace!' }] })
  t.same(probe.ranOn, ['A'], 'the handler ran on the instance that took the call')
  t.ok(used.filter(u => u === urls[1]).length >= 2, `instance B answered task requests too (${used.length} requests in all)`)
  probe.open()
})
