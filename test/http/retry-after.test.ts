/**
 * Every 503 the plugin answers carries Retry-After (lib/http/routes.ts adds
 * `ceil(retryIntervalMs / 1000)` s to a 503 that names none; a refusal with its own keeps it):
 * a lock wait that timed out, session data that cannot be read, tasks unavailable (create and
 * get), token verification unavailable. In one process, on stores and checks that fail on demand.
 */
import t, { type Test } from 'tap'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { MemorySessionLock, MemorySessionStore, SessionDataError, type JsonValue, type McpDecorator, type McpPluginOptions } from '../../lib/index.js'
import type { CreateOptions, SessionRecord } from '../../lib/sessions/session-store.js'
import { build as buildApp, initialize, request } from '../helpers/handshake-app.js'
import { modernHeaders, rpc } from '../helpers/wire.js'

const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } }

/** A memory store whose loads and creates fail while `failing` says so. */
class FailingStore extends MemorySessionStore {
  failing: 'none' | 'unreadable' | 'down' = 'none'
  override async load (id: string): Promise<SessionRecord | null> {
    if (this.failing === 'unreadable' && !id.startsWith('~')) throw new SessionDataError(id, 'corrupt')
    if (this.failing === 'down') throw new Error('store down')
    return await super.load(id)
  }

  override async create (id: string, data: Record<string, JsonValue>, options?: CreateOptions): Promise<void> {
    if (this.failing === 'down' && id.startsWith('~task~')) throw new Error('store down')
    await super.create(id, data, options)
  }
}

/** A tool that holds its session a while, and a task. */
function holdAndJob (m: McpDecorator): void {
  m.tool({ name: 'hold', description: 'Holds its session' }, async () => { await new Promise(resolve => setTimeout(resolve, 300)); return 'held' })
  m.tool({ name: 'job', description: 'A task', taskSupport: 'optional' }, async () => 'done')
}

const build = async (t: Test, opts: McpPluginOptions): Promise<FastifyInstance> =>
  await buildApp(t, { requestState: { secret: 'retry-after-test-secret' }, ...opts }, holdAndJob)

function retried (t: Test, res: LightMyRequestResponse, what: string): void {
  t.equal(res.statusCode, 503, `${what}: 503`)
  t.ok(Number(res.headers['retry-after']) >= 1, `${what}: Retry-After (${String(res.headers['retry-after'])})`)
}

async function modern (app: FastifyInstance, method: string, params: Record<string, unknown>, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  const body = rpc(method, params, { caps: TASKS })
  return await app.inject({ method: 'POST', url: '/mcp', headers: { ...modernHeaders(body), ...headers }, payload: body })
}

t.test('a lock wait that timed out', async t => {
  const lock = new MemorySessionLock({ timeout: 20 })
  t.teardown(() => lock.close())
  const app = await build(t, { sessions: { lock } })
  const s = await initialize(app)
  const holding = request(app, s, 'tools/call', { name: 'hold' })
  while (lock.size === 0) await new Promise(resolve => setImmediate(resolve))
  retried(t, await request(app, s, 'tools/call', { name: 'hold' }), 'busy session')
  await holding
})

t.test('session data that cannot be read', async t => {
  const store = new FailingStore()
  const app = await build(t, { sessions: { store } })
  const s = await initialize(app)
  store.failing = 'unreadable'
  retried(t, await request(app, s, 'tools/list'), 'unreadable session')
  retried(t, await request(app, s, 'tools/call', { name: 'hold' }), 'unreadable session, locked')
})

t.test('tasks unavailable: create and get', async t => {
  const store = new FailingStore()
  const app = await build(t, { sessions: { store } })
  const created = await modern(app, 'tools/call', { name: 'job', arguments: {} })
  const taskId = created.json().result?.taskId
  t.type(taskId, 'string', 'a task while the store works')
  store.failing = 'down'
  retried(t, await modern(app, 'tools/call', { name: 'job', arguments: {} }), 'a task create')
  retried(t, await modern(app, 'tasks/get', { taskId }, { 'mcp-name': taskId }), 'tasks/get')
})

t.test('token verification unavailable', async t => {
  const app = await build(t, {
    auth: {
      resource: 'http://127.0.0.1/mcp',
      authorizationServers: ['http://127.0.0.1/auth'],
      verify: () => { throw new Error('introspection endpoint down') }
    }
  })
  const body = rpc('tools/list', {})
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: { ...modernHeaders(body), authorization: 'Bearer abc' }, payload: body })
  retried(t, res, 'verification unavailable')
})
