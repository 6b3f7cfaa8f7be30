/**
 * What a failing handler keeps (docs/state-handles.md): a handler that fails with an ordinary
 * error (the client gets an `isError` result) keeps what it changed before failing, on its session
 * and on its state handle alike; a call on a handle that ends in a protocol error (an `McpError`)
 * keeps nothing of the handle. (A session request ending in a protocol error keeps its session's
 * changes today; the answers of a request's changes are being reworked, issue 47 item 1.)
 */
import t from 'tap'
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { injectClient, McpError } from '../../lib/index.js'

const app = Fastify({ logger: false })
t.teardown(() => app.close())
await app.register(mcp)
app.mcp.handleKind('jar', { ttl: 60_000 })
app.mcp.tool({ name: 'jar_create', description: 'A jar' }, async (_a, ctx) => await ctx.handles.create('jar', {}))
const jar = { argument: 'jar', kind: 'jar' } as const
const input = Type.Object({ jar: Type.String(), how: Type.String() })
app.mcp.tool({ name: 'jar_fail', description: 'Writes, then fails', input, handle: jar }, async ({ how }, ctx) => {
  ctx.handle?.set(how, 'written before the failure')
  if (how === 'protocol') throw new McpError(-32602, 'a protocol error')
  throw new Error('the tool failed')
})
app.mcp.tool({ name: 'jar_get', description: 'Reads', input: Type.Object({ jar: Type.String() }), handle: jar }, async (_a, ctx) =>
  JSON.stringify({ tool: ctx.handle?.get('tool') ?? null, protocol: ctx.handle?.get('protocol') ?? null }))
app.mcp.tool({ name: 'session_fail', description: 'Writes its session, then fails', session: 'required', input: Type.Object({ how: Type.String() }) }, async ({ how }, ctx) => {
  ctx.session?.set(how, 'written before the failure')
  if (how === 'protocol') throw new McpError(-32602, 'a protocol error')
  throw new Error('the tool failed')
})
app.mcp.tool({ name: 'session_get', description: 'Reads', session: 'required' }, async (_a, ctx) =>
  JSON.stringify({ tool: ctx.session?.get('tool') ?? null, protocol: ctx.session?.get('protocol') ?? null }))

const text = (r: { content?: Array<{ text?: string }> }): string | undefined => r.content?.[0]?.text

for (const era of ['2025-11-25', '2026-07-28']) {
  t.test(`${era}: a state handle keeps what a failing handler wrote (isError), not what a protocol error's did`, async t => {
    const c = injectClient(app, { protocolVersion: era })
    const id = text(await c.callTool('jar_create')) as string
    const failed = await c.callTool('jar_fail', { jar: id, how: 'tool' })
    t.same([failed.isError, text(failed)], [true, 'the tool failed'], 'an isError result')
    await t.rejects(c.callTool('jar_fail', { jar: id, how: 'protocol' }), { code: -32602 }, 'a protocol error')
    t.same(JSON.parse(text(await c.callTool('jar_get', { jar: id })) as string), { tool: 'written before the failure', protocol: null })
  })
}

t.test('a session keeps what a failing handler wrote (isError)', async t => {
  const c = injectClient(app, { protocolVersion: '2025-11-25' })
  const failed = await c.callTool('session_fail', { how: 'tool' })
  t.same([failed.isError, text(failed)], [true, 'the tool failed'], 'an isError result')
  t.same(JSON.parse(text(await c.callTool('session_get')) as string), { tool: 'written before the failure', protocol: null })
})
