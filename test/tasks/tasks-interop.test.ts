/**
 * The official clients and a server whose tools may run as tasks. Neither declares the Tasks
 * extension (the v2 client has no requester side for it; the v1 client speaks 2025-11-25, where the
 * plugin serves no tasks), so each gets the tool's plain result, inline.
 */
import t from 'tap'
import Fastify from 'fastify'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Client as ModernClient, StreamableHTTPClientTransport as ModernTransport } from '@modelcontextprotocol/client'
import mcp from '../../lib/index.js'
import { serve } from '../helpers/http-client.js'

const app = Fastify({ logger: false })
t.teardown(() => app.close())
await app.register(mcp, { requestState: { secret: 'tasks-interop-secret-0123456789' } })
app.mcp.tool({ name: 'report', description: 'a report (a task for clients that take tasks)', taskSupport: 'optional' }, async () => 'the report')
const { url } = await serve(t, app)

t.test('v2 client pinned to 2026-07-28: an optional task tool answers inline', async t => {
  const client = new ModernClient({ name: 'tasks-v2', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } })
  await client.connect(new ModernTransport(new URL(url)))
  t.teardown(async () => { await client.close() })
  t.equal(client.getProtocolEra(), 'modern')
  t.ok((await client.listTools()).tools.some(x => x.name === 'report'), 'listed')
  t.match(await client.callTool({ name: 'report', arguments: {} }), { content: [{ type: 'text', text: 'the report' }] })
})

t.test('v1 client on 2025-11-25: the same tool answers inline', async t => {
  const client = new Client({ name: 'tasks-v1', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(url)))
  t.teardown(async () => { await client.close() })
  t.equal(client.getServerCapabilities()?.tasks, undefined, 'no core tasks advertised on the handshake era')
  t.match(await client.callTool({ name: 'report', arguments: {} }), { content: [{ type: 'text', text: 'the report' }] })
})
