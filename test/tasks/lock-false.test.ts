/**
 * Tasks under `sessions: { lock: false }` with the memory store still hold an in-process lock on
 * their key (docs/sessions-and-lock.md#lock-false): a runner that ended without writing its end
 * (the store refused it) leaves its key free, and the next `tasks/get` in this process finds it
 * out and answers `failed`, instead of `working` forever.
 */
import t from 'tap'
import Fastify from 'fastify'
import mcp, { MemorySessionStore, type SaveResult, type SessionChanges, type SessionRecord } from '../../lib/index.js'
import { modernHeaders, rpc } from '../helpers/wire.js'
import { until } from '../helpers/time.js'

const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } }

/** A memory store that refuses the saves of task records while `refusing` is set. */
class RefusingStore extends MemorySessionStore {
  refusing = false
  refused = 0
  override async save (id: string, changes: SessionChanges): Promise<SaveResult> {
    if (this.refusing && id.startsWith('~task~')) { this.refused++; throw new Error('disk full') }
    return await super.save(id, changes)
  }
}

/** The same, with a `load` of its own: the plugin then asks it through the general pairing. */
class RefusingStoreOwnLoad extends RefusingStore {
  override async load (id: string): Promise<SessionRecord | null> {
    return await super.load(id)
  }
}

for (const Store of [RefusingStore, RefusingStoreOwnLoad]) {
  t.test(`lock: false, ${Store.name}: a runner that could not write its end is found out: failed, not working forever`, async t => {
    const store = new Store()
    const app = Fastify({ logger: false })
    t.teardown(() => app.close())
    await app.register(mcp, { sessions: { store, lock: false }, requestState: { secret: 'lock-false-tasks-secret' }, tasks: { pollIntervalMs: 100 } })
    let open!: () => void
    const gate = new Promise<void>(resolve => { open = resolve })
    app.mcp.tool({ name: 'job', description: 'Waits for the gate', taskSupport: 'optional' }, async () => { await gate; return 'done' })
    const ask = async (method: string, params: Record<string, unknown>): Promise<Record<string, any>> => {
      const body = rpc(method, params, { caps: TASKS })
      return (await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: body })).json()
    }
    const taskId = (await ask('tools/call', { name: 'job', arguments: {} })).result.taskId as string
    t.type(taskId, 'string')
    t.equal((await ask('tasks/get', { taskId })).result.status, 'working', 'working while its runner holds the key')
    store.refusing = true
    open()
    await until(() => store.refused > 0, { what: 'the end to be refused' })
    store.refusing = false
    await until(async () => (await ask('tasks/get', { taskId })).result.status !== 'working', { what: 'the task to leave working', timeout: 5000 })
    const got = (await ask('tasks/get', { taskId })).result
    t.equal(got.status, 'failed', 'found out within the process')
    t.match(got.error?.message, /stopped before the task ended/)
  })
}
