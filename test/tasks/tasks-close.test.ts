/**
 * Tasks and `app.close()`: a task running on the instance may finish within `drainTimeoutMs`; one
 * still running at the deadline is stopped (its handler's signal aborts with the drain's reason)
 * and written `failed` before the stores close, its lease given back; a handler that ignores its
 * signal cannot hold the shutdown, and nothing of it is written after close. On the memory store
 * and lock, and on the file store and lock (whose late writes once landed in a removed directory).
 */
import t, { type Test } from 'tap'
import { stat } from 'node:fs/promises'
import Fastify, { type FastifyInstance } from 'fastify'
import mcp, { FileSessionLock, FileSessionStore, FST_ERR_MCP_SERVER_CLOSING, injectClient, MemorySessionLock, MemorySessionStore, type SessionLock, type SessionStore } from '../../lib/index.js'
import { taskKey } from '../../lib/tasks/task-record.js'
import { sleep, until } from '../helpers/time.js'

const CAPS = { extensions: { 'io.modelcontextprotocol/tasks': {} } }

interface Setup {
  app: FastifyInstance
  store: SessionStore
  lock: SessionLock
  /** Every abort reason a handler saw. */
  aborts: unknown[]
  /** Lets the handlers that wait for it return (`stubborn` ones included). */
  release: () => void
}

async function build (t: Test, backend: 'memory' | 'file', drainTimeoutMs: number): Promise<Setup> {
  const dir = backend === 'file' ? t.testdir() : ''
  const store = backend === 'file' ? new FileSessionStore({ dir }) : new MemorySessionStore()
  const lock = backend === 'file' ? new FileSessionLock({ dir }) : new MemorySessionLock()
  t.teardown(async () => { await lock.close?.(); await (store as SessionStore).close?.() })
  const app = Fastify({ logger: false })
  await app.register(mcp, { sessions: { store, lock }, drainTimeoutMs })
  const aborts: unknown[] = []
  let release!: () => void
  const released = new Promise<void>(resolve => { release = resolve })
  app.mcp.tool({ name: 'short', description: 'ends soon', taskSupport: 'required' }, async () => { await sleep(100); return 'short done' })
  app.mcp.tool({ name: 'long', description: 'ends when aborted', taskSupport: 'required' }, async (_a, ctx) => {
    await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => { aborts.push(ctx.signal.reason); reject(ctx.signal.reason) }, { once: true }))
    return 'never'
  })
  app.mcp.tool({ name: 'stubborn', description: 'ignores its signal', taskSupport: 'required' }, async () => { await released; return 'late' })
  await app.ready()
  return { app, store, lock, aborts, release }
}

async function start (app: FastifyInstance, tool: string): Promise<string> {
  const client = injectClient(app, { protocolVersion: '2026-07-28', capabilities: CAPS })
  const r = await client.request('tools/call', { name: tool, arguments: {} })
  if (r.resultType !== 'task') throw new Error(`no task: ${JSON.stringify(r)}`)
  return r.taskId as string
}

async function statusOf (store: SessionStore, id: string): Promise<Record<string, unknown> | undefined> {
  return (await store.load(taskKey(id)))?.data
}

for (const backend of ['memory', 'file'] as const) {
  t.test(`${backend}: a task that ends within drainTimeoutMs completes; close waits for it`, async t => {
    const { app, store } = await build(t, backend, 5000)
    const id = await start(app, 'short')
    await app.close()
    t.match(await statusOf(store, id), { status: 'completed', result: { content: [{ text: 'short done' }] } })
  })

  t.test(`${backend}: a task still running at the deadline is aborted and ends failed, its lease free`, async t => {
    const { app, store, lock, aborts } = await build(t, backend, 200)
    const id = await start(app, 'long')
    await until(async () => (await statusOf(store, id))?.status === 'working', { what: 'the task to run' })
    t.equal(app.mcp.status().runningTasks, 1, 'status counts the task running here')
    await app.close()
    t.equal(app.mcp.status().runningTasks, 0, 'none left')
    t.equal(aborts.length, 1, "the handler's signal aborted")
    t.type(aborts[0], FST_ERR_MCP_SERVER_CLOSING, 'with the drain reason, as a request would be')
    t.match(await statusOf(store, id), { status: 'failed', error: { code: -32603, message: /shut down before the task ended/ } },
      'failed at once: its client need not wait for the lease to expire')
    const lease = await lock.tryAcquire(taskKey(id))
    t.ok(lease, 'the lease was given back')
    await lease?.release()
  })

  t.test(`${backend}: a handler that ignores its signal cannot hold the shutdown; its late end is not written`, async t => {
    const { app, store, release } = await build(t, backend, 200)
    const id = await start(app, 'stubborn')
    await until(async () => (await statusOf(store, id))?.status === 'working', { what: 'the task to run' })
    await app.close()
    const ended = await statusOf(store, id)
    t.match(ended, { status: 'failed' })
    const file = backend === 'file' ? await stat(t.testdirName).then(s => s.mtimeMs) : 0
    release()
    await sleep(200)
    t.same(await statusOf(store, id), ended, 'the handler returning after close changes nothing')
    if (backend === 'file') t.equal((await stat(t.testdirName)).mtimeMs, file, 'nothing written into the directory after close')
  })
}

t.test('a store that hangs while a stopped task is written cannot hold the shutdown', async t => {
  const { app, store } = await build(t, 'memory', 100)
  const id = await start(app, 'long')
  await until(async () => (await statusOf(store, id))?.status === 'working', { what: 'the task to run' })
  store.load = async () => await new Promise(() => {})
  // Without its bound the close would wait forever (the test's timeout).
  await app.close()
  t.pass('closed')
})
