/**
 * Interop with the official TypeScript client (`@modelcontextprotocol/sdk` 1.x, Streamable HTTP):
 * the demo server (examples/server.ts) plus a few purpose-built tools, over a real socket.
 */
import t from 'tap'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
  type Progress
} from '@modelcontextprotocol/sdk/types.js'
import { buildDemo } from '../../examples/server.js'
import type { McpContext } from '../../lib/index.js'
import { sleep, until } from '../helpers/time.js'

/** Records of what the server-side handlers saw. */
const seen = {
  /** JSON-RPC ids of slow_count runs whose ctx.signal aborted, with the reason. */
  aborted: new Map<string | number, string>(),
  /** slow_count runs that finished normally. */
  completed: 0,
  /** slow_count runs that are over, however they ended. */
  settled: 0
}

// buildDemo's declared return type (ReturnType<typeof Fastify>) loses the `mcp` decorator's type.
const app = await buildDemo({ logger: false }) as unknown as FastifyInstance

// Wrap the demo's slow_count to record, server-side, that the client's cancellation reached ctx.signal.
const slow = app.mcp.tools.get('slow_count')
if (slow === undefined) throw new Error('the demo has no slow_count tool')
const slowHandler = slow.handler
slow.handler = async (args: Record<string, unknown>, ctx: McpContext) => {
  ctx.signal.addEventListener('abort', () => {
    seen.aborted.set(ctx.requestId, String((ctx.signal.reason as Error | undefined)?.message ?? ctx.signal.reason))
  }, { once: true })
  try {
    const result = await slowHandler(args, ctx)
    seen.completed++
    return result
  } finally {
    seen.settled++
  }
}

app.mcp.tool({ name: 'ask_llm', description: 'Asks the client LLM (sampling).' }, async (_args, ctx) => {
  const r = await ctx.sample('llm', {
    messages: [{ role: 'user', content: { type: 'text', text: 'What is 2 + 2?' } }],
    maxTokens: 20
  })
  const content = r.content as { type?: string, text?: string }
  return `${r.model} said: ${content.text ?? ''}`
})

app.mcp.tool({ name: 'list_roots', description: 'Lists the client roots.' }, async (_args, ctx) => {
  const roots = await ctx.roots('roots')
  return { content: [{ type: 'text', text: roots.map(r => r.uri).join(',') }], structuredContent: { roots } }
})

app.mcp.tool({ name: 'drop_stream', description: 'Drops its SSE connection mid-call, then goes on.' }, async (_args, ctx) => {
  await ctx.progress({ progress: 1, total: 5, message: 'before the drop' })
  ctx.closeSSEStream(50)
  for (let i = 2; i <= 5; i++) {
    await sleep(40)
    await ctx.progress({ progress: i, total: 5, message: `after the drop ${i}` })
  }
  return 'survived the drop'
})

let note = 'first'
app.mcp.resource({ uri: 'demo://note', name: 'note', description: 'A note that changes.', mimeType: 'text/plain' },
  async (uri) => ({ uri, mimeType: 'text/plain', text: note }))

/** Every HTTP request the server received (method + the headers the tests look at). */
const requests: Array<{ method: string, sid: string | undefined, lastEventId: string | undefined }> = []
app.server.prependListener('request', (req) => {
  requests.push({
    method: req.method ?? '',
    sid: req.headers['mcp-session-id'] as string | undefined,
    lastEventId: req.headers['last-event-id'] as string | undefined
  })
})

await app.listen({ port: 0, host: '127.0.0.1' })
const url = new URL(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp`)

const clients: Client[] = []

/** Connects a new SDK client; closed at teardown. */
async function connect (capabilities: Record<string, unknown> = {}, setup?: (c: Client) => void): Promise<{ client: Client, transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name: 'interop-test', version: '1.0.0' }, { capabilities })
  setup?.(client)
  const transport = new StreamableHTTPClientTransport(url)
  clients.push(client)
  await client.connect(transport)
  return { client, transport }
}

/** Waits until the SDK opened its standalone GET stream: one more than `before` are open. */
async function getStreamOpen (before: number): Promise<void> {
  await until(() => app.mcp.status().getStreams > before, { timeout: 5000, what: 'the GET stream' })
}

t.teardown(async () => {
  for (const c of clients) await c.close().catch(() => {})
  await app.close()
})

t.test('connect: initialize handshake, session id, server info', async t => {
  const { client, transport } = await connect()
  t.type(transport.sessionId, 'string')
  t.match(transport.sessionId, /^[\x21-\x7E]+$/, 'session id is visible ASCII')
  t.equal(transport.protocolVersion, '2025-11-25', 'negotiated the latest revision')
  t.same(client.getServerVersion(), { name: 'fastify-mcp-http-demo', version: '1.0.0' })
  const caps = client.getServerCapabilities()
  t.ok(caps?.tools, 'tools capability')
  t.ok(caps?.resources?.subscribe, 'resources.subscribe capability')
  await client.ping()
})

t.test('listTools', async t => {
  const { client } = await connect()
  const { tools } = await client.listTools()
  const names = tools.map(x => x.name)
  for (const n of ['counter_add', 'counter_get', 'ask_name', 'slow_count', 'ask_llm', 'list_roots', 'drop_stream']) {
    t.ok(names.includes(n), `lists ${n}`)
  }
  const add = tools.find(x => x.name === 'counter_add')!
  t.equal(add.inputSchema.type, 'object')
  t.ok(add.outputSchema, 'counter_add has an outputSchema')
})

t.test('callTool: counter_add twice, counter_get returns the sum (structuredContent)', async t => {
  const { client } = await connect()
  await client.listTools() // lets the SDK validate structuredContent against outputSchema
  const a = await client.callTool({ name: 'counter_add', arguments: { by: 3 } })
  t.same(a.structuredContent, { counter: 3 })
  const b = await client.callTool({ name: 'counter_add', arguments: { by: 4, delayMs: 20 } })
  t.same(b.structuredContent, { counter: 7 })
  const g = await client.callTool({ name: 'counter_get', arguments: {} })
  t.same(g.structuredContent, { counter: 7 })
  t.same(g.content, [{ type: 'text', text: '7' }])
  t.notOk(g.isError)

  // The counter is per session.
  const other = await connect()
  const g2 = await other.client.callTool({ name: 'counter_get', arguments: {} })
  t.same(g2.structuredContent, { counter: 0 }, 'another session has its own counter')

  // Invalid arguments are a tool error, not a protocol error (SEP-1303).
  const bad = await client.callTool({ name: 'counter_add', arguments: { by: 'x' } })
  t.equal(bad.isError, true)
})

t.test('progress: onprogress receives increasing values from slow_count', async t => {
  const { client } = await connect()
  const progress: Progress[] = []
  const result = await client.callTool({ name: 'slow_count', arguments: { steps: 5, intervalMs: 10 } }, undefined, {
    onprogress: (p) => { progress.push(p) }
  })
  t.same(result.content, [{ type: 'text', text: 'Counted to 5.' }])
  t.same(progress.map(p => p.progress), [1, 2, 3, 4, 5])
  t.ok(progress.every(p => p.total === 5))
  t.equal(progress[0].message, 'step 1')
})

t.test('cancellation: aborting callTool sends notifications/cancelled and aborts ctx.signal', async t => {
  const { client } = await connect()
  const ac = new AbortController()
  const completedBefore = seen.completed
  const settledBefore = seen.settled
  const abortedBefore = seen.aborted.size
  let firstProgress = false
  const call = client.callTool({ name: 'slow_count', arguments: { steps: 100, intervalMs: 50 } }, undefined, {
    signal: ac.signal,
    onprogress: () => { firstProgress = true }
  })
  await until(() => firstProgress, { timeout: 5000, what: 'the first progress' })
  ac.abort(new Error('user gave up'))
  await t.rejects(call, /user gave up/, 'the client call rejects')
  await until(() => seen.aborted.size > abortedBefore, { timeout: 5000, what: 'the server-side abort' })
  const reason = [...seen.aborted.values()].at(-1)
  t.equal(reason, 'cancelled by the client', 'the handler\'s ctx.signal aborted because of the client')
  await until(() => seen.settled > settledBefore, { timeout: 5000, what: 'the cancelled handler to be over' })
  t.equal(seen.completed, completedBefore, 'the cancelled handler did not run to completion')
  // The session is still usable.
  const r = await client.callTool({ name: 'counter_get', arguments: {} })
  t.same(r.structuredContent, { counter: 0 })
})

t.test('elicitation answered by the client', async t => {
  const asked: unknown[] = []
  const { client } = await connect({ elicitation: {} }, (c) => {
    c.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params)
      return { action: 'accept', content: { name: 'Ada' } }
    })
  })
  const r = await client.callTool({ name: 'ask_name', arguments: {} })
  t.same(r.content, [{ type: 'text', text: 'Hello, Ada!' }])
  t.equal(asked.length, 1)
  t.match(asked[0], { message: 'What is your name?', requestedSchema: { type: 'object', required: ['name'] } })

  // Declined: the tool sees the action.
  const { client: c2 } = await connect({ elicitation: {} }, (c) => {
    c.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'decline' }))
  })
  const r2 = await c2.callTool({ name: 'ask_name', arguments: {} })
  t.same(r2.content, [{ type: 'text', text: 'No name given.' }])

  // Without the capability the tool fails (as a tool error), it never sends the request.
  const { client: c3 } = await connect()
  const r3 = await c3.callTool({ name: 'ask_name', arguments: {} })
  t.equal(r3.isError, true)
  t.match((r3.content as Array<{ text: string }>)[0].text, /elicitation/)
})

t.test('sampling answered by the client', async t => {
  const asked: unknown[] = []
  const { client } = await connect({ sampling: {} }, (c) => {
    c.setRequestHandler(CreateMessageRequestSchema, async (req) => {
      asked.push(req.params)
      return { role: 'assistant', content: { type: 'text', text: '4' }, model: 'test-model', stopReason: 'endTurn' }
    })
  })
  const r = await client.callTool({ name: 'ask_llm', arguments: {} })
  t.same(r.content, [{ type: 'text', text: 'test-model said: 4' }])
  t.match(asked, [{ maxTokens: 20, messages: [{ role: 'user', content: { type: 'text', text: 'What is 2 + 2?' } }] }])
})

t.test('roots answered by the client', async t => {
  const { client } = await connect({ roots: { listChanged: true } }, (c) => {
    c.setRequestHandler(ListRootsRequestSchema, async () => ({
      roots: [{ uri: 'file:///home/ada/project', name: 'project' }, { uri: 'file:///tmp' }]
    }))
  })
  const r = await client.callTool({ name: 'list_roots', arguments: {} })
  t.same(r.content, [{ type: 'text', text: 'file:///home/ada/project,file:///tmp' }])
  t.same(r.structuredContent, { roots: [{ uri: 'file:///home/ada/project', name: 'project' }, { uri: 'file:///tmp' }] })
  await client.sendRootsListChanged() // accepted (202), nothing to do
})

t.test('resumption: the server drops the stream mid-call, the client resumes with GET + Last-Event-ID', async t => {
  const { client, transport } = await connect()
  const errors: Error[] = []
  transport.onerror = (err) => { errors.push(err) }
  const progress: Progress[] = []
  const r = await client.callTool({ name: 'drop_stream', arguments: {} }, undefined, {
    onprogress: (p) => { progress.push(p) }
  })
  t.same(r.content, [{ type: 'text', text: 'survived the drop' }])
  t.same(progress.map(p => p.progress), [1, 2, 3, 4, 5], 'every progress event once, in order')
  t.same(progress.map(p => p.message), ['before the drop', 'after the drop 2', 'after the drop 3', 'after the drop 4', 'after the drop 5'])
  t.same(errors, [], 'no transport error')
  const resumes = requests.filter(r => r.method === 'GET' && r.sid === transport.sessionId && r.lastEventId !== undefined)
  t.equal(resumes.length, 1, 'the client resumed once with GET + Last-Event-ID')
  t.match(resumes[0]?.lastEventId, /^[A-Za-z0-9-]+_\d+$/, 'with an event id of the dropped stream')
})

t.test('terminateSession (DELETE), then calls fail', async t => {
  const { client, transport } = await connect()
  const sid = transport.sessionId!
  await client.callTool({ name: 'counter_add', arguments: { by: 1 } })
  await transport.terminateSession()
  t.ok(requests.some(r => r.method === 'DELETE' && r.sid === sid), 'the client sent DELETE with the session id')
  t.equal(transport.sessionId, undefined, 'the client forgot the session')
  // Without a session id the request is served without a session (docs/clients.md): a tool that
  // needs one says so, as a tool error the model reads.
  const without = await client.callTool({ name: 'counter_get', arguments: {} })
  t.equal(without.isError, true, 'a session-only tool called without the session answers isError')
  t.match((without.content as Array<{ text: string }>)[0].text, /send back the Mcp-Session-Id/)

  // A client still holding the terminated id gets 404 (so it knows to start a new session).
  const stale = new Client({ name: 'stale', version: '1.0.0' })
  const staleTransport = new StreamableHTTPClientTransport(url, { sessionId: sid })
  staleTransport.onerror = () => {}
  clients.push(stale)
  await stale.connect(staleTransport) // skips initialize: it has a session id
  const err = await stale.callTool({ name: 'counter_get', arguments: {} }).then(() => null, (e: unknown) => e)
  t.ok(err instanceof StreamableHTTPError, 'a StreamableHTTPError')
  t.equal((err as StreamableHTTPError).code, 404, 'HTTP 404')
  t.match((err as Error).message, /Session not found/)
})

t.test('list_changed: a tool added after start reaches the GET stream', async t => {
  let changed = 0
  const streams = app.mcp.status().getStreams
  const { client } = await connect({}, (c) => {
    c.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed++ })
  })
  await getStreamOpen(streams)
  app.mcp.tool({ name: 'late_tool', description: 'Added after start.' }, async () => 'late')
  t.teardown(() => { app.mcp.removeTool('late_tool') })
  await until(() => changed > 0, { timeout: 5000, what: 'notifications/tools/list_changed' })
  t.equal(changed, 1)
  const { tools } = await client.listTools()
  t.ok(tools.some(x => x.name === 'late_tool'), 'the new tool is listed')
  const r = await client.callTool({ name: 'late_tool', arguments: {} })
  t.same(r.content, [{ type: 'text', text: 'late' }])
})

t.test('resources: subscribe, then resourceUpdated notification', async t => {
  const updated: string[] = []
  const markers = new Set<string>()
  let streams = app.mcp.status().getStreams
  const { client } = await connect({}, (c) => {
    c.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { updated.push(n.params.uri) })
    c.setNotificationHandler(ToolListChangedNotificationSchema, () => { markers.add('subscribed') })
  })
  await getStreamOpen(streams)
  const { resources } = await client.listResources()
  t.same(resources.map(r => r.uri), ['demo://note'])
  t.same((await client.readResource({ uri: 'demo://note' })).contents, [{ uri: 'demo://note', mimeType: 'text/plain', text: 'first' }])
  await client.subscribeResource({ uri: 'demo://note' })

  // Another session, not subscribed, gets nothing.
  const otherUpdates: string[] = []
  streams = app.mcp.status().getStreams
  await connect({}, (c) => {
    c.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { otherUpdates.push(n.params.uri) })
    c.setNotificationHandler(ToolListChangedNotificationSchema, () => { markers.add('other') })
  })
  await getStreamOpen(streams)

  note = 'second'
  app.mcp.resourceUpdated('demo://note')
  await until(() => updated.length > 0, { timeout: 5000, what: 'notifications/resources/updated' })
  t.same(updated, ['demo://note'])
  t.same((await client.readResource({ uri: 'demo://note' })).contents, [{ uri: 'demo://note', mimeType: 'text/plain', text: 'second' }])

  await client.unsubscribeResource({ uri: 'demo://note' })
  app.mcp.resourceUpdated('demo://note')
  // A marker both sessions receive on the same stream after the update would have arrived.
  app.mcp.listChanged('tools')
  await until(() => markers.size === 2, { timeout: 5000, what: 'the marker on both GET streams' })
  t.same(updated, ['demo://note'], 'nothing after unsubscribe')
  t.same(otherUpdates, [], 'the unsubscribed session got nothing')
})
