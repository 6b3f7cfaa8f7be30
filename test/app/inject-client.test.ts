/**
 * injectClient: an in-process MCP client over app.inject(), for unit tests of an app's tools.
 * Both eras; elicitation, sampling and roots round trips; session state on the handshake era;
 * progress; errors; a stream the server closes early is resumed.
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { injectClient, McpError, MemorySessionLock, type InjectClientOptions, type McpDecorator, type McpPluginOptions } from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { build as buildApp, type TestLike } from '../helpers/handshake-app.js'

/** The demo tools, and tools that ask the client (twice, a sample, its roots) or close their stream. */
function clientTools (m: McpDecorator): void {
  registerDemoTools(m)
  m.tool({ name: 'two_questions', description: 'Asks twice' }, async (_a, ctx) => {
    // On 2026-07-28 the handler runs again for each answer: an earlier answer is kept in ctx.state.
    const state = (ctx as unknown as { state?: Record<string, unknown> }).state ?? {}
    if (state.color === undefined) {
      const color = await ctx.elicit('color', { message: 'Color?', requestedSchema: { type: 'object', properties: { color: { type: 'string' } } } })
      state.color = color.content?.color
    }
    const size = await ctx.elicit('size', { message: 'Size?', requestedSchema: { type: 'object', properties: { size: { type: 'string' } } } })
    return `${String(state.color)} ${String(size.content?.size)}`
  })
  m.tool({ name: 'summarize', description: 'Samples', input: Type.Object({ text: Type.String() }) }, async ({ text }, ctx) => {
    const r = await ctx.sample('s', { messages: [{ role: 'user', content: { type: 'text', text } }], maxTokens: 10 })
    return `model said: ${JSON.stringify(r.content)}`
  })
  m.tool({ name: 'where', description: 'Roots' }, async (_a, ctx) => (await ctx.roots('r')).map(r => r.uri).join(','))
  m.tool({ name: 'polling', description: 'Closes its stream, then answers' }, async (_a, ctx) => {
    await ctx.progress({ progress: 1 })
    ctx.closeSSEStream(0)
    await new Promise(resolve => setTimeout(resolve, 30))
    await ctx.progress({ progress: 2 })
    return 'after the reconnect'
  })
}

const build = async (t: TestLike, opts: McpPluginOptions = {}): Promise<FastifyInstance> =>
  await buildApp(t, { requestState: { secret: 'inject-client-test-secret' }, ...opts }, clientTools)

const answers: InjectClientOptions = {
  elicit: async (p) => {
    const props = Object.keys((p as { requestedSchema?: { properties?: object } }).requestedSchema?.properties ?? {})
    const values: Record<string, string> = { name: 'Ada', color: 'red', size: 'L' }
    return { action: 'accept', content: Object.fromEntries(props.map(k => [k, values[k]])) }
  },
  sample: async () => ({ role: 'assistant', content: { type: 'text', text: 'short' }, model: 'test-model' }),
  roots: [{ uri: 'file:///work' }]
}

for (const era of ['2025-11-25', '2026-07-28']) {
  t.test(`${era}: tools, elicitation, sampling and roots round trips`, async (t) => {
    const app = await build(t)
    const client = injectClient(app, { protocolVersion: era, ...answers })
    t.same((await client.callTool('ask_name')).content, [{ type: 'text', text: 'Hello, Ada!' }])
    t.same((await client.callTool('two_questions')).content, [{ type: 'text', text: 'red L' }])
    t.match((await client.callTool('summarize', { text: 'long text' })).content[0], { text: /short/ })
    t.same((await client.callTool('where')).content, [{ type: 'text', text: 'file:///work' }])
    t.equal((await client.listTools()).tools.length, 13, 'the official client\'s shape: { tools }')
    await client.close()
  })

  t.test(`${era}: progress notifications are collected`, async (t) => {
    const app = await build(t)
    const seen: string[] = []
    const client = injectClient(app, { protocolVersion: era, onNotification: (n) => { seen.push(n.method) } })
    const r = await client.callTool('slow_count', { steps: 3, intervalMs: 0 }, { progressToken: 'p1' })
    t.same(r.content, [{ type: 'text', text: 'Counted to 3.' }])
    t.same(client.notifications.map(n => n.params.progress), [1, 2, 3])
    t.same(seen, ['notifications/progress', 'notifications/progress', 'notifications/progress'])
  })

  t.test(`${era}: errors`, async (t) => {
    const app = await build(t)
    const client = injectClient(app, { protocolVersion: era })
    await t.rejects(client.callTool('no_such_tool'), { code: -32602 }, 'an unknown tool is a JSON-RPC error')
    const err = await client.callTool('no_such_tool').catch((e: unknown) => e)
    t.ok(err instanceof McpError)
    const ask = await client.callTool('ask_name').catch((e: unknown) => e)
    if (era === '2025-11-25') {
      t.match(ask, { isError: true }, 'no elicitation capability: a tool error the model sees')
    } else {
      t.match(ask, { code: -32021, status: 400 }, 'no elicitation capability: -32021')
    }
  })
}

t.test('handshake era: session state carries across calls (ctx.session), with and without a lock', async (t) => {
  for (const opts of [{}, { sessions: { lock: new MemorySessionLock() } }] as McpPluginOptions[]) {
    const app = await build(t, opts)
    const client = injectClient(app, answers)
    await client.callTool('counter_add', { by: 2 })
    const r = await client.callTool('counter_add', { by: 3 })
    t.same(r.structuredContent, { counter: 5 })
    t.equal((await client.callTool('ask_name')).content[0].text, 'Hello, Ada!', 'elicitation under the lock')
    t.same((await client.callTool('counter_get')).structuredContent, { counter: 5 })
    t.match(client.sessionId, /^[A-Za-z0-9_-]{20,}$/)
    const other = injectClient(app)
    t.same((await other.callTool('counter_get')).structuredContent, { counter: 0 }, 'another client, another session')
    await client.close()
    t.equal(client.sessionId, null)
  }
})

t.test('2026-07-28: no session; a tool that needs one says so, state goes on a handle', async (t) => {
  const app = await build(t)
  const client = injectClient(app, { protocolVersion: '2026-07-28' })
  const r = await client.callTool('counter_add', { by: 2 })
  t.equal(r.isError, true)
  t.match(r.content[0], { text: /needs a session/ })
  const basket = (await client.callTool('basket_create')).structuredContent?.basket as string
  await client.callTool('basket_add', { basket, item: 'pear' })
  t.same((await client.callTool('basket_add', { basket, item: 'fig' })).structuredContent, { count: 2 })
  t.same((await client.callTool('basket_get', { basket })).structuredContent, { items: ['pear', 'fig'] })
  t.equal(client.sessionId, null)
})

t.test('a stream the server closed is resumed (GET + Last-Event-ID)', async (t) => {
  const app = await build(t)
  const client = injectClient(app)
  const r = await client.callTool('polling', {}, { progressToken: 7 })
  t.same(r.content, [{ type: 'text', text: 'after the reconnect' }])
  t.same(client.notifications.map(n => n.params.progress), [1, 2])
})

t.test('the endpoint is found under prefixes; headers reach auth.authenticate', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  let inner: FastifyInstance | null = null
  await app.register(async (api) => {
    await api.register(mcp, {
      prefix: '/api',
      auth: { authenticate: (request) => request.headers.authorization === 'Bearer t' ? { id: 'alice' } : null }
    })
    api.mcp.tool({ name: 'whoami', description: 'Who' }, async (_a, ctx) => ctx.principal?.id ?? 'nobody')
    inner = api
  }, { prefix: '/v1' })
  await app.ready()
  // Found from the instance the plugin was registered on.
  t.equal((await injectClient(inner!, { headers: { authorization: 'Bearer t' } }).callTool('whoami')).content[0].text, 'alice')
  await t.rejects(injectClient(app).callTool('whoami'), /pass `path`/, 'the root app does not see an encapsulated app.mcp')
  const c = injectClient(app, { path: '/v1/api/mcp', headers: { authorization: 'Bearer t' } })
  t.equal((await c.callTool('whoami')).content[0].text, 'alice')
  await t.rejects(injectClient(app, { path: '/v1/api/mcp' }).callTool('whoami'), { code: -32600, status: 401 }, 'refusals reject with their status')
})

for (const era of ['2025-11-25', '2026-07-28']) {
  t.test(`${era}: resources, templates and prompts read and got, then removed; a notification sent`, async (t) => {
    const app = await buildApp(t, { requestState: { secret: 'inject-client-test-secret' } }, (m) => {
      m.resource({ uri: 'shop://catalog', name: 'catalog', description: 'The catalog' }, async (uri) => ({ uri, text: 'apples, pears' }))
      m.resourceTemplate({ uriTemplate: 'shop://orders/{id}', name: 'order', description: 'An order' }, async (uri, { id }) => ({ uri, text: `order ${String(id)}` }))
      m.prompt({ name: 'greet', description: 'Greets', arguments: [{ name: 'who', required: true }] }, async ({ who }) =>
        [{ role: 'user', content: { type: 'text', text: `Say hello to ${String(who)}` } }])
      m.prompt({ name: 'stays', description: 'Keeps prompts on the server' }, async () => [])
    })
    const client = injectClient(app, { protocolVersion: era })
    t.equal(client.protocolVersion, era)
    t.match((await client.readResource('shop://catalog')).contents, [{ uri: 'shop://catalog', text: 'apples, pears' }])
    t.match((await client.readResource('shop://orders/7')).contents, [{ uri: 'shop://orders/7', text: 'order 7' }])
    t.match((await client.getPrompt('greet', { who: 'Ada' })).messages, [{ role: 'user', content: { text: 'Say hello to Ada' } }])
    // A notification the server takes without an answer (the client's roots changed).
    await client.notify('notifications/roots/list_changed')
    t.equal(app.mcp.removeResourceTemplate('shop://orders/{id}'), true, 'the template was there')
    t.equal(app.mcp.removeResourceTemplate('shop://orders/{id}'), false, 'and is gone')
    t.equal(app.mcp.removePrompt('greet'), true, 'the prompt was there')
    t.equal(app.mcp.removePrompt('greet'), false, 'and is gone')
    await t.rejects(client.getPrompt('greet', { who: 'Ada' }), { code: -32602 }, 'a removed prompt is unknown')
    // -32002 on the handshake era, -32602 on 2026-07-28.
    await t.rejects(client.readResource('shop://orders/7'), { code: era === '2025-11-25' ? -32002 : -32602, message: /Resource not found/ }, 'a removed template reads nothing')
    await client.close()
  })
}
