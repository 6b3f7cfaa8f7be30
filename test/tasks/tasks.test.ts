/**
 * Tasks (2026-07-28 extension `io.modelcontextprotocol/tasks`) in one process, on the memory
 * store, the file store and lock, and a private redis-server (Redis store, Redis lock, slots on
 * Redis): declaring
 * (`taskSupport`, advertised, decided per call; -32021 / -32601 where a task cannot be had), the
 * lifecycle (created and readable at once, the inlined result or error, cancellation reaching
 * `ctx.signal`, input requests answered through `tasks/update`, partial answers), and the bounds
 * (another principal's task is "not found", malformed ids, tasks per principal → 429, results
 * expire after `ttl`, a 1 MiB answer).
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import mcp, {
  ErrorCode,
  FileSessionLock,
  FileSessionStore,
  injectClient,
  McpError,
  MemorySessionStore,
  RedisSessionLock,
  RedisSessionStore,
  type InjectClient,
  type McpPluginOptions
} from '../../lib/index.js'
import { tokensAuth } from '../../examples/server.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { failFastRedis } from '../helpers/fail-fast-redis.js'
import { sleep, until } from '../helpers/time.js'
import { rpc, modernHeaders } from '../helpers/wire.js'

const EXT = 'io.modelcontextprotocol/tasks'
const CAPS = { elicitation: {}, extensions: { [EXT]: {} } }
const TTL = 1000

const redisServer = await startRedisServer(t)
const admin = new Redis(redisServer.url)
t.teardown(() => { admin.disconnect() })

function deferred (): { promise: Promise<void>, resolve: () => void } {
  let resolve!: () => void
  const promise = new Promise<void>(_resolve => { resolve = _resolve })
  return { promise, resolve }
}

/** What the tools of one app let a test see and steer. */
interface Probe {
  /** Opens the gate of every waiting `gate` call. */
  open: () => void
  /** Reasons the `gate` handlers were aborted with. */
  aborts: unknown[]
}

async function build (t: Test, backend: 'memory' | 'redis' | 'file', extra: Partial<McpPluginOptions> = {}): Promise<{ app: FastifyInstance, probe: Probe }> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  const opts: McpPluginOptions = { requestState: { secret: 'tasks-test-secret-0123456789' }, auth: tokensAuth('a:alice,b:bob'), tasks: { ttlMs: TTL, pollIntervalMs: 100 }, ...extra }
  if (backend === 'redis') {
    const lock = new RedisSessionLock({ redis: redisServer.url, timeout: 500, ttl: 1000 })
    // Fail fast while Redis is down: a 503 at once rather than commands queued for minutes.
    const redis = await failFastRedis(t, redisServer.url)
    t.teardown(async () => { await lock.close() })
    opts.sessions = { store: new RedisSessionStore({ redis }), lock }
    opts.redis = redisServer.url
  } else if (backend === 'file') {
    const dir = t.testdir()
    const lock = new FileSessionLock({ dir })
    t.teardown(() => lock.close?.())
    opts.sessions = { store: new FileSessionStore({ dir }), lock }
  }
  await app.register(mcp, opts)
  let gate = deferred()
  const probe: Probe = { open: () => { gate.resolve(); gate = deferred() }, aborts: [] }
  const m = app.mcp
  m.tool({ name: 'plain', description: 'never a task' }, async () => 'plain')
  m.tool({ name: 'quick', description: 'a task when it can', taskSupport: 'optional' }, async () => 'quick')
  m.tool({ name: 'needs_task', description: 'only as a task', taskSupport: 'required' }, async () => 'tasked')
  m.tool({ name: 'boom', description: 'a protocol error', taskSupport: 'optional' }, async () => { throw new McpError(ErrorCode.InternalError, 'kaboom') })
  m.tool({ name: 'tool_error', description: 'a tool error', taskSupport: 'optional' }, async () => { throw new Error('tool says no') })
  m.tool({ name: 'gate', description: 'waits for the test', taskSupport: 'optional' }, async (_a, ctx) => {
    await new Promise<void>((resolve, reject) => {
      void gate.promise.then(resolve)
      ctx.signal.addEventListener('abort', () => { probe.aborts.push(ctx.signal.reason); reject(ctx.signal.reason) }, { once: true })
    })
    return 'opened'
  })
  m.tool({ name: 'ask_two', description: 'two questions at once', taskSupport: 'optional' }, async (_a, ctx) => {
    const schema = { type: 'object', properties: { v: { type: 'string' } } }
    const [a, b] = await Promise.all([ctx.elicit('first', { message: '1?', requestedSchema: schema }), ctx.elicit('second', { message: '2?', requestedSchema: schema })])
    return `${String(a.content?.v).length}:${String(b.content?.v)}`
  })
  m.tool({
    name: 'named',
    description: 'asks a name first, then a task',
    taskSupport: 'optional',
    beforeTask: async (_a, ctx) => {
      const r = await ctx.elicit('who', { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
      ctx.state.name = r.content?.name
    }
  }, async (_a, ctx) => `hello ${String(ctx.state.name)}`)
  await app.ready()
  return { app, probe }
}

function client (app: FastifyInstance, token: string, caps: Record<string, unknown> = CAPS): InjectClient {
  return injectClient(app, { protocolVersion: '2026-07-28', headers: { authorization: `Bearer ${token}` }, capabilities: caps })
}

async function create (c: InjectClient, tool: string): Promise<string> {
  const r = await c.request('tools/call', { name: tool, arguments: {} })
  if (r.resultType !== 'task' || typeof r.taskId !== 'string') throw new Error(`no task: ${JSON.stringify(r)}`)
  return r.taskId
}

async function status (c: InjectClient, taskId: string, want: string): Promise<Record<string, any>> {
  let last: Record<string, any> = {}
  await until(async () => { last = await c.request('tasks/get', { taskId }); return last.status === want }, { timeout: 5000, what: `status ${want}` })
  return last
}

for (const backend of ['memory', 'redis', 'file'] as const) {
  t.test(`${backend}: declaring`, async t => {
    const { app } = await build(t, backend)
    const alice = client(app, 'a')
    const { tools } = await alice.listTools()
    t.same(tools.find(x => x.name === 'quick')?.execution, { taskSupport: 'optional' }, 'advertised per tool')
    t.equal(tools.find(x => x.name === 'plain')?.execution, undefined, 'forbidden: no execution field')
    t.same((await alice.initialize()).capabilities.extensions, { [EXT]: {} }, 'the extension in server/discover')
    t.match(await alice.request('tools/call', { name: 'plain', arguments: {} }), { resultType: 'complete', content: [{ text: 'plain' }] }, 'a forbidden tool runs inline')

    const without = client(app, 'a', { elicitation: {} })
    t.match(await without.request('tools/call', { name: 'quick', arguments: {} }), { resultType: 'complete', content: [{ text: 'quick' }] }, 'optional + no extension: inline')
    await t.rejects(without.request('tools/call', { name: 'needs_task', arguments: {} }),
      { code: -32021, data: { requiredCapabilities: { extensions: { [EXT]: {} } } } }, 'required + no extension: -32021')
    for (const method of ['tasks/get', 'tasks/update', 'tasks/cancel']) {
      await t.rejects(without.request(method, { taskId: 'x'.repeat(32), inputResponses: {} }), { code: -32021 }, `${method} without the extension: -32021`)
    }
    for (const method of ['tasks/result', 'tasks/list']) await t.rejects(alice.request(method, { taskId: 'x'.repeat(32) }), { code: -32601 }, `${method} is gone: -32601`)

    const legacy = injectClient(app, { headers: { authorization: 'Bearer a' } })
    await t.rejects(legacy.callTool('needs_task'), { code: -32601 }, 'a handshake-era session: a required tool is -32601')
    t.match(await legacy.callTool('quick'), { content: [{ text: 'quick' }] }, 'a handshake-era session: optional runs inline')

    t.throws(() => app.mcp.tool({ name: 'bad', description: 'x', taskSupport: 'always' as never }, async () => 'x'), /taskSupport must be/)
  })

  t.test(`${backend}: lifecycle: readable at once, result or error inlined, tool errors complete`, async t => {
    const { app, probe } = await build(t, backend)
    const alice = client(app, 'a')
    const created = await alice.request('tools/call', { name: 'gate', arguments: {} })
    t.match(created, { resultType: 'task', status: 'working', ttlMs: TTL, pollIntervalMs: 100 })
    t.notOk('result' in created || 'task' in created, 'flat, no result')
    t.match(created.taskId, /^[A-Za-z0-9_-]{32}$/, '192 random bits')
    t.match(await alice.request('tasks/get', { taskId: created.taskId }), { resultType: 'complete', taskId: created.taskId, status: 'working' }, 'readable at once')
    probe.open()
    const done = await status(alice, created.taskId, 'completed')
    t.same(done.result.content, [{ type: 'text', text: 'opened' }], 'the result is inlined')

    const failed = await status(alice, await create(alice, 'boom'), 'failed')
    t.same(failed.error, { code: -32603, message: 'kaboom' }, 'a protocol error: failed with the error')
    t.notOk('result' in failed)
    const toolError = await status(alice, await create(alice, 'tool_error'), 'completed')
    t.match(toolError.result, { isError: true, content: [{ text: 'tool says no' }] }, 'a tool error: completed with isError')
  })

  t.test(`${backend}: cancel reaches ctx.signal; the status settles to cancelled; a second cancel is the same ack`, async t => {
    const { app, probe } = await build(t, backend)
    const alice = client(app, 'a')
    const taskId = await create(alice, 'gate')
    await status(alice, taskId, 'working')
    const ack = await alice.request('tasks/cancel', { taskId })
    t.same(Object.keys(ack).filter(k => k !== '_meta'), ['resultType'], 'an empty ack')
    t.equal((await alice.request('tasks/get', { taskId })).status, 'cancelled', 'cancelled at once')
    await until(() => probe.aborts.length === 1, { what: 'the handler to be aborted' })
    t.match(probe.aborts[0], { name: 'TaskAbortError', kind: 'cancelled' })
    probe.open()
    const after = await alice.request('tasks/get', { taskId })
    t.equal(after.status, 'cancelled')
    t.notOk('result' in after, 'no result for a cancelled task')
    t.match(await alice.request('tasks/cancel', { taskId }), { resultType: 'complete' }, 'idempotent')
    if (backend === 'redis') await until(async () => await admin.exists(`mcp:{~task~${taskId}}:lock`) === 0, { what: 'the lease to be released' })
  })

  t.test(`${backend}: input requests: input_required, partial answers, unknown keys ignored, a 1 MiB answer`, async t => {
    const { app } = await build(t, backend)
    const alice = client(app, 'a')
    const taskId = await create(alice, 'ask_two')
    const waiting = await status(alice, taskId, 'input_required')
    t.same(Object.keys(waiting.inputRequests).sort(), ['first', 'second'])
    t.equal(waiting.inputRequests.first.method, 'elicitation/create')
    const big = 'x'.repeat(1024 * 1024)
    t.match(await alice.request('tasks/update', { taskId, inputResponses: { first: { action: 'accept', content: { v: big } }, nope: { action: 'accept' }, second: 'not an answer' } }),
      { resultType: 'complete' })
    const partial = await alice.request('tasks/get', { taskId })
    t.equal(partial.status, 'input_required', 'still waiting for the second')
    t.same(Object.keys(partial.inputRequests), ['second'], 'only the unanswered key')
    await alice.request('tasks/update', { taskId, inputResponses: { second: { action: 'accept', content: { v: 'two' } } } })
    const done = await status(alice, taskId, 'completed')
    t.same(done.result.content, [{ type: 'text', text: `${1024 * 1024}:two` }], 'the handler got both answers, the 1 MiB one whole')
  })

  t.test(`${backend}: another principal's task is not found; malformed ids are not found`, async t => {
    const { app, probe } = await build(t, backend)
    const alice = client(app, 'a')
    const bob = client(app, 'b')
    const taskId = await create(alice, 'gate')
    for (const method of ['tasks/get', 'tasks/update', 'tasks/cancel']) {
      await t.rejects(bob.request(method, { taskId, inputResponses: {} }), { code: -32602, message: 'Invalid params: task not found' }, `bob: ${method}`)
    }
    t.equal((await alice.request('tasks/get', { taskId })).status, 'working', 'bob\'s cancel did nothing')
    for (const id of ['', 'short', 'x'.repeat(33), `${'x'.repeat(31)}!`]) {
      await t.rejects(alice.request('tasks/get', { taskId: id }), { code: -32602 }, `malformed ${JSON.stringify(id.slice(0, 8))}`)
    }
    await t.rejects(alice.request('tasks/get', { taskId: 7 }), { code: -32602 }, 'a number')
    probe.open()
    await status(alice, taskId, 'completed')
  })

  t.test(`${backend}: tasks per principal are bounded: 429 with Retry-After, free again once one ends`, async t => {
    const { app, probe } = await build(t, backend, { tasks: { ttlMs: TTL, maxPerPrincipal: 2 } })
    const alice = client(app, 'a')
    const ids = [await create(alice, 'gate'), await create(alice, 'gate')]
    const body = rpc('tools/call', { name: 'gate', arguments: {} }, { caps: CAPS })
    const res = await app.inject({ method: 'POST', url: '/mcp', headers: { ...modernHeaders(body), authorization: 'Bearer a' }, payload: body })
    t.equal(res.statusCode, 429)
    t.ok(Number(res.headers['retry-after']) >= 1, 'Retry-After')
    t.match(res.json().error, { code: -32000, data: { limit: 'tasks', max: 2 } })
    const bob = client(app, 'b')
    const bobs = await create(bob, 'quick')
    t.ok(bobs, 'another principal is not counted with alice')
    probe.open()
    for (const id of ids) await status(alice, id, 'completed')
    const again = await create(alice, 'quick')
    t.ok(again, 'free again')
    // Let both quick tasks finish before the test ends: the file store writes their records into
    // t.testdir(), and one landing while tap removes that directory failed the run (ENOTEMPTY).
    await status(bob, bobs, 'completed')
    await status(alice, again, 'completed')
  })

  t.test(`${backend}: a finished task is gone after its ttlMs`, async t => {
    const { app } = await build(t, backend)
    const alice = client(app, 'a')
    const taskId = await create(alice, 'quick')
    await status(alice, taskId, 'completed')
    const started = Date.now()
    await until(async () => await alice.request('tasks/get', { taskId }).then(() => false, (err: McpError) => err.code === -32602), { timeout: 5000, what: 'the task to expire' })
    t.ok(Date.now() - started >= TTL - 300, 'kept for about its ttlMs')
    if (backend === 'redis') t.equal(await admin.exists(`mcp:{~task~${taskId}}:s`), 0, 'its record is removed')
  })
}

t.test('redis: a task\'s end and the release of its lease are one script: whoever reads the end finds the key free', async t => {
  const { app, probe } = await build(t, 'redis')
  const alice = client(app, 'a')
  const taskId = await create(alice, 'gate')
  await status(alice, taskId, 'working')
  const lockKey = `mcp:{~task~${taskId}}:lock`
  const recordKey = `mcp:{~task~${taskId}}:s`
  // Every command that names the task's keys, with its arguments, while the handler ends.
  const monitor = await admin.monitor()
  const seen: string[][] = []
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source !== 'lua' && (args.includes(lockKey) || args.includes(recordKey))) seen.push(args)
  })
  t.teardown(() => { monitor.disconnect() })
  await sleep(100) // MONITOR reports a little after it is on
  probe.open()
  await status(alice, taskId, 'completed')
  t.equal(await admin.exists(lockKey), 0, 'the key is free as soon as the end can be read')
  await sleep(100)
  // The end: the script that names both keys and writes the completed record (a poll's take under
  // load may name both keys after it).
  const end = seen.findIndex(args => args.includes(lockKey) && args.includes(recordKey) && args.some(a => a.includes('completed')))
  t.ok(end >= 0, 'one script writes the end and releases the lease')
  // The runner's lease token: nothing after the end uses it (no separate release). A poll that read
  // the task working just before may still take the free key, see the end and let go (its own token).
  const token = seen[end]?.find(a => /^[0-9a-f]{32}$/.test(a))
  t.ok(token, 'the end is fenced by the runner\'s token')
  t.same(seen.slice(end + 1).filter(args => args.includes(token as string)), [], 'nothing uses the runner\'s lease after it (no separate release)')
})

t.test('redis: Redis refusing writes when a task ends: never told completed; failed once writes work, as the store holds', async t => {
  const { app, probe } = await build(t, 'redis')
  const alice = client(app, 'a')
  const taskId = await create(alice, 'gate')
  await status(alice, taskId, 'working')
  const recordKey = `mcp:{~task~${taskId}}:s`
  // Every write refused (no replica can acknowledge it): the end, and the release that follows a failed end.
  await admin.config('SET', 'min-replicas-to-write', '1')
  let restored = false
  const restore = async (): Promise<void> => { if (!restored) { restored = true; await admin.config('SET', 'min-replicas-to-write', '0') } }
  t.teardown(restore)
  probe.open()
  // The lease runs out (1 s) without renewal; polls meanwhile see the task working, or a 503.
  const told: string[] = []
  const started = Date.now()
  while (Date.now() - started < 2500) {
    told.push(await alice.request('tasks/get', { taskId }).then(r => String(r.status), (err: McpError) => `error ${err.code}`))
    await sleep(100)
  }
  t.notOk(told.includes('completed'), `never told completed while the end could not be written (${[...new Set(told)].join(', ')})`)
  t.equal(JSON.parse(await admin.hget(recordKey, 'status') as string), 'working', 'the store holds no end')
  await restore()
  const failed = await status(alice, taskId, 'failed')
  t.match(failed.error, { code: -32603 }, 'told failed: the runner stopped before its end was written')
  t.equal(JSON.parse(await admin.hget(recordKey, 'status') as string), 'failed', 'and that is what the store holds')
})

t.test('redis: Redis stopped: task calls and task methods answer 503, nothing crashes; tasks work again once it is back', async t => {
  const { app } = await build(t, 'redis')
  const alice = client(app, 'a')
  const taskId = await create(alice, 'quick')
  await status(alice, taskId, 'completed')
  await redisServer.stop()
  try {
    const body = rpc('tools/call', { name: 'quick', arguments: {} }, { caps: CAPS })
    const res = await app.inject({ method: 'POST', url: '/mcp', headers: { ...modernHeaders(body), authorization: 'Bearer a' }, payload: body })
    t.equal(res.statusCode, 503, 'creating a task: 503')
    t.match(res.json().error, { code: -32000, message: /retry later/ })
    await t.rejects(alice.request('tasks/get', { taskId }), { code: -32000, message: /unavailable/ }, 'tasks/get: 503')
    await t.rejects(alice.request('tasks/cancel', { taskId }), { code: -32000 }, 'tasks/cancel: 503')
  } finally {
    await redisServer.start()
  }
  await until(async () => await alice.request('tools/call', { name: 'quick', arguments: {} }).then(r => r.resultType === 'task', () => false), { timeout: 10_000, what: 'tasks to work again' })
  t.pass('tasks work again')
})

t.test('beforeTask: its questions are input_required rounds, then the task is made and sees ctx.state; inline it runs first', async t => {
  const { app } = await build(t, 'memory')
  const rounds: string[] = []
  const caps = { ...CAPS, elicitation: {} }
  const alice = injectClient(app, {
    protocolVersion: '2026-07-28',
    headers: { authorization: 'Bearer a' },
    capabilities: caps,
    elicit: (p) => { rounds.push(p.message); return { action: 'accept', content: { name: 'Ada' } } }
  })
  const created = await alice.request('tools/call', { name: 'named', arguments: {} })
  t.same(rounds, ['Name?'], 'one input_required round before the task')
  t.equal(created.resultType, 'task')
  t.notOk('requestState' in created, 'no requestState on the task')
  const done = await status(alice, created.taskId, 'completed')
  t.same(done.result.content, [{ type: 'text', text: 'hello Ada' }], 'the task saw what beforeTask kept in ctx.state')
  const inline = injectClient(app, { protocolVersion: '2026-07-28', headers: { authorization: 'Bearer a' }, elicit: () => ({ action: 'accept', content: { name: 'Bo' } }) })
  t.match(await inline.callTool('named'), { content: [{ text: 'hello Bo' }] }, 'inline: beforeTask, then the handler')
  t.throws(() => app.mcp.tool({ name: 'x1', description: 'x', beforeTask: async () => {} }, async () => 'x'), /never runs as a task/)
  t.throws(() => app.mcp.tool({ name: 'x2', description: 'x', taskSupport: 'optional', beforeTask: 'no' as never }, async () => 'x'), /must be a function/)
})

t.test('the store refusing writes while a task asks: no crash, the handler is stopped, the task ends failed once writes work again', async t => {
  const store = new MemorySessionStore()
  let failSaves = false
  const save = store.save.bind(store)
  store.save = async (...args) => { if (failSaves) throw new Error('store refuses writes'); return await save(...args) }
  const { app } = await build(t, 'memory', { sessions: { store } })
  const alice = client(app, 'a')
  failSaves = true
  const taskId = await create(alice, 'ask_two')
  // The runner stops once its asks cannot be written and lets go of its lease; a reader then finds
  // the lease free and tries to mark the task failed, which the store refuses too: a 503.
  await until(async () => await alice.request('tasks/get', { taskId }).then(() => false, (err: McpError) => err.code === -32000), { what: 'the runner to stop' })
  failSaves = false
  const failed = await status(alice, taskId, 'failed')
  t.match(failed.error, { code: -32603 }, 'failed, with a JSON-RPC error')
  t.notOk('inputRequests' in failed)
})
