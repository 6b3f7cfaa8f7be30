import t from 'tap'
import { IDEMPOTENCY_CAPABILITY } from '../../lib/features/capabilities.js'
import { Type } from '@sinclair/typebox'
import type { McpDecorator } from '../../lib/index.js'
import { build, call, initialize } from '../helpers/handshake-app.js'

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=='

function setup (m: McpDecorator): void {
  m.tool({
    name: 'greet',
    description: 'Greets',
    input: Type.Object({ name: Type.String({ minLength: 1 }), times: Type.Optional(Type.Integer({ minimum: 1, default: 1 })) })
  }, async ({ name, times }) => Array(times ?? 1).fill(`Hello, ${name}!`).join(' '))
  m.tool({
    name: 'stats',
    description: 'Structured output',
    input: Type.Object({ bad: Type.Optional(Type.Boolean()), omit: Type.Optional(Type.Boolean()) }),
    output: Type.Object({ count: Type.Integer(), label: Type.String() })
  }, async ({ bad, omit }) => {
    // `omit` and `bad` break the output schema on purpose (the types refuse both; the run-time
    // checks are what they exercise).
    type Stats = { count: number, label: string }
    if (omit === true) return { content: [{ type: 'text', text: 'nothing' }] } as unknown as { structuredContent: Stats }
    return { structuredContent: bad === true ? { count: 'three', label: 1 } as unknown as Stats : { count: 3, label: 'three' } }
  })
  m.tool({ name: 'explode', description: 'Throws' }, async () => {
    const err = new Error('database is down')
    err.stack = 'Error: database is down\n    at secretFunction (/srv/app/secret.js:1:1)'
    throw err
  })
  m.tool({ name: 'explode_empty', description: 'Throws without message' }, async () => { throw new Error('') })
  m.tool({ name: 'image', description: 'Image content' }, async () => [{ type: 'image', data: PNG, mimeType: 'image/png' }])
  m.tool({ name: 'own_error', description: 'Returns isError itself' }, async () => ({ content: [{ type: 'text', text: 'my error' }], isError: true }))

  m.resource({ uri: 'test://static', name: 'static', description: 'Static text', mimeType: 'text/plain' },
    async (uri) => ({ uri, mimeType: 'text/plain', text: 'static content' }))
  m.resource({ uri: 'test://blob', name: 'blob', description: 'Binary', mimeType: 'image/png' },
    async (uri) => ({ uri, mimeType: 'image/png', blob: PNG }))
  m.resource({ uri: 'test://broken', name: 'broken', description: 'Throws' }, async () => { throw new Error('secret path /etc/x') })
  m.prompt({ name: 'broken', description: 'Throws' }, async () => { throw new Error('secret prompt failure') })
  m.resource({ uri: 'test://multi', name: 'multi', description: 'Two contents' },
    async () => ({ contents: [{ uri: 'test://multi#1', text: 'one' }, { uri: 'test://multi#2', text: 'two' }] }) as never)
  m.resourceTemplate({
    uriTemplate: 'test://users/{userId}/files{/path}{?format,lang}',
    name: 'user-files',
    description: 'Files of a user',
    mimeType: 'application/json',
    complete: { userId: (value) => ['alice', 'albert', 'bob'].filter(u => u.startsWith(value)) }
  }, async (uri, vars) => ({ uri, mimeType: 'application/json', text: JSON.stringify(vars) }))

  m.prompt({
    name: 'review',
    description: 'Reviews code',
    arguments: [{ name: 'code', description: 'The code', required: true }, { name: 'style', description: 'Style' }],
    complete: {
      style: (value, { arguments: a }) => ['strict', 'relaxed', 'sarcastic', ...(a.code !== undefined ? ['code-aware'] : [])].filter(s => s.startsWith(value)),
      code: () => Array.from({ length: 150 }, (_, i) => `c${i}`)
    }
  }, async ({ code, style }) => [{ role: 'user', content: { type: 'text', text: `Review (${style ?? 'default'}): ${code}` } }])
  m.prompt({ name: 'simple', description: 'Simple prompt' }, async () => ({
    description: 'custom description',
    messages: [{ role: 'assistant', content: { type: 'text', text: 'hi' } }]
  }))
}

t.test('tools', async (t) => {
  const app = await build(t, {}, setup)
  const s = await initialize(app)

  const list = await call(app, s, 'tools/list', {}, { id: 'l' })
  t.equal(list.id, 'l')
  const greet = list.result.tools.find((x: { name: string }) => x.name === 'greet')
  t.same(greet.inputSchema.required, ['name'])
  t.equal(greet.inputSchema.type, 'object')
  t.equal(greet.description, 'Greets')
  const stats = list.result.tools.find((x: { name: string }) => x.name === 'stats')
  t.same(Object.keys(stats.outputSchema.properties).sort(), ['count', 'label'])
  const explode = list.result.tools.find((x: { name: string }) => x.name === 'explode')
  t.same(explode.inputSchema, { type: 'object', properties: {} }, 'no input → empty object schema')
  t.equal(list.result.nextCursor, undefined)

  const ok = await call(app, s, 'tools/call', { name: 'greet', arguments: { name: 'Ada', times: 2 } }, { id: 'g' })
  t.same(ok, { jsonrpc: '2.0', id: 'g', result: { content: [{ type: 'text', text: 'Hello, Ada! Hello, Ada!' }] } })

  const invalid = await call(app, s, 'tools/call', { name: 'greet', arguments: { name: '', times: 'two' } })
  t.equal(invalid.result.isError, true, 'invalid arguments → isError result')
  t.match(invalid.result.content[0].text, /Invalid arguments for tool "greet"/)
  t.equal(invalid.error, undefined)
  const missing = await call(app, s, 'tools/call', { name: 'greet' })
  t.equal(missing.result.isError, true, 'missing required argument → isError result')

  const structured = await call(app, s, 'tools/call', { name: 'stats', arguments: {} })
  t.same(structured.result.structuredContent, { count: 3, label: 'three' })
  t.same(structured.result.content, [{ type: 'text', text: '{"count":3,"label":"three"}' }], 'serialized JSON as text')
  t.notOk(structured.result.isError)

  const badOut = await call(app, s, 'tools/call', { name: 'stats', arguments: { bad: true } })
  t.equal(badOut.result.isError, true, 'output not matching outputSchema → isError')
  t.equal(badOut.result.structuredContent, undefined, 'the invalid structured content is not sent')
  const noOut = await call(app, s, 'tools/call', { name: 'stats', arguments: { omit: true } })
  t.equal(noOut.result.isError, true, 'no structuredContent with an outputSchema → isError')

  const thrown = await call(app, s, 'tools/call', { name: 'explode' })
  t.equal(thrown.result.isError, true)
  t.same(thrown.result.content, [{ type: 'text', text: 'database is down' }])
  t.notMatch(JSON.stringify(thrown), /secretFunction|secret\.js|\n\s+at /, 'no stack leaked')
  const thrownEmpty = await call(app, s, 'tools/call', { name: 'explode_empty' })
  t.same(thrownEmpty.result, { content: [{ type: 'text', text: 'Tool execution failed' }], isError: true })

  const own = await call(app, s, 'tools/call', { name: 'own_error' })
  t.same(own.result, { content: [{ type: 'text', text: 'my error' }], isError: true })

  const image = await call(app, s, 'tools/call', { name: 'image' })
  t.same(image.result.content, [{ type: 'image', data: PNG, mimeType: 'image/png' }])

  const unknown = await call(app, s, 'tools/call', { name: 'nope', arguments: {} }, { id: 'u' })
  t.equal(unknown.id, 'u')
  t.equal(unknown.error.code, -32602, 'unknown tool → -32602')
  t.equal(unknown.result, undefined)
  const noName = await call(app, s, 'tools/call', { arguments: {} })
  t.equal(noName.error.code, -32602)
  const badArgs = await call(app, s, 'tools/call', { name: 'greet', arguments: [1] })
  t.equal(badArgs.error.code, -32602, 'arguments not an object → -32602')
})

t.test('resources', async (t) => {
  const app = await build(t, {}, setup)
  const s = await initialize(app)
  t.same(s.result.capabilities, {
    logging: {},
    completions: {},
    tools: { listChanged: true },
    resources: { subscribe: true, listChanged: true },
    prompts: { listChanged: true },
    experimental: { 'fastify-mcp-http/idempotency': IDEMPOTENCY_CAPABILITY }
  })

  const list = await call(app, s, 'resources/list')
  t.same(list.result.resources.map((r: { uri: string }) => r.uri), ['test://static', 'test://blob', 'test://broken', 'test://multi'])
  t.same(list.result.resources[0], { uri: 'test://static', name: 'static', description: 'Static text', mimeType: 'text/plain' })
  const templates = await call(app, s, 'resources/templates/list')
  t.same(templates.result.resourceTemplates, [{
    uriTemplate: 'test://users/{userId}/files{/path}{?format,lang}', name: 'user-files', description: 'Files of a user', mimeType: 'application/json'
  }], 'completers are not listed')

  const text = await call(app, s, 'resources/read', { uri: 'test://static' })
  t.same(text.result, { contents: [{ uri: 'test://static', mimeType: 'text/plain', text: 'static content' }] })
  const blob = await call(app, s, 'resources/read', { uri: 'test://blob' })
  t.same(blob.result, { contents: [{ uri: 'test://blob', mimeType: 'image/png', blob: PNG }] })
  const multi = await call(app, s, 'resources/read', { uri: 'test://multi' })
  t.equal(multi.result.contents.length, 2)

  const tpl = await call(app, s, 'resources/read', { uri: 'test://users/al%20ice/files/report?format=pdf&lang=en' })
  t.equal(tpl.result.contents[0].uri, 'test://users/al%20ice/files/report?format=pdf&lang=en')
  t.same(JSON.parse(tpl.result.contents[0].text), { userId: 'al ice', path: 'report', format: 'pdf', lang: 'en' }, 'RFC 6570 variables, decoded')
  const tplNoOpt = await call(app, s, 'resources/read', { uri: 'test://users/bob/files' })
  t.same(JSON.parse(tplNoOpt.result.contents[0].text), { userId: 'bob' }, 'an absent {/path} expands to nothing (RFC 6570 §3.2.1)')
  const tplEmpty = await call(app, s, 'resources/read', { uri: 'test://users/bob/files/' })
  t.same(JSON.parse(tplEmpty.result.contents[0].text), { userId: 'bob', path: '' }, 'a present, empty {/path}')

  for (const uri of ['test://nope', 'test://users/bob/x', 'test://users/a/b/files']) {
    const nf = await call(app, s, 'resources/read', { uri }, { id: 'nf' })
    t.equal(nf.id, 'nf')
    t.equal(nf.error.code, -32002, `${uri} → -32002`)
    t.same(nf.error.data, { uri })
  }
  const broken = await call(app, s, 'resources/read', { uri: 'test://broken' }, { id: 'b' })
  t.same(broken, { jsonrpc: '2.0', id: 'b', error: { code: -32603, message: 'Internal error' } }, 'a failing resource handler leaks nothing')
  const noUri = await call(app, s, 'resources/read', {})
  t.equal(noUri.error.code, -32602)
})

t.test('prompts', async (t) => {
  const app = await build(t, {}, setup)
  const s = await initialize(app)
  const list = await call(app, s, 'prompts/list')
  t.same(list.result.prompts, [
    { name: 'broken', description: 'Throws' },
    { name: 'review', description: 'Reviews code', arguments: [{ name: 'code', description: 'The code', required: true }, { name: 'style', description: 'Style' }] },
    { name: 'simple', description: 'Simple prompt' }
  ])
  const got = await call(app, s, 'prompts/get', { name: 'review', arguments: { code: 'x = 1', style: 'strict' } })
  t.same(got.result, { description: 'Reviews code', messages: [{ role: 'user', content: { type: 'text', text: 'Review (strict): x = 1' } }] })
  const simple = await call(app, s, 'prompts/get', { name: 'simple' })
  t.same(simple.result, { description: 'custom description', messages: [{ role: 'assistant', content: { type: 'text', text: 'hi' } }] })

  const missing = await call(app, s, 'prompts/get', { name: 'review', arguments: { style: 'strict' } }, { id: 'm' })
  t.equal(missing.id, 'm')
  t.equal(missing.error.code, -32602, 'missing required argument → -32602')
  t.match(missing.error.message, /code/)
  const unknown = await call(app, s, 'prompts/get', { name: 'nope' })
  t.equal(unknown.error.code, -32602, 'unknown prompt → -32602')
  const broken = await call(app, s, 'prompts/get', { name: 'broken' }, { id: 'pb' })
  t.same(broken, { jsonrpc: '2.0', id: 'pb', error: { code: -32603, message: 'Internal error' } }, 'a failing prompt handler leaks nothing')
  const nonString = await call(app, s, 'prompts/get', { name: 'review', arguments: { code: 5 } })
  t.equal(nonString.error.code, -32602, 'non-string argument → -32602')
})

t.test('completion/complete', async (t) => {
  const app = await build(t, {}, setup)
  const s = await initialize(app)
  const c = await call(app, s, 'completion/complete', { ref: { type: 'ref/prompt', name: 'review' }, argument: { name: 'style', value: 's' } })
  t.same(c.result, { completion: { values: ['strict', 'sarcastic'], total: 2, hasMore: false } })
  const ctx = await call(app, s, 'completion/complete', { ref: { type: 'ref/prompt', name: 'review' }, argument: { name: 'style', value: 'c' }, context: { arguments: { code: 'x' } } })
  t.same(ctx.result.completion.values, ['code-aware'], 'context arguments reach the completer')
  const capped = await call(app, s, 'completion/complete', { ref: { type: 'ref/prompt', name: 'review' }, argument: { name: 'code', value: '' } })
  t.equal(capped.result.completion.values.length, 100, 'at most 100 values')
  t.equal(capped.result.completion.total, 150)
  t.equal(capped.result.completion.hasMore, true)
  const tpl = await call(app, s, 'completion/complete', { ref: { type: 'ref/resource', uri: 'test://users/{userId}/files{/path}{?format,lang}' }, argument: { name: 'userId', value: 'al' } })
  t.same(tpl.result.completion.values, ['alice', 'albert'])
  const none = await call(app, s, 'completion/complete', { ref: { type: 'ref/prompt', name: 'simple' }, argument: { name: 'x', value: '' } })
  t.same(none.result.completion.values, [], 'no completer → empty values')
  const unknown = await call(app, s, 'completion/complete', { ref: { type: 'ref/prompt', name: 'nope' }, argument: { name: 'x', value: '' } })
  t.equal(unknown.error.code, -32602)
  const badRef = await call(app, s, 'completion/complete', { ref: { type: 'ref/other' }, argument: { name: 'x', value: '' } })
  t.equal(badRef.error.code, -32602)
})

t.test('pagination', async (t) => {
  const app = await build(t, { pageSize: 1 }, setup)
  const s = await initialize(app)
  const names: string[] = []
  let cursor: string | undefined
  let pages = 0
  do {
    const page = await call(app, s, 'tools/list', cursor === undefined ? {} : { cursor })
    t.equal(page.result.tools.length, 1, 'one per page')
    names.push(page.result.tools[0].name)
    cursor = page.result.nextCursor
    pages++
  } while (cursor !== undefined && pages < 20)
  t.same(names, ['greet', 'stats', 'explode', 'explode_empty', 'image', 'own_error'], 'every tool exactly once, in order')

  const prompts1 = await call(app, s, 'prompts/list')
  t.equal(prompts1.result.prompts[0].name, 'broken')
  const prompts2 = await call(app, s, 'prompts/list', { cursor: prompts1.result.nextCursor })
  t.equal(prompts2.result.prompts[0].name, 'review')
  const prompts3 = await call(app, s, 'prompts/list', { cursor: prompts2.result.nextCursor })
  t.equal(prompts3.result.prompts[0].name, 'simple')
  t.equal(prompts3.result.nextCursor, undefined, 'no cursor on the last page')

  const toolsCursor = (await call(app, s, 'tools/list')).result.nextCursor
  const crossList = await call(app, s, 'prompts/list', { cursor: toolsCursor }, { id: 'x' })
  t.equal(crossList.error.code, -32602, 'a cursor of another list → -32602')
  t.equal(crossList.id, 'x')
  for (const cursor of ['garbage', 123, Buffer.from(JSON.stringify(['tools', 999])).toString('base64url'), Buffer.from(JSON.stringify(['tools', -1])).toString('base64url')]) {
    const bad = await call(app, s, 'tools/list', { cursor })
    t.equal(bad.error?.code, -32602, `cursor ${JSON.stringify(cursor)} → -32602`)
  }
  const rlist = await call(app, s, 'resources/list')
  t.ok(rlist.result.nextCursor)
  const tlist = await call(app, s, 'resources/templates/list')
  t.equal(tlist.result.nextCursor, undefined)
})

t.test('definitions added or removed at run time', async (t) => {
  const app = await build(t, {}, setup)
  const s = await initialize(app)
  app.mcp.tool({ name: 'late', description: 'Added late' }, async () => 'late!')
  t.equal((await call(app, s, 'tools/call', { name: 'late' })).result.content[0].text, 'late!')
  t.equal(app.mcp.removeTool('late'), true)
  t.equal((await call(app, s, 'tools/call', { name: 'late' })).error.code, -32602)
})
