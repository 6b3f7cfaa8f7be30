/**
 * What an operator reads in the logs: Fastify's "request completed" line carries the MCP method,
 * the tool, a session id prefix, the principal and the lock wait; a client that lacks a capability
 * is logged at info without a stack (its doing, not the server's); a tool error marked internal
 * reaches the model as "Tool execution failed", its cause only the log.
 */
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import { InternalToolError, MemorySessionLock, type McpDecorator, type McpPluginOptions } from '../../lib/index.js'
import { build as buildApp, call, initialize, type TestLike } from '../helpers/handshake-app.js'
import { modernHeaders, rpc } from '../helpers/wire.js'

type Line = Record<string, any>

/** The tools whose failures and questions the log lines below describe. */
function loggedTools (m: McpDecorator): void {
  m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
  m.tool({ name: 'ask', description: 'Asks the user' }, async (_args, ctx) => {
    const r = await ctx.elicit('name', { mode: 'form', message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
    return String(r.content?.name)
  })
  m.tool({ name: 'leaky', description: 'Fails with a message meant for the model' }, async () => {
    throw new Error('The SKU does not exist; list the catalog first')
  })
  m.tool({ name: 'internal', description: 'Fails internally' }, async () => {
    throw new InternalToolError('connection to db-7.internal:5432 refused')
  })
  m.tool({ name: 'expose-false', description: 'Fails with an http-errors style 5xx' }, async () => {
    throw Object.assign(new Error('upstream 10.0.0.3 timed out'), { expose: false })
  })
}

/** The shared test app with an info-level logger whose lines are kept. */
async function build (t: TestLike, opts: McpPluginOptions = {}): Promise<{ app: FastifyInstance, lines: Line[] }> {
  const lines: Line[] = []
  const logger = { level: 'info', stream: { write: (l: string) => { lines.push(JSON.parse(l)) } } }
  const app = await buildApp(t, { requestState: { secret: 'logging-test-secret-0123' }, ...opts }, loggedTools, { logger })
  return { app, lines }
}

const completed = (lines: Line[]): Line[] => lines.filter(l => l.msg === 'request completed')

t.test('"request completed" carries method, tool, session prefix and principal', async (t) => {
  const { app, lines } = await build(t, { auth: { authenticate: () => ({ id: 'alice' }) } })
  const s = await initialize(app)
  const init = completed(lines)[0]
  t.equal(init.mcpMethod, 'initialize')
  t.equal(init.mcpSession, s.sid.slice(0, 8), 'the new session, known once initialize made it')
  t.equal(init.mcpPrincipal, 'alice')
  lines.length = 0
  await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'hi' } })
  const done = completed(lines)
  t.equal(done.length, 1)
  t.match(done[0], { mcpMethod: 'tools/call', mcpTool: 'echo', mcpSession: s.sid.slice(0, 8), mcpPrincipal: 'alice', res: { statusCode: 200 } })
  t.notOk(String(done[0].mcpSession).length > 8, 'a prefix, not the whole session id')
})

t.test('the lock wait is bound when a lock is configured', async (t) => {
  const { app, lines } = await build(t, { sessions: { lock: new MemorySessionLock() } })
  const s = await initialize(app)
  lines.length = 0
  await call(app, s, 'tools/call', { name: 'echo', arguments: { text: 'hi' } })
  const done = completed(lines)[0]
  t.type(done.mcpLockWaitMs, 'number')
  t.ok(done.mcpLockWaitMs >= 0)
})

t.test('2026-07-28 requests: method and tool, no session', async (t) => {
  const { app, lines } = await build(t)
  const body = rpc('tools/call', { name: 'echo', arguments: { text: 'hi' } })
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: JSON.stringify(body) })
  t.equal(res.statusCode, 200)
  const done = completed(lines)[0]
  t.match(done, { mcpMethod: 'tools/call', mcpTool: 'echo' })
  t.notOk('mcpSession' in done)
})

t.test('a client without the elicitation capability: info, no stack, no error line', async (t) => {
  const { app, lines } = await build(t)
  const s = await initialize(app) // declares no capabilities
  lines.length = 0
  const r = await call(app, s, 'tools/call', { name: 'ask', arguments: {} })
  t.equal(r.result.isError, true)
  t.match(r.result.content[0].text, /elicitation/)
  t.same(lines.filter(l => l.level >= 40), [], 'nothing at warn or error')
  const info = lines.find(l => l.tool === 'ask')
  t.ok(info, 'logged, with the tool')
  t.equal(info?.level, 30)
  t.notOk(JSON.stringify(info).includes('    at '), 'no stack')
})

t.test('tool errors: the message reaches the model, unless marked internal', async (t) => {
  const { app, lines } = await build(t)
  const s = await initialize(app)
  const leaky = await call(app, s, 'tools/call', { name: 'leaky', arguments: {} })
  t.same(leaky.result.content, [{ type: 'text', text: 'The SKU does not exist; list the catalog first' }], 'verbatim (documented)')
  for (const name of ['internal', 'expose-false']) {
    lines.length = 0
    const r = await call(app, s, 'tools/call', { name, arguments: {} })
    t.same(r.result, { content: [{ type: 'text', text: 'Tool execution failed' }], isError: true }, `${name}: hidden from the model`)
    const logged = lines.find(l => l.level === 50 && l.tool === name)
    t.match(logged?.err?.message, /db-7|10\.0\.0\.3/, `${name}: the cause is in the log`)
  }
})
