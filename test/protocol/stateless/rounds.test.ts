/**
 * The 2026-07-28 wire's multi-round-trip requests: input_required, the retry with inputResponses,
 * ctx.state carried in the sealed requestState, and every way a requestState is refused.
 * Checklist: reference/mcp-spec.md §9 item 42.
 */
import t from 'tap'
import { Writable } from 'node:stream'
import { build, call, post, SECRET } from './fixtures/helper.js'
import { finalOf, META_SERVER, meta, rpc } from '../../helpers/wire.js'
import { sleep } from '../../helpers/time.js'
import { ALL_CAPS, app, ELICIT, fixture, nameSchema, retry, type Runs, SERVER_INFO } from './fixtures/wire-app.js'

// ─── multi-round-trip requests (item 42) ────────────────────────────────────────────────────

/** Retries `first` (an input_required answer to `body`) with `inputResponses`, a new id. */

t.test('input_required from tools/call, prompts/get and resources/read; retry completes', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const flows: Array<[Record<string, any>, (r: Record<string, any>) => unknown, unknown]> = [
    [rpc('tools/call', { name: 'ask', arguments: { greeting: 'Hi' } }, { caps: ELICIT }), r => r.content[0].text, 'Hi, Ada!'],
    [rpc('prompts/get', { name: 'greet', arguments: { lang: 'fr' } }, { caps: ELICIT }), r => r.messages[0].content.text, 'fr: hi Ada'],
    [rpc('resources/read', { uri: 'test://ask' }, { caps: ELICIT }), r => r.contents[0].text, 'for Ada']
  ]
  for (const [body, pick, want] of flows) {
    const res = await post(a, body)
    t.equal(res.statusCode, 200)
    const first = finalOf(res)
    t.equal(first.id, body.id)
    t.equal(first.result.resultType, 'input_required', body.method)
    t.same(first.result.inputRequests, { name: { method: 'elicitation/create', params: { message: 'Name?', requestedSchema: nameSchema } } })
    t.type(first.result.requestState, 'string')
    t.same(first.result._meta, { [META_SERVER]: SERVER_INFO })
    const second = finalOf(await post(a, retry(body, first, { name: { action: 'accept', content: { name: 'Ada' } } })))
    t.equal(second.result.resultType, 'complete', body.method)
    t.equal(pick(second.result), want)
    t.notOk('inputRequests' in second.result || 'requestState' in second.result)
    if (body.method === 'resources/read') t.equal(second.result.ttlMs, 0, 'the completed read carries its cache hint')
  }
  t.same(runs, { ask: 2, greet: 2, 'read-ask': 2 })
  // Other methods never answer input_required, whatever they carry.
  for (const method of ['tools/list', 'prompts/list', 'resources/list', 'server/discover']) {
    const r = await call(a, method, { inputResponses: { name: { action: 'accept' } } }, { caps: ALL_CAPS })
    t.equal(r.result.resultType, 'complete', method)
  }
  // The answer without requestState is still just an answer (nothing was sealed yet): it completes.
  const direct = await call(a, 'tools/call', { name: 'ask', arguments: {}, inputResponses: { name: { action: 'decline' } } }, { caps: ELICIT })
  t.equal(direct.result.content[0].text, 'Hello, undefined!')
})

t.test('several inputs at once; missing keys re-asked; extra keys ignored; bad shapes', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const body = rpc('tools/call', { name: 'multi' }, { caps: ALL_CAPS })
  const first = await call(a, 'tools/call', body.params, { caps: ALL_CAPS, id: body.id })
  t.equal(first.result.resultType, 'input_required')
  t.same(Object.keys(first.result.inputRequests).sort(), ['llm', 'name', 'roots'], 'Promise.all: every key in one input_required')
  t.same(first.result.inputRequests.llm.method, 'sampling/createMessage')
  t.same(first.result.inputRequests.roots, { method: 'roots/list', params: {} })
  t.equal(runs.multi, 1)

  const name = { action: 'accept', content: { name: 'Ada' } }
  const llm = { role: 'assistant', content: { type: 'text', text: 'yo' }, model: 'm' }
  const roots = { roots: [{ uri: 'file:///a' }, { uri: 'file:///b' }] }
  // Only one answer: a new input_required for the rest.
  const partial = finalOf(await post(a, retry(body, first, { name })))
  t.equal(partial.result.resultType, 'input_required')
  t.same(Object.keys(partial.result.inputRequests).sort(), ['llm', 'roots'])
  t.type(partial.result.requestState, 'string')
  // Wrong shapes for a key: asked again, not an error.
  const wrong = finalOf(await post(a, retry(body, first, { name: 'Ada', llm: { text: 'no content' }, roots: { roots: 'none' } })))
  t.equal(wrong.result.resultType, 'input_required')
  t.same(Object.keys(wrong.result.inputRequests).sort(), ['llm', 'name', 'roots'])
  // Everything, plus keys nobody asked for.
  const done = finalOf(await post(a, retry(body, partial, { name, llm, roots, extra: { anything: true }, 'other-key': 1 })))
  t.equal(done.result.resultType, 'complete', JSON.stringify(done))
  t.equal(done.result.content[0].text, 'Ada|yo|file:///a,file:///b')
  // inputResponses that is not an object → -32602, and the handler does not run.
  const before = runs.multi
  for (const bad of [[], 'x', 1, null, true, [name]]) {
    const res = await post(a, retry(body, first, bad))
    const b = res.json()
    t.equal(b.error?.code, -32602, `inputResponses ${JSON.stringify(bad)}`)
  }
  t.equal(runs.multi, before)
})

t.test('ctx.state is carried across rounds', async (t) => {
  const runs: Runs = {}
  const a = await app(t, runs)
  const body = rpc('tools/call', { name: 'stateful' }, { caps: ELICIT })
  const r1 = finalOf(await post(a, body))
  t.same(Object.keys(r1.result.inputRequests), ['first'])
  const r2 = finalOf(await post(a, retry(body, r1, { first: { action: 'accept', content: { name: 'A' } } })))
  t.same(Object.keys(r2.result.inputRequests), ['second'], 'first answered')
  // Round 3 answers only "second": "first" comes from the state, not from inputResponses.
  const r3 = finalOf(await post(a, retry(body, r2, { second: { action: 'accept', content: { name: 'B' } } })))
  t.equal(r3.result.content[0].text, 'A+B after 3 rounds')
  t.equal(runs.stateful, 3)
  // The state is sealed: readable payload, but not the secret.
  t.notMatch(r1.result.requestState, SECRET)
})

t.test('refused requestState: tampered, expired, other method, other params, other principal; the handler does not run', async (t) => {
  const runs: Runs = {}
  const principal = async (req: { headers: Record<string, unknown> }): Promise<{ id: string } | null> => {
    const u = req.headers['x-user']
    return typeof u === 'string' ? { id: u } : null
  }
  const a = await app(t, runs, { plugin: { requestState: { secret: SECRET }, auth: { authenticate: principal } } })
  const alice = { 'x-user': 'alice' }
  const bob = { 'x-user': 'bob' }
  const body = rpc('tools/call', { name: 'ask', arguments: { greeting: 'Hi' } }, { caps: ELICIT })
  const first = finalOf(await post(a, body, { headers: alice }))
  t.equal(first.result.resultType, 'input_required')
  const answer = { name: { action: 'accept', content: { name: 'Ada' } } }
  t.equal(runs.ask, 1)

  const refused = async (req: Record<string, any>, headers: Record<string, string>, what: string, reason: RegExp): Promise<void> => {
    const before = runs.ask ?? 0
    const beforeGreet = runs.greet ?? 0
    const res = await post(a, req, { headers })
    const b = res.json()
    t.ok(b.error !== undefined, `${what}: a JSON-RPC error (${res.body})`)
    t.equal(b.error?.code, -32602, what)
    t.match(b.error?.message, reason, what)
    t.equal(b.id, req.id, `${what}: id echoed`)
    t.equal(runs.ask ?? 0, before, `${what}: handler did not run`)
    t.equal(runs.greet ?? 0, beforeGreet, `${what}: no other handler ran`)
  }
  const state: string = first.result.requestState
  const [payload, mac] = state.split('.')
  const decoded = JSON.parse(Buffer.from(payload, 'base64url').toString())
  const forged = Buffer.from(JSON.stringify({ ...decoded, s: { admin: true } })).toString('base64url')
  const flip = (s: string, i: number): string => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1)
  const tampered: Array<[string, unknown]> = [
    ['payload changed, old mac', `${forged}.${mac}`],
    ['one payload char flipped', `${flip(payload, 5)}.${mac}`],
    ['one mac char flipped', `${payload}.${flip(mac, 3)}`],
    ['mac truncated', `${payload}.${mac.slice(0, 10)}`],
    ['no mac', payload],
    ['empty', ''],
    ['dot only', '.'],
    ['not a string', 12345],
    ['object', { state }],
    ['huge', 'x'.repeat(70_000)]
  ]
  for (const [what, rs] of tampered) {
    await refused(retry(body, first, answer, { requestState: rs }), alice, `tampered: ${what}`, /requestState/)
  }
  await refused(retry(body, first, answer), bob, 'other principal', /principal/)
  await refused(retry({ ...body, params: { ...body.params, arguments: { greeting: 'Yo' } } }, first, answer), alice, 'other params', /another request/)
  await refused(retry({ ...body, params: { ...body.params, name: 'stateful' } }, first, answer), alice, 'other tool', /another request/)
  const prompt = rpc('prompts/get', { name: 'greet', arguments: {} }, { caps: ELICIT })
  await refused(retry(prompt, first, answer), alice, 'other method', /another request/)
  // Key order and _meta do not matter: same request.
  const reordered = retry({ ...body, params: { arguments: { greeting: 'Hi' }, name: 'ask', _meta: meta(ELICIT, { progressToken: 'p' }) } }, first, answer)
  const ok = finalOf(await post(a, reordered, { headers: alice }))
  t.equal(ok.result?.content?.[0]?.text, 'Hi, Ada!', 'the genuine state from the same principal completes')
  t.equal(runs.ask, 2)

  // Expiry.
  const expRuns: Runs = {}
  const short = await app(t, expRuns, { plugin: { requestState: { secret: SECRET, ttlMs: 20 } } })
  const q = rpc('tools/call', { name: 'ask' }, { caps: ELICIT })
  const s1 = finalOf(await post(short, q))
  await sleep(40)
  const res = await post(short, retry(q, s1, answer))
  t.equal(res.json().error?.code, -32602)
  t.match(res.json().error?.message, /expired/)
  t.equal(expRuns.ask, 1, 'expired: handler did not run')
})

t.test('a ctx.state too large to come back: the round fails with -32603 and a log line naming ctx.state', async (t) => {
  const runs: Runs = {}
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, cb) { lines.push(JSON.parse(String(chunk))); cb() } })
  const a = await app(t, runs, { fastify: { logger: { level: 'error', stream } } })
  // Just under the limit (base64 grows it by a third): sealed, and it comes back.
  const small = rpc('tools/call', { name: 'hoard', arguments: { size: 40_000 } }, { caps: ELICIT })
  const r1 = finalOf(await post(a, small))
  t.equal(r1.result?.resultType, 'input_required')
  t.ok(r1.result.requestState.length > 50_000 && r1.result.requestState.length <= 65_536, `sealed ${String(r1.result.requestState.length)} characters`)
  const r2 = finalOf(await post(a, retry(small, r1, { name: { action: 'accept', content: { name: 'Ada' } } })))
  t.equal(r2.result?.content?.[0]?.text, 'kept 40000 for Ada', 'the sealed state was accepted back')

  // Over it: no input_required with a state the server itself would refuse.
  const big = rpc('tools/call', { name: 'hoard', arguments: { size: 60_000 } }, { id: 'big', caps: ELICIT })
  const res = await post(a, big)
  t.equal(res.statusCode, 200)
  t.same(finalOf(res), { jsonrpc: '2.0', id: 'big', error: { code: -32603, message: 'Internal error' } })
  const logged = lines.filter(l => l.level === 50 && /ctx\.state is too large/.test(l.err?.message ?? ''))
  t.equal(logged.length, 1, 'one error log line explains it')
  t.equal(logged[0]?.method, 'tools/call')
})

t.test('requestState.secret: shared by two instances; without it a line is logged once', async (t) => {
  const runsA: Runs = {}
  const runsB: Runs = {}
  const A = await app(t, runsA, { plugin: { requestState: { secret: SECRET } } })
  const B = await app(t, runsB, { plugin: { requestState: { secret: SECRET } } })
  const body = rpc('tools/call', { name: 'stateful' }, { caps: ELICIT })
  const r1 = finalOf(await post(A, body))
  const r2 = finalOf(await post(B, retry(body, r1, { first: { action: 'accept', content: { name: 'A' } } })))
  t.same(Object.keys(r2.result.inputRequests), ['second'], 'B accepted the state A sealed')
  const r3 = finalOf(await post(A, retry(body, r2, { second: { action: 'accept', content: { name: 'B' } } })))
  t.equal(r3.result.content[0].text, 'A+B after 3 rounds', 'and back to A')
  t.same([runsA.stateful, runsB.stateful], [2, 1])

  // Without the secret: each instance has its own random one, and says so once (at info: nothing
  // in these options shares sessions across processes; test/app/startup.test.ts has the warning).
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _enc, cb) { lines.push(JSON.parse(String(chunk))); cb() } })
  const runsC: Runs = {}
  const C = await build(t, { plugin: {}, fastify: { logger: { level: 'info', stream } } }, fixture(runsC))
  const D = await build(t, { plugin: {} }, fixture({}))
  const c1 = finalOf(await post(C, body))
  for (let i = 0; i < 3; i++) await post(C, rpc('tools/list'))
  const refused = (await post(D, retry(body, c1, { first: { action: 'accept', content: { name: 'A' } } }))).json()
  t.equal(refused.error?.code, -32602, 'another instance with another random secret refuses it')
  const said = lines.filter(l => /requestState\.secret/.test(l.msg))
  t.equal(said.length, 1, 'said once')
  t.equal(said[0]?.level, 30, 'at info for a single process')
  // With a secret: no warning.
  const quiet: Array<Record<string, any>> = []
  const qstream = new Writable({ write (chunk, _enc, cb) { quiet.push(JSON.parse(String(chunk))); cb() } })
  const E = await build(t, { plugin: { requestState: { secret: SECRET } }, fastify: { logger: { level: 'info', stream: qstream } } }, fixture({}))
  await post(E, rpc('tools/list'))
  t.equal(quiet.filter(l => /requestState\.secret/.test(l.msg ?? '')).length, 0)
})

t.test('requestState.secret rotation: a list seals with its first and opens with each, so no round in flight fails', async (t) => {
  const OLD = SECRET
  const NEW = 'the-new-request-state-secret-0123'
  const body = rpc('tools/call', { name: 'stateful' }, { caps: ELICIT })
  const answer = { first: { action: 'accept', content: { name: 'A' } } }
  const instance = async (secret: string | string[]): Promise<Awaited<ReturnType<typeof app>>> => await app(t, {}, { plugin: { requestState: { secret } } })
  const before = await instance(OLD) // not yet rotated
  const step1 = await instance([OLD, NEW]) // 1: every instance opens NEW, still seals OLD
  const step2 = await instance([NEW, OLD]) // 2: every instance seals NEW, still opens OLD
  const after = await instance([NEW]) // 3: once requestState.ttlMs has passed since step 2 ended
  const continued = async (sealer: typeof before, opener: typeof before): Promise<boolean> => {
    const first = finalOf(await post(sealer, body))
    const next = finalOf(await post(opener, retry(body, first, answer)))
    return next.result?.inputRequests?.second !== undefined
  }
  // During each step the instances of that step and of the step before serve one client in turns.
  t.ok(await continued(before, step1), 'step 1: a round sealed before opens')
  t.ok(await continued(step1, before), 'step 1: a round sealed at step 1 opens on an instance not yet changed')
  t.ok(await continued(step1, step2), 'step 2: a round sealed at step 1 opens')
  t.ok(await continued(step2, step1), 'step 2: a round sealed at step 2 opens on an instance still at step 1')
  t.ok(await continued(step2, after), 'step 3: a round sealed at step 2 opens')
  t.ok(await continued(after, step2), 'step 3: a round sealed at step 3 opens on an instance still at step 2')
  t.notOk(await continued(before, after), 'a state of the old secret alone is refused once it is dropped')
  const refused = finalOf(await post(after, retry(body, finalOf(await post(before, body)), answer)))
  t.match(refused.error?.message, /failed verification/)
})

t.test('requestState.secret: a list of 1 to 3 secrets of 16 characters or more', async (t) => {
  for (const bad of [[], ['short'], ['a-secret-of-enough-length', 7], Array(4).fill('a-secret-of-enough-length')]) {
    await t.rejects(build(t, { plugin: { requestState: { secret: bad as never } } }, fixture({})), { code: 'FST_ERR_MCP_INVALID_OPTION', message: /requestState\.secret/ }, JSON.stringify(bad).slice(0, 60))
  }
})
