/**
 * The 2026-07-28 wire's results: server/discover, resultType and serverInfo, cache hints, not
 * found, and the client capabilities a request needs.
 * Checklist: reference/mcp-spec.md §9 items 34, 38–41 and 46.
 */
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { build, call, post, SECRET } from './fixtures/helper.js'
import { finalOf, META_SERVER, MODERN, rpc } from '../../helpers/wire.js'
import { ALL_CAPS, app, ELICIT, fixture, isError, type Runs, SERVER_INFO } from './fixtures/wire-app.js'

// ─── results (items 38–41, 46) ──────────────────────────────────────────────────────────────

t.test('server/discover and resultType + serverInfo on every result', async (t) => {
  const a = await app(t, {}, { plugin: { requestState: { secret: SECRET }, serverInfo: SERVER_INFO, instructions: 'Be nice' } })
  const d = await call(a, 'server/discover', {}, { id: 'd' })
  t.equal(d.id, 'd')
  t.same(d.result.supportedVersions, [MODERN])
  t.equal(d.result.resultType, 'complete')
  t.equal(d.result.instructions, 'Be nice')
  t.same(d.result._meta, { [META_SERVER]: SERVER_INFO })
  t.match(d.result.capabilities, { tools: { listChanged: true }, prompts: { listChanged: true }, resources: { subscribe: true, listChanged: true } })
  t.equal(d.result.ttlMs, 60_000)
  t.equal(d.result.cacheScope, 'public')
  t.notOk('protocolVersion' in d.result, 'no handshake fields')

  const requests: Array<[string, Record<string, unknown>, Record<string, unknown>?]> = [
    ['server/discover', {}],
    ['tools/list', {}],
    ['resources/list', {}],
    ['resources/templates/list', {}],
    ['prompts/list', {}],
    ['completion/complete', { ref: { type: 'ref/prompt', name: 'greet' }, argument: { name: 'lang', value: 'e' } }],
    ['tools/call', { name: 'echo', arguments: { text: 'x' } }],
    ['tools/call', { name: 'echo', arguments: { text: 42 } }],
    ['tools/call', { name: 'ask', arguments: {} }, ELICIT],
    ['prompts/get', { name: 'café' }],
    ['resources/read', { uri: 'test://static' }],
    ['resources/read', { uri: 'test://items/7' }]
  ]
  for (const [method, params, caps] of requests) {
    const res = await post(a, rpc(method, params, { caps }))
    t.equal(res.statusCode, 200, `${method}: ${res.body}`)
    const r = finalOf(res).result
    t.ok(r.resultType === 'complete' || r.resultType === 'input_required', `${method}: resultType ${String(r.resultType)}`)
    t.same(r._meta?.[META_SERVER], SERVER_INFO, `${method}: serverInfo`)
  }
  // Listing is deterministic and independent of earlier requests.
  const l1 = await call(a, 'tools/list')
  await call(a, 'tools/call', { name: 'echo', arguments: { text: 'x' } })
  const l2 = await call(a, 'tools/list', {}, { caps: ALL_CAPS })
  t.same(l1.result.tools, l2.result.tools)
  t.same(l1.result.tools.map((x: { name: string }) => x.name), ['echo', 'headers', 'ask', 'ask_url', 'multi', 'stateful', 'hoard', 'needs_sampling', 'needs_roots', 'chatty', 'streaming_ask'])
})

t.test('cache hints: defaults, the cache option, per-resource cache, private with auth', async (t) => {
  const hintsOf = async (a: FastifyInstance, headers?: Record<string, string>): Promise<Record<string, [unknown, unknown]>> => {
    const out: Record<string, [unknown, unknown]> = {}
    const reqs: Array<[string, string, Record<string, unknown>]> = [
      ['discover', 'server/discover', {}],
      ['tools', 'tools/list', {}],
      ['resources', 'resources/list', {}],
      ['templates', 'resources/templates/list', {}],
      ['prompts', 'prompts/list', {}],
      ['read', 'resources/read', { uri: 'test://static' }],
      ['readTemplate', 'resources/read', { uri: 'test://items/1' }],
      ['readOwn', 'resources/read', { uri: 'test://cached' }]
    ]
    for (const [k, method, params] of reqs) {
      const r = await call(a, method, params, { headers })
      t.ok(Number.isInteger(r.result.ttlMs) && r.result.ttlMs >= 0, `${k}: integer ttlMs`)
      out[k] = [r.result.ttlMs, r.result.cacheScope]
    }
    // Not cacheable: no hints.
    const c = await call(a, 'tools/call', { name: 'echo', arguments: { text: 'x' } }, { headers })
    t.notOk('ttlMs' in c.result || 'cacheScope' in c.result, 'tools/call has no cache hints')
    const g = await call(a, 'prompts/get', { name: 'café' }, { headers })
    t.notOk('ttlMs' in g.result, 'prompts/get has no cache hints')
    const ir = await call(a, 'resources/read', { uri: 'test://ask' }, { headers, caps: ELICIT })
    t.equal(ir.result.resultType, 'input_required')
    t.notOk('ttlMs' in ir.result || 'cacheScope' in ir.result, 'input_required is not cacheable')
    return out
  }
  const plain = await app(t)
  t.same(await hintsOf(plain), {
    discover: [60_000, 'public'],
    tools: [60_000, 'public'],
    resources: [60_000, 'public'],
    templates: [60_000, 'public'],
    prompts: [60_000, 'public'],
    read: [0, 'public'],
    readTemplate: [0, 'public'],
    readOwn: [42, 'private']
  })
  const configured = await app(t, {}, {
    plugin: {
      requestState: { secret: SECRET },
      cache: { discover: { ttlMs: 1 }, tools: { ttlMs: 5, cacheScope: 'private' }, templates: { cacheScope: 'private' }, read: { ttlMs: 1000 } }
    }
  })
  t.same(await hintsOf(configured), {
    discover: [1, 'public'],
    tools: [5, 'private'],
    resources: [60_000, 'public'],
    templates: [60_000, 'private'],
    prompts: [60_000, 'public'],
    read: [1000, 'public'],
    readTemplate: [1000, 'public'],
    readOwn: [42, 'private']
  })
  const authed = await app(t, {}, { plugin: { requestState: { secret: SECRET }, auth: { authenticate: async (req) => ({ id: String(req.headers['x-user'] ?? 'anon') }) } } })
  t.same(await hintsOf(authed, { 'x-user': 'alice' }), {
    discover: [60_000, 'private'],
    tools: [60_000, 'private'],
    resources: [60_000, 'private'],
    templates: [60_000, 'private'],
    prompts: [60_000, 'private'],
    read: [0, 'private'],
    readTemplate: [0, 'private'],
    readOwn: [42, 'private']
  })
  const explicitPublic = await app(t, {}, { plugin: { requestState: { secret: SECRET }, auth: { authenticate: async () => ({ id: 'u' }) }, cache: { tools: { cacheScope: 'public' } } } })
  t.equal((await call(explicitPublic, 'tools/list')).result.cacheScope, 'public', 'the option overrides the private default')
  // Every page of a list has the same scope.
  const paged = await build(t, { plugin: { requestState: { secret: SECRET }, pageSize: 2 } }, fixture({}))
  const p1 = await call(paged, 'tools/list')
  t.ok(p1.result.nextCursor)
  const p2 = await call(paged, 'tools/list', { cursor: p1.result.nextCursor })
  t.equal(p2.result.cacheScope, p1.result.cacheScope)
  t.equal(p2.result.ttlMs, p1.result.ttlMs)
})

t.test('resource not found → -32602 with data.uri', async (t) => {
  const a = await app(t)
  for (const uri of ['test://missing', 'test://items', 'other://static']) {
    const res = await post(a, rpc('resources/read', { uri }, { id: uri }))
    const body = res.json()
    t.equal(body.error?.code, -32602, uri)
    t.same(body.error.data, { uri })
    t.equal(body.id, uri)
    t.notOk('result' in body, 'never empty contents')
  }
})

// ─── capabilities (item 34) ─────────────────────────────────────────────────────────────────

t.test('needing an undeclared client capability → 400 -32021 with data.requiredCapabilities', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const cases: Array<[string, Record<string, unknown>, Record<string, unknown>]> = [
    ['needs_sampling', {}, { sampling: {} }],
    ['needs_sampling', { elicitation: {}, roots: {} }, { sampling: {} }],
    ['ask', {}, { elicitation: {} }],
    ['ask', { sampling: {} }, { elicitation: {} }],
    ['ask', { elicitation: { url: {} } }, { elicitation: { form: {} } }],
    ['ask_url', { elicitation: { form: {} } }, { elicitation: { url: {} } }],
    ['ask_url', { elicitation: {} }, { elicitation: { url: {} } }],
    ['ask_url', {}, { elicitation: { url: {} } }],
    ['needs_roots', { sampling: {} }, { roots: {} }]
  ]
  for (const [name, caps, required] of cases) {
    const id = `${name}-${JSON.stringify(caps)}`
    const body = isError(t, await post(a, rpc('tools/call', { name }, { id, caps })), 400, -32021, id, id)
    t.same(body.error.data, { requiredCapabilities: required }, `${id}: an object, not an array`)
  }
  t.same(runs, { needs_sampling: 2, ask: 3, ask_url: 3 }, 'the handlers ran up to the refused request (nothing was sent)')
  // Declared: input_required with only declared methods.
  const ok = await call(a, 'tools/call', { name: 'ask_url' }, { caps: { elicitation: { url: {} } } })
  t.equal(ok.result.resultType, 'input_required')
  t.same(ok.result.inputRequests.link, { method: 'elicitation/create', params: { mode: 'url', message: 'Open this', url: 'https://example.com/consent' } }, 'no elicitationId on this revision')
  const sampled = await call(a, 'tools/call', { name: 'needs_sampling' }, { caps: { sampling: {} } })
  t.equal(sampled.result.inputRequests.q.method, 'sampling/createMessage')
})
