/**
 * `ctx.state` is on the `McpContext` type (no cast), on both eras. On the handshake era it is a
 * plain object that lives as long as the request (a handler runs once per request there); on the
 * 2026-07-28 wire it comes back with each `input_required` round (test/protocol/stateless/rounds.test.ts).
 */
import t from 'tap'
import { build, call, initialize } from '../helpers/handshake-app.js'

t.test('ctx.state on the handshake era: typed, and fresh for every request', async (t) => {
  const app = await build(t, {}, (m) => {
    m.tool({ name: 'count', description: 'Counts in ctx.state' }, async (_args, ctx) => {
      const n = typeof ctx.state.n === 'number' ? ctx.state.n + 1 : 1
      ctx.state.n = n
      return String(n)
    })
  })
  const s = await initialize(app)
  for (const id of [1, 2]) {
    const res = await call(app, s, 'tools/call', { name: 'count', arguments: {} }, { id })
    t.same(res.result.content, [{ type: 'text', text: '1' }], `request ${id} starts with an empty state`)
  }
})
