/**
 * The file store's default lock (docs/sessions-and-lock.md, the table): without `sessions.lock`, a
 * `FileSessionStore` is locked with a `FileSessionLock` on its `lockDir` — a kernel lock another
 * process's `FileSessionLock` on the same directory sees — not the in-process lock. While a
 * request holds a session, a second `FileSessionLock` on the directory (a stand-in for another
 * worker: kernel locks on separate opens conflict within one process too) cannot take it; once
 * the request ended, it can.
 */
import t from 'tap'
import Fastify from 'fastify'
import mcp, { FileSessionLock, FileSessionStore } from '../../lib/index.js'
import { initialize, request } from '../helpers/handshake-app.js'

t.test('a file store without sessions.lock holds its sessions with a kernel lock on lockDir', async t => {
  const dir = t.testdir()
  const store = new FileSessionStore({ dir })
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(mcp, { sessions: { store } })
  let open!: () => void
  let entered!: () => void
  const gate = new Promise<void>(resolve => { open = resolve })
  const inside = new Promise<void>(resolve => { entered = resolve })
  app.mcp.tool({ name: 'hold', description: 'Holds its session until the gate opens' }, async (_a, ctx) => {
    ctx.session?.set('held', true)
    entered()
    await gate
    return 'held'
  })
  const s = await initialize(app)
  const other = new FileSessionLock({ dir: store.lockDir })
  t.teardown(() => other.close?.())

  const holding = request(app, s, 'tools/call', { name: 'hold', arguments: {} })
  await inside
  t.equal(await other.tryAcquire(s.sid), null, 'another worker\'s lock on the directory finds the session held')
  open()
  t.equal((await holding).statusCode, 200)
  const lease = await other.tryAcquire(s.sid)
  t.not(lease, null, 'free once the request ended')
  await lease?.release()
})
