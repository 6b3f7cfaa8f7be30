/**
 * One cancelled member of a 2025-03-26 batch (docs/sessions-and-lock.md#cancellation): the member
 * gets no response and its `ctx.signal` aborts; the other members answer; the members share the
 * session's changes, which are dropped only when the whole POST is cancelled, so what the batch
 * changed (the cancelled member's earlier writes included) is kept.
 */
import t from 'tap'
import type { McpDecorator } from '../../../lib/index.js'
import { messagesOf } from '../../helpers/wire.js'
import { build, call, initialize, post } from '../../helpers/handshake-app.js'

let aborted: unknown = null
let started!: () => void
const running = new Promise<void>(resolve => { started = resolve })

function tools (m: McpDecorator): void {
  m.tool({ name: 'mark', description: 'Writes its mark, then waits until cancelled' }, async (_a, ctx) => {
    ctx.session?.set('first', 'written')
    started()
    await new Promise<void>((resolve) => {
      ctx.signal.addEventListener('abort', () => { aborted = ctx.signal.reason; resolve() }, { once: true })
    })
    return 'not seen'
  })
  m.tool({ name: 'second', description: 'Writes its key' }, async (_a, ctx) => { ctx.session?.set('second', 'written'); return 'second done' })
  m.tool({ name: 'keys', description: 'Reads both' }, async (_a, ctx) => JSON.stringify([ctx.session?.get('first') ?? null, ctx.session?.get('second') ?? null]))
}

t.test('a cancelled member: no response, its signal aborted; the others answer; the batch\'s changes are kept', async t => {
  const app = await build(t, {}, tools)
  const s = await initialize(app, { version: '2025-03-26' })
  const batch = [
    { jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'mark', arguments: {} } },
    { jsonrpc: '2.0', id: 'b', method: 'tools/call', params: { name: 'second', arguments: {} } }
  ]
  const answered = post(app, batch, { session: s })
  await running
  const cancel = await post(app, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'a', reason: 'changed my mind' } }, { session: s })
  t.equal(cancel.statusCode, 202)
  const res = await answered
  t.equal(res.statusCode, 200)
  const messages = messagesOf(res).flat() as Array<Record<string, any>>
  const responses = messages.filter(m => m.id !== undefined)
  t.same(responses.map(m => m.id), ['b'], 'only the other member is answered')
  t.equal(responses[0]?.result?.content?.[0]?.text, 'second done')
  t.not(aborted, null, 'the cancelled member\'s signal aborted')
  t.equal((await call(app, s, 'tools/call', { name: 'keys', arguments: {} })).result.content[0].text, JSON.stringify(['written', 'written']),
    'both members\' changes kept: only the whole POST cancelled drops them')
})
