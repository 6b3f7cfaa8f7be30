/**
 * The method table both wires dispatch through (lib/features/method-table.ts): which methods it
 * holds, the capability, context flag and cache kind of each row, what each handler returns
 * against a real Registry (with a minimal fake handler context), the era hooks a call carries
 * (`resourceNotFound`, `isProtocolError`), and the -32601 refusals (`needCapability`,
 * `methodNotFound`).
 */
import t from 'tap'
import type { FastifyBaseLogger } from 'fastify'
import type { McpContext } from '../../lib/context.js'
import { ErrorCode, McpError } from '../../lib/jsonrpc/errors.js'
import { METHODS, methodNotFound, needCapability, type MethodCall } from '../../lib/features/method-table.js'
import { Registry } from '../../lib/features/registry.js'

/** A handler context with only what the table's methods read (`signal`), and a mark to recognise it. */
function fakeContext (): McpContext & { mark: string } {
  return { signal: new AbortController().signal, mark: 'the fake ctx' } as unknown as McpContext & { mark: string }
}

/** A logger that keeps `error` lines (a failed tool is logged there). */
function fakeLog (): FastifyBaseLogger & { errors: Array<[Record<string, unknown>, string]> } {
  const errors: Array<[Record<string, unknown>, string]> = []
  const log = { errors, error: (obj: Record<string, unknown>, msg: string) => { errors.push([obj, msg]) } }
  return log as unknown as FastifyBaseLogger & { errors: Array<[Record<string, unknown>, string]> }
}

/** What each handler saw, to check the context reaches the user handlers. */
const seen: Record<string, unknown> = {}

function registry (): Registry {
  const r = new Registry()
  r.tool({ name: 'echo', description: 'Echoes', input: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } },
    async (args, ctx) => { seen.tool = ctx; return `echo: ${String(args.text)}` })
  r.resource({ uri: 'test://fixed', name: 'fixed', description: 'A fixed resource', mimeType: 'text/plain' },
    async (uri, ctx) => { seen.resource = ctx; return { uri, text: 'fixed text' } })
  r.resourceTemplate({
    uriTemplate: 'test://items/{id}',
    name: 'item',
    description: 'An item',
    complete: { id: (value) => ['a1', 'a2', 'b1'].filter(v => v.startsWith(value)) }
  }, async (uri, vars, ctx) => { seen.template = ctx; return { uri, text: `item ${vars.id}` } })
  r.prompt({
    name: 'greet',
    description: 'Greets',
    arguments: [{ name: 'who', required: true }],
    complete: { who: (value) => ['alice', 'albert', 'bob'].filter(v => v.startsWith(value)) }
  }, async (args, ctx) => { seen.prompt = ctx; return [{ role: 'user', content: { type: 'text', text: `hello ${args.who}` } }] })
  return r
}

function call (r: Registry, params: Record<string, unknown>, extra: Partial<MethodCall> = {}): MethodCall {
  return {
    registry: r,
    params,
    ctx: fakeContext(),
    principal: null,
    pageSize: 50,
    log: fakeLog(),
    resourceNotFound: (uri) => new McpError(-32002, `not found: ${uri}`),
    ...extra
  }
}

async function run (method: string, c: MethodCall): Promise<Record<string, unknown>> {
  const entry = METHODS.get(method)
  if (entry === undefined) throw new Error(`no row for ${method}`)
  return await entry.handler(c)
}

t.test('the rows: capability, context and cache kind', async t => {
  t.same(Object.fromEntries([...METHODS].map(([m, e]) => [m, { capability: e.capability, context: e.context, cache: e.cache ?? null }])), {
    'tools/list': { capability: 'tools', context: false, cache: 'tools' },
    'tools/call': { capability: 'tools', context: true, cache: null },
    'resources/list': { capability: 'resources', context: false, cache: 'resources' },
    'resources/templates/list': { capability: 'resources', context: false, cache: 'templates' },
    'resources/read': { capability: 'resources', context: true, cache: 'read' },
    'prompts/list': { capability: 'prompts', context: false, cache: 'prompts' },
    'prompts/get': { capability: 'prompts', context: true, cache: null },
    'completion/complete': { capability: 'completions', context: false, cache: null }
  }, 'exactly these methods')
  // The rule behind the rows, so that a new row cannot slip past it.
  for (const [method, entry] of METHODS) {
    const prefix = method.split('/')[0]
    t.equal(entry.capability, prefix === 'completion' ? 'completions' : prefix, `${method}: capability from its prefix`)
    t.equal(entry.context, ['tools/call', 'resources/read', 'prompts/get'].includes(method), `${method}: context only where a user handler runs`)
    t.equal('cache' in entry && entry.cache !== undefined, method.endsWith('/list') || method === 'resources/read', `${method}: cacheable only for lists and reads`)
  }
  // Era-only methods stay with their wire.
  for (const method of ['ping', 'initialize', 'logging/setLevel', 'resources/subscribe', 'server/discover']) t.equal(METHODS.has(method), false, method)
})

t.test('each handler against a real registry', async t => {
  const r = registry()
  const expected: Record<string, [Record<string, unknown>, Record<string, unknown>]> = {
    'tools/list': [{}, {
      tools: [{ name: 'echo', description: 'Echoes', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }]
    }],
    'tools/call': [{ name: 'echo', arguments: { text: 'hi' } }, { content: [{ type: 'text', text: 'echo: hi' }] }],
    'resources/list': [{}, { resources: [{ uri: 'test://fixed', name: 'fixed', description: 'A fixed resource', mimeType: 'text/plain' }] }],
    'resources/templates/list': [{}, { resourceTemplates: [{ uriTemplate: 'test://items/{id}', name: 'item', description: 'An item' }] }],
    'resources/read': [{ uri: 'test://fixed' }, { contents: [{ uri: 'test://fixed', text: 'fixed text' }] }],
    'prompts/list': [{}, { prompts: [{ name: 'greet', description: 'Greets', arguments: [{ name: 'who', required: true }] }] }],
    'prompts/get': [{ name: 'greet', arguments: { who: 'ann' } }, {
      description: 'Greets',
      messages: [{ role: 'user', content: { type: 'text', text: 'hello ann' } }]
    }],
    'completion/complete': [{ ref: { type: 'ref/prompt', name: 'greet' }, argument: { name: 'who', value: 'al' } }, {
      completion: { values: ['alice', 'albert'], total: 2, hasMore: false }
    }]
  }
  t.same(Object.keys(expected).sort(), [...METHODS.keys()].sort(), 'every row is called below')
  for (const [method, [params, result]] of Object.entries(expected)) {
    t.same(await run(method, call(r, params)), result, method)
  }
})

t.test('user handlers receive the context of the call', async t => {
  const r = registry()
  for (const [method, params, key] of [
    ['tools/call', { name: 'echo', arguments: { text: 'x' } }, 'tool'],
    ['resources/read', { uri: 'test://fixed' }, 'resource'],
    ['resources/read', { uri: 'test://items/7' }, 'template'],
    ['prompts/get', { name: 'greet', arguments: { who: 'x' } }, 'prompt']
  ] as const) {
    const c = call(r, params)
    await run(method, c)
    t.equal(seen[key], c.ctx, `${method} (${key})`)
  }
})

t.test('templates: read through the variables, completed through the template', async t => {
  const r = registry()
  t.same(await run('resources/read', call(r, { uri: 'test://items/42' })), { contents: [{ uri: 'test://items/42', text: 'item 42' }] })
  t.same(await run('completion/complete', call(r, { ref: { type: 'ref/resource', uri: 'test://items/{id}' }, argument: { name: 'id', value: 'a' } })),
    { completion: { values: ['a1', 'a2'], total: 2, hasMore: false } })
})

t.test('lists page by pageSize', async t => {
  const r = registry()
  r.tool({ name: 'second', description: 'Second' }, async () => 'two')
  const first = await run('tools/list', call(r, {}, { pageSize: 1 }))
  t.same((first.tools as Array<{ name: string }>).map(x => x.name), ['echo'])
  t.type(first.nextCursor, 'string')
  const second = await run('tools/list', call(r, { cursor: first.nextCursor }, { pageSize: 1 }))
  t.same((second.tools as Array<{ name: string }>).map(x => x.name), ['second'])
  t.equal(second.nextCursor, undefined, 'no cursor after the last page')
})

t.test('an unknown URI throws what the caller\'s resourceNotFound makes', async t => {
  const r = registry()
  const asked: string[] = []
  const mine = new McpError(-32602, 'mine')
  const c = call(r, { uri: 'test://nowhere' }, { resourceNotFound: (uri) => { asked.push(uri); return mine } })
  const err = await run('resources/read', c).catch((e: unknown) => e)
  t.equal(err, mine, 'the very error the caller made')
  t.same(asked, ['test://nowhere'])
  // Another era, another code: nothing in the table decides it.
  const other = await run('resources/read', call(r, { uri: 'test://nowhere' })).catch((e: unknown) => e) as McpError
  t.equal(other.code, -32002)
})

t.test('isProtocolError decides whether a tool\'s error is rethrown or becomes an isError result', async t => {
  class EraError extends Error {}
  const thrown: Error[] = []
  const r = new Registry()
  r.tool({ name: 'fails', description: 'Throws what it is told', input: { type: 'object', properties: { kind: { type: 'string' } } } }, async (args) => {
    const err = args.kind === 'era' ? new EraError('era refusal') : args.kind === 'mcp' ? new McpError(-32600, 'mcp refusal') : new Error('plain failure')
    thrown.push(err)
    throw err
  })
  const isEra = (err: unknown): boolean => err instanceof EraError

  // Without the hook: a handler failure is a tool result the model sees, and it is logged.
  let c = call(r, { name: 'fails', arguments: { kind: 'era' } })
  t.same(await run('tools/call', c), { content: [{ type: 'text', text: 'era refusal' }], isError: true })
  const log = c.log as ReturnType<typeof fakeLog>
  t.equal(log.errors.length, 1)
  t.equal(log.errors[0][0].err, thrown.at(-1))
  t.equal(log.errors[0][0].tool, 'fails')

  // With the hook picking it: rethrown as is, not logged as a tool failure.
  const asked: unknown[] = []
  c = call(r, { name: 'fails', arguments: { kind: 'era' } }, { isProtocolError: (err) => { asked.push(err); return isEra(err) } })
  t.equal(await run('tools/call', c).catch((e: unknown) => e), thrown.at(-1), 'rethrown')
  t.same(asked, [thrown.at(-1)], 'the hook saw the handler\'s error')
  t.equal((c.log as ReturnType<typeof fakeLog>).errors.length, 0)

  // The hook not picking it: a result again.
  c = call(r, { name: 'fails', arguments: { kind: 'plain' } }, { isProtocolError: isEra })
  t.same(await run('tools/call', c), { content: [{ type: 'text', text: 'plain failure' }], isError: true })

  // An McpError is a protocol error whatever the hook says.
  c = call(r, { name: 'fails', arguments: { kind: 'mcp' } }, { isProtocolError: () => false })
  t.equal(await run('tools/call', c).catch((e: unknown) => e), thrown.at(-1))
})

t.test('needCapability: -32601 with the given status without the capability, nothing with it', async t => {
  const caps = { tools: { listChanged: true }, completions: {} }
  t.doesNotThrow(() => { needCapability(caps, 'tools', 'tools/list') })
  t.doesNotThrow(() => { needCapability(caps, 'completions', 'completion/complete', 404) }, 'an empty object counts as offered')
  let err = (() => { try { needCapability(caps, 'prompts', 'prompts/get', 404) } catch (e) { return e } })() as McpError
  t.ok(err instanceof McpError)
  t.equal(err.code, ErrorCode.MethodNotFound)
  t.equal(err.code, -32601)
  t.equal(err.status, 404)
  t.match(err.message, /prompts\/get/)
  err = (() => { try { needCapability({}, 'resources', 'resources/read') } catch (e) { return e } })() as McpError
  t.equal(err.code, -32601)
  t.equal(err.status, undefined, 'no status unless given')
})

t.test('methodNotFound: -32601 naming the method, with the given status', async t => {
  const err = methodNotFound('nope/nothing', 404)
  t.ok(err instanceof McpError)
  t.equal(err.code, -32601)
  t.equal(err.status, 404)
  t.match(err.message, /nope\/nothing/)
  t.equal(methodNotFound('x').status, undefined)
})

t.test('tools/call refuses by rejecting, never by throwing (its handler is not an async function)', async t => {
  const entry = METHODS.get('tools/call')
  if (entry === undefined) throw new Error('no tools/call row')
  const refusals: Array<Record<string, unknown>> = [{ name: 42 }, { name: 'nope' }, { name: 'echo', arguments: [] }]
  for (const params of refusals) {
    let returned: unknown
    t.doesNotThrow(() => { returned = entry.handler(call(registry(), params)) }, `${JSON.stringify(params)}: no synchronous throw`)
    t.ok(returned instanceof Promise, 'a promise')
    await t.rejects(returned as Promise<unknown>, { code: ErrorCode.InvalidParams }, `${JSON.stringify(params)}: rejects with -32602`)
  }
})
