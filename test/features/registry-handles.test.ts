/**
 * Registry handles over the wire, on both eras: a disabled tool is absent from tools/list and
 * answered exactly as a tool that was never registered; enable/disable/update/remove each send
 * `notifications/tools/list_changed` to the sessions' GET streams.
 */
import t from 'tap'
import { Type } from '@sinclair/typebox'
import type { ToolHandle } from '../../lib/index.js'
import { SseReader } from '../helpers/sse.js'
import { rpc } from '../helpers/wire.js'
import { post as modernPost } from '../protocol/stateless/fixtures/helper.js'
import { build, call, initialize, listen } from '../helpers/handshake-app.js'

t.test('a disabled tool, on the handshake era and on the 2026-07-28 wire', async (t) => {
  let echo: ToolHandle<any> | undefined
  const app = await build(t, { requestState: { secret: 'handles-test-secret-0123456789' } }, (m) => {
    echo = m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
    m.tool({ name: 'other', description: 'Other' }, async () => 'other')
  })
  const handle = echo as ToolHandle<any>
  const s = await initialize(app)
  const names = async (): Promise<string[]> => (await call(app, s, 'tools/list')).result.tools.map((x: { name: string }) => x.name)
  t.same(await names(), ['echo', 'other'])

  handle.disable()
  t.same(await names(), ['other'], 'not listed')
  const legacy = await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'x' } }, { id: 1 })
  const never = await call(app, s, 'tools/call', { name: 'never_registered', arguments: { text: 'x' } }, { id: 1 })
  t.equal(legacy.error?.code, -32602, 'handshake era: -32602')
  t.same(legacy, JSON.parse(JSON.stringify(never).replace('never_registered', 'echo')), 'exactly as a tool never registered')

  const modern = await modernPost(app, rpc('tools/call', { name: 'echo', arguments: { text: 'x' } }, { id: 2 }))
  const modernNever = await modernPost(app, rpc('tools/call', { name: 'never_registered', arguments: { text: 'x' } }, { id: 2 }))
  t.equal(modern.statusCode, modernNever.statusCode, '2026-07-28: same status as a tool never registered')
  t.equal(modern.json().error?.code, -32602)
  t.same(modern.json(), JSON.parse(modernNever.body.replace('never_registered', 'echo')), 'and the same body')
  const modernList = await modernPost(app, rpc('tools/list', {}, { id: 3 }))
  t.same(modernList.json().result.tools.map((x: { name: string }) => x.name), ['other'])

  handle.enable()
  t.same(await names(), ['echo', 'other'], 'back, in its place')
  t.same((await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'hi' } })).result.content, [{ type: 'text', text: 'hi' }])
})

t.test('every visible change sends notifications/tools/list_changed', async (t) => {
  let echo: ToolHandle<any> | undefined
  const app = await build(t, {}, (m) => {
    echo = m.tool({ name: 'echo', description: 'Echoes' }, async () => 'x')
  })
  const handle = echo as ToolHandle<any>
  const live = await listen(t, app)
  const s = await live.initialize()
  const r = live.track(new SseReader(await live.get(s)))
  await r.waitFor(() => true) // priming event
  const changes = (): number => r.messages.filter(m => m.method === 'notifications/tools/list_changed').length
  const next = async (n: number): Promise<void> => {
    await r.waitFor(() => changes() >= n, 3000, 0)
    t.equal(changes(), n)
  }
  handle.disable()
  await next(1)
  handle.enable()
  await next(2)
  handle.update({ description: 'Echoes, updated' })
  await next(3)
  handle.remove()
  await next(4)
  t.same(r.messages.filter(m => m.method !== undefined).map(m => m.method), Array(4).fill('notifications/tools/list_changed'), 'nothing else')
})
