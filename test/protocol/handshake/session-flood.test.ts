/**
 * Anyone can create sessions (`initialize` needs no session, and no principal without
 * `auth`): a flood of sessions nobody uses must not evict the sessions clients are using.
 */
import t from 'tap'
import { MemorySessionStore } from '../../../lib/index.js'
import { build, call, initialize, post } from '../../helpers/handshake-app.js'
import { LEGACY as LATEST } from '../../helpers/wire.js'

t.test('a used session survives twice `max` fresh initializes (memory store, the default)', async (t) => {
  const max = 20
  const store = new MemorySessionStore({ max })
  t.teardown(() => store.close())
  const app = await build(t, { sessions: { store } })
  const s = await initialize(app) // initialize + notifications/initialized: a client in business
  const first = await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'before' } })
  t.equal(first.result?.content?.[0]?.text, 'before')

  // Bare `initialize` calls, never followed by anything (what a flood looks like).
  for (let i = 0; i < 2 * max; i++) {
    const res = await post(app, {
      jsonrpc: '2.0',
      id: i,
      method: 'initialize',
      params: { protocolVersion: LATEST, capabilities: {}, clientInfo: { name: 'flood', version: '1' } }
    })
    t.equal(res.statusCode, 200, `flood initialize ${i}`)
  }
  t.equal(store.size, max, 'the store stayed bounded')

  const after = await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'after' } })
  t.equal(after.result?.content?.[0]?.text, 'after', 'the session in use was not evicted')
})
