/**
 * Interop with the official v2 client (`@modelcontextprotocol/client`, 2026-07-28 era): discovery,
 * lists, tool calls, multi-round-trip requests answered through the client's own request handlers
 * (elicitation, sampling, roots), progress and log notifications, `Mcp-Param-*` mirroring, cache
 * hints, and `subscriptions/listen`.
 */
import t, { type Test } from 'tap'
import { Type } from '@sinclair/typebox'
import { Client, ProtocolError, StreamableHTTPClientTransport, LOG_LEVEL_META_KEY } from '@modelcontextprotocol/client'
import type { FastifyInstance } from 'fastify'
import type { McpDecorator } from '../../../lib/index.js'
import { build, SECRET } from './fixtures/helper.js'
import { META_CAPS, META_SUB, META_VERSION, MODERN } from '../../helpers/wire.js'
import { sleep, until } from '../../helpers/time.js'

const SERVER_INFO = { name: 'v2-interop', version: '2.0.0' }
const nameSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } as const

interface Seen { method: string, headers: Record<string, string>, body: Record<string, any> }

function fixture (runs: Record<string, number>) {
  const ran = (n: string): void => { runs[n] = (runs[n] ?? 0) + 1 }
  return (m: McpDecorator): void => {
    m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => { ran('echo'); return text })
    m.tool({
      name: 'route',
      description: 'x-mcp-header parameters',
      input: Type.Object({ region: Type.String({ 'x-mcp-header': 'Region' }), shard: Type.Optional(Type.Integer({ 'x-mcp-header': 'Shard' })) })
    }, async ({ region, shard }) => { ran('route'); return `${region}/${String(shard)}` })
    m.tool({ name: 'ask', description: 'Elicits a name' }, async (_a, ctx) => {
      ran('ask')
      const r = await ctx.elicit('name', { message: 'Your name?', requestedSchema: nameSchema })
      return r.action === 'accept' ? `Hello, ${String(r.content?.name)}!` : `no: ${r.action}`
    })
    m.tool({ name: 'sample', description: 'Samples the client LLM', input: Type.Object({ q: Type.String() }) }, async ({ q }, ctx) => {
      ran('sample')
      const r = await ctx.sample('llm', { messages: [{ role: 'user', content: { type: 'text', text: q } }], maxTokens: 20 })
      return `LLM: ${(r.content as { text: string }).text} (${r.model})`
    })
    m.tool({ name: 'everything', description: 'Elicitation, sampling and roots in one round' }, async (_a, ctx) => {
      ran('everything')
      const [n, s, roots] = await Promise.all([
        ctx.elicit('name', { message: 'Your name?', requestedSchema: nameSchema }),
        ctx.sample('llm', { messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 5 }),
        ctx.roots('roots')
      ])
      return `${String(n.content?.name)}|${(s.content as { text: string }).text}|${roots.map(r => r.uri).join(',')}`
    })
    m.tool({ name: 'two_rounds', description: 'Two rounds with ctx.state' }, async (_a, ctx) => {
      ran('two_rounds')
      const state = (ctx as typeof ctx & { state: Record<string, unknown> }).state
      if (state.first === undefined) state.first = (await ctx.elicit('first', { message: 'First?', requestedSchema: nameSchema })).content?.name
      const second = await ctx.elicit('second', { message: 'Second?', requestedSchema: nameSchema })
      return `${String(state.first)} then ${String(second.content?.name)}`
    })
    m.tool({ name: 'progress', description: 'Progress and logs' }, async (_a, ctx) => {
      for (const p of [1, 2, 3]) await ctx.progress({ progress: p, total: 3 })
      await ctx.log('debug', 'quiet')
      await ctx.log('warning', 'loud')
      return 'done'
    })
    m.prompt({ name: 'greet', description: 'Elicits then greets' }, async (_args, ctx) => {
      ran('greet')
      const r = await ctx.elicit('name', { message: 'Your name?', requestedSchema: nameSchema })
      return [{ role: 'user', content: { type: 'text', text: `greet ${String(r.content?.name)}` } }]
    })
    m.resource({ uri: 'test://doc', name: 'doc', description: 'A document' }, async (uri) => { ran('doc'); return { uri, text: 'the doc' } })
    m.resource({ uri: 'test://secret', name: 'secret', description: 'Elicits before reading' }, async (uri, ctx) => {
      ran('secret')
      const r = await ctx.elicit('name', { message: 'Who?', requestedSchema: nameSchema })
      return { uri, text: `secret for ${String(r.content?.name)}` }
    })
  }
}

interface Harness {
  app: FastifyInstance
  url: URL
  runs: Record<string, number>
  /** Requests the client sent (modern POSTs), in order. */
  seen: Seen[]
  connect (opts?: ConstructorParameters<typeof Client>[1], register?: (c: Client) => void): Promise<Client>
}

async function harness (t: Test): Promise<Harness> {
  const runs: Record<string, number> = {}
  const app = await build(t, { plugin: { requestState: { secret: SECRET }, serverInfo: SERVER_INFO, keepAliveIntervalMs: 0 } }, fixture(runs))
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const url = new URL(`${address}/mcp`)
  const seen: Seen[] = []
  const clients: Client[] = []
  t.teardown(async () => { for (const c of clients) await c.close().catch(() => {}) })
  const recordingFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    if (init?.method === 'POST' && typeof init.body === 'string') {
      const headers: Record<string, string> = {}
      new Headers(init.headers).forEach((v, k) => { headers[k] = v })
      const body = JSON.parse(init.body) as Record<string, any>
      seen.push({ method: String(body.method ?? 'response'), headers, body })
    }
    return await fetch(input, init)
  }
  return {
    app,
    url,
    runs,
    seen,
    async connect (opts = {}, register) {
      const client = new Client({ name: 'v2-interop-client', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' }, ...opts })
      register?.(client)
      clients.push(client)
      await client.connect(new StreamableHTTPClientTransport(url, { fetch: recordingFetch }))
      return client
    }
  }
}

const textOf = (r: { content?: unknown }): string => ((r.content as Array<{ type: string, text: string }>)[0]).text

t.test('connect (auto and pinned), discover, list, call', async (t) => {
  const h = await harness(t)
  const client = await h.connect()
  t.equal(client.getProtocolEra(), 'modern')
  t.equal(client.getNegotiatedProtocolVersion(), MODERN)
  t.same(client.getServerVersion(), SERVER_INFO, 'serverInfo from _meta')
  const d = client.getDiscoverResult()
  t.same(d?.supportedVersions, [MODERN])
  t.ok(d?.capabilities.tools)
  t.equal(h.seen[0].method, 'server/discover', 'the probe is server/discover; no initialize')
  t.notOk(h.seen.some(s => s.method === 'initialize'))

  const tools = await client.listTools()
  t.same(tools.tools.map(x => x.name), ['echo', 'route', 'ask', 'sample', 'everything', 'two_rounds', 'progress'])
  t.same((await client.listPrompts()).prompts.map(p => p.name), ['greet'])
  t.same((await client.listResources()).resources.map(r => r.uri), ['test://doc', 'test://secret'])
  const r = await client.callTool({ name: 'echo', arguments: { text: 'hi' } })
  t.equal(textOf(r), 'hi')
  t.equal(r.isError, undefined)
  const doc = await client.readResource({ uri: 'test://doc' })
  t.same(doc.contents, [{ uri: 'test://doc', text: 'the doc' }])

  // Every request carried the envelope and the mirrored headers.
  for (const s of h.seen) {
    t.equal(s.headers['mcp-protocol-version'], MODERN, `${s.method}: MCP-Protocol-Version`)
    t.equal(s.headers['mcp-method'], s.method, `${s.method}: Mcp-Method`)
    t.equal(s.body.params?._meta?.[META_VERSION], MODERN)
    t.equal(s.headers['mcp-session-id'], undefined)
  }
  t.equal(h.seen.find(s => s.method === 'tools/call')?.headers['mcp-name'], 'echo')
  t.equal(h.seen.find(s => s.method === 'resources/read')?.headers['mcp-name'], 'test://doc')

  const pinned = await h.connect({ versionNegotiation: { mode: { pin: MODERN } } })
  t.equal(pinned.getProtocolEra(), 'modern')
  t.equal(textOf(await pinned.callTool({ name: 'echo', arguments: { text: 'pinned' } })), 'pinned')
})

t.test('cache hints are honoured: a fresh tools/list is served from the client cache', async (t) => {
  const h = await harness(t)
  const client = await h.connect()
  await client.listTools()
  await client.listTools()
  t.equal(h.seen.filter(s => s.method === 'tools/list').length, 1, 'ttlMs 60000, public: one request')
  await client.readResource({ uri: 'test://doc' })
  await client.readResource({ uri: 'test://doc' })
  t.equal(h.seen.filter(s => s.method === 'resources/read').length, 2, 'reads have ttlMs 0: never served from cache')
})

t.test('x-mcp-header parameters are mirrored by the client and accepted', async (t) => {
  const h = await harness(t)
  const client = await h.connect()
  await client.listTools()
  const r = await client.callTool({ name: 'route', arguments: { region: 'zürich', shard: 4 } })
  t.equal(textOf(r), 'zürich/4')
  const sent = h.seen.filter(s => s.method === 'tools/call').pop()!
  t.match(sent.headers['mcp-param-region'], /^=\?base64\?/, 'non-ASCII value sent base64-encoded')
  t.equal(sent.headers['mcp-param-shard'], '4')
  t.equal(textOf(await client.callTool({ name: 'route', arguments: { region: 'eu' } })), 'eu/undefined')
  t.equal(h.runs.route, 2)
})

t.test('elicitation round trip through input_required (tools/call, prompts/get, resources/read)', async (t) => {
  const h = await harness(t)
  const asked: Array<Record<string, any>> = []
  const client = await h.connect({ capabilities: { elicitation: { form: {} } } }, (c) => {
    c.setRequestHandler('elicitation/create', async (req) => {
      asked.push(req.params)
      return { action: 'accept', content: { name: 'Ada' } }
    })
  })
  t.equal(textOf(await client.callTool({ name: 'ask', arguments: {} })), 'Hello, Ada!')
  t.equal(asked.length, 1)
  t.equal(asked[0].message, 'Your name?')
  t.equal(h.runs.ask, 2, 'the handler ran once per round')
  const calls = h.seen.filter(s => s.method === 'tools/call')
  t.equal(calls.length, 2)
  t.not(calls[0].body.id, calls[1].body.id, 'the retry has a new id')
  t.same(calls[1].body.params.inputResponses, { name: { action: 'accept', content: { name: 'Ada' } } })
  t.type(calls[1].body.params.requestState, 'string')
  t.same(calls[1].body.params._meta[META_CAPS], { elicitation: { form: {} } })

  const p = await client.getPrompt({ name: 'greet' })
  t.equal((p.messages[0].content as { text: string }).text, 'greet Ada')
  const s = await client.readResource({ uri: 'test://secret' })
  t.same(s.contents, [{ uri: 'test://secret', text: 'secret for Ada' }])
  t.same([h.runs.greet, h.runs.secret], [2, 2])
  // Several rounds, state carried by the server in requestState.
  t.equal(textOf(await client.callTool({ name: 'two_rounds', arguments: {} })), 'Ada then Ada')
  t.equal(h.runs.two_rounds, 3)
  t.equal(asked.length, 5)
})

t.test('a declined elicitation completes the call', async (t) => {
  const h = await harness(t)
  const client = await h.connect({ capabilities: { elicitation: {} } }, (c) => {
    c.setRequestHandler('elicitation/create', async () => ({ action: 'decline' }))
  })
  t.equal(textOf(await client.callTool({ name: 'ask', arguments: {} })), 'no: decline')
})

t.test('sampling and roots round trips (one input_required with several requests)', async (t) => {
  const h = await harness(t)
  const sampled: Array<Record<string, any>> = []
  const client = await h.connect({ capabilities: { sampling: {}, elicitation: {}, roots: {} } }, (c) => {
    c.setRequestHandler('sampling/createMessage', async (req) => {
      sampled.push(req.params)
      return { role: 'assistant', content: { type: 'text', text: 'Paris' }, model: 'test-model' }
    })
    c.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { name: 'Bo' } }))
    c.setRequestHandler('roots/list', async () => ({ roots: [{ uri: 'file:///w', name: 'w' }] }))
  })
  t.equal(textOf(await client.callTool({ name: 'sample', arguments: { q: 'Capital of France?' } })), 'LLM: Paris (test-model)')
  t.equal(sampled.length, 1)
  t.same(sampled[0].messages, [{ role: 'user', content: { type: 'text', text: 'Capital of France?' } }])
  t.equal(sampled[0].maxTokens, 20)
  t.equal(textOf(await client.callTool({ name: 'everything', arguments: {} })), 'Bo|Paris|file:///w')
  t.equal(h.runs.everything, 2, 'all three answered in one retry')
})

t.test('an undeclared capability surfaces as -32021', async (t) => {
  const h = await harness(t)
  const client = await h.connect()
  const err = await client.callTool({ name: 'sample', arguments: { q: '?' } }).then(() => null, (e: unknown) => e)
  t.ok(err instanceof ProtocolError, String(err))
  t.equal((err as ProtocolError).code, -32021)
  t.same((err as ProtocolError & { data?: unknown }).data, { requiredCapabilities: { sampling: {} } })
  t.equal(h.runs.sample, 1)
})

t.test('progress and per-request logging reach the client', async (t) => {
  const h = await harness(t)
  const logs: unknown[] = []
  const client = await h.connect({}, (c) => {
    c.setNotificationHandler('notifications/message', async (n) => { logs.push(n.params) })
  })
  const progress: unknown[] = []
  const r = await client.callTool({ name: 'progress', arguments: {}, _meta: { [LOG_LEVEL_META_KEY]: 'info' } }, {
    onprogress: (p) => { progress.push({ progress: p.progress, total: p.total }) }
  })
  t.equal(textOf(r), 'done')
  t.same(progress, [{ progress: 1, total: 3 }, { progress: 2, total: 3 }, { progress: 3, total: 3 }])
  t.same(logs.map(l => (l as { data: unknown }).data), ['loud'], 'only at or above the requested level')
  // Without a level: no log messages.
  logs.length = 0
  await client.callTool({ name: 'progress', arguments: {} })
  t.same(logs, [])
})

t.test('subscriptions/listen: tools list change, resource update, local close, graceful shutdown', async (t) => {
  const h = await harness(t)
  const events: Array<{ method: string, params?: Record<string, any> }> = []
  const client = await h.connect({}, (c) => {
    c.setNotificationHandler('notifications/tools/list_changed', async (n) => { events.push(n) })
    c.setNotificationHandler('notifications/prompts/list_changed', async (n) => { events.push(n) })
    c.setNotificationHandler('notifications/resources/updated', async (n) => { events.push(n) })
  })
  await client.listTools()
  const sub = await client.listen({ toolsListChanged: true, resourceSubscriptions: ['test://doc'] })
  t.same(sub.honoredFilter, { toolsListChanged: true, resourceSubscriptions: ['test://doc'] })
  const listen = h.seen.find(s => s.method === 'subscriptions/listen')!
  t.equal(listen.headers['mcp-method'], 'subscriptions/listen')

  h.app.mcp.tool({ name: 'late', description: 'Added while listening' }, async () => 'late')
  h.app.mcp.prompt({ name: 'late', description: 'Not subscribed' }, async () => [])
  h.app.mcp.resourceUpdated('test://doc')
  h.app.mcp.resourceUpdated('test://secret')
  // A marker the stream does carry, after what it must not: once it is here, the rest would be too.
  h.app.mcp.resourceUpdated('test://doc')
  // No throw here: the assertions below say what was missing.
  await until(() => events.length >= 3, { timeout: 1000 }).catch(() => {})
  t.same(events.map(e => e.method), ['notifications/tools/list_changed', 'notifications/resources/updated', 'notifications/resources/updated'])
  t.equal(events[1].params?.uri, 'test://doc')
  t.equal(events[2].params?.uri, 'test://doc', 'the marker; neither the prompt change nor test://secret before it')
  t.equal(events[0].params?._meta?.[META_SUB], listen.body.id, 'tagged with the listen request id')
  // The list change evicted the cached tools/list: the client fetches it again and sees the new tool.
  t.ok((await client.listTools()).tools.some(x => x.name === 'late'))
  t.equal(h.seen.filter(s => s.method === 'tools/list').length, 2)

  await sub.close()
  t.equal(await sub.closed, 'local')

  const second = await client.listen({ promptsListChanged: true })
  await h.app.close()
  t.equal(await Promise.race([second.closed, sleep(3000).then(() => 'timeout')]), 'graceful', 'the final result ends the subscription gracefully')
})
