/**
 * Property-based fuzzing of the 2026-07-28 wire through app.inject(): random `_meta` shapes,
 * headers that agree or disagree with the body, malformed base64 sentinels, forged / replayed /
 * expired / foreign `requestState`, `inputResponses` of wrong shapes and huge `_meta` within the
 * body limit. Invariants: never 5xx (nor an internal -32603), every 4xx body is a JSON-RPC error,
 * a handler never runs on a requestState the server did not verify, and the server still answers
 * a valid request afterwards. The bounds on client input (docs/errors-and-bounds.md, "Bounds") are fuzzed too: ids and
 * progress tokens around and past 256 characters, arguments nesting around and past 64 levels (up
 * to 100,000): a body nesting too deep is a 400 -32600 with id null, an over-long id or token is
 * never echoed, no answer is much larger than its request, nothing is logged at error level, and
 * the heap (this wire keeps nothing per request) grows by less than a bound over the run.
 *
 * Seed: env FC_SEED (default below); runs: env FC_RUNS (default 1100).
 */
import t from 'tap'
import { createHash, createHmac, randomUUID } from 'node:crypto'
import { Writable } from 'node:stream'
import v8 from 'node:v8'
import vm from 'node:vm'
import fc from 'fast-check'
import { Type } from '@sinclair/typebox'
import type { LightMyRequestResponse } from 'fastify'
import { StateSealer } from '../../../lib/protocol/stateless/request-state.js'
import { isHandshakeVersion } from '../../../lib/protocol/versions.js'
import { build, post, SECRET } from './fixtures/helper.js'
import { ACCEPT, b64, finalOf, modernHeaders, META_CAPS, META_CLIENT, META_LOG, META_VERSION, MODERN, messagesOf, rpc } from '../../helpers/wire.js'
import { deepMarker, textDepth, withDeep } from '../../helpers/json-depth.js'

/** Whether the engine takes this POST for the handshake era (as `isStatelessPost` decides). */
function isLegacyRequest (payload: string, version: string | undefined): boolean {
  let msg: any
  try { msg = JSON.parse(payload) } catch { msg = null }
  const meta = Array.isArray(msg) ? undefined : msg?.params?._meta
  if (typeof meta === 'object' && meta !== null && !Array.isArray(meta) && META_VERSION in meta) return false
  return version === undefined || isHandshakeVersion(version)
}

const SEED = Number(process.env.FC_SEED ?? 20260728)
const RUNS = Number(process.env.FC_RUNS ?? 1100)
const BODY_LIMIT = 1024 * 1024
/** The bounds under test. */
const MAX_DEPTH = 64
const MAX_ID_LENGTH = 256
const MAX_PROGRESS_TOKEN_LENGTH = 256
/** What an echoed over-long id or token would look like (they are runs of one letter). */
const LONG_ID_ECHO = 'i'.repeat(MAX_ID_LENGTH + 1)
const LONG_TOKEN_ECHO = 'p'.repeat(MAX_PROGRESS_TOKEN_LENGTH + 1)
/** An answer is at most this much larger than its request, plus the constant below. */
const AMPLIFICATION = 2
const AMPLIFICATION_SLACK = 16 * 1024
/** How much the heap may grow over the run, after a forced GC. */
const MAX_HEAP_GROWTH = 8 * 1024 * 1024

/** A full GC: `--expose-gc` turned on at run time, `gc` taken from a fresh context. */
v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void
function heapAfterGc (): number {
  gc()
  gc()
  return process.memoryUsage().heapUsed
}

const confirmSchema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }

t.test(`modern wire fuzz (seed ${SEED}, ${RUNS} runs)`, async (t) => {
  // ─── the server ────────────────────────────────────────────────────────────────────────────
  const issued = new Set<string>()
  const counters = { runs: 0, runsWithState: 0, violations: [] as string[] }
  const errors: Array<Record<string, any>> = []
  const stream = new Writable({ write (chunk, _e, cb) { errors.push(JSON.parse(String(chunk))); cb() } })
  const app = await build(t, {
    plugin: { requestState: { secret: SECRET }, bodyLimit: BODY_LIMIT },
    fastify: { logger: { level: 'error', stream } }
  }, (m) => {
    m.tool({
      name: 'guarded',
      description: 'A state-bearing tool: it asks for confirmation and carries a server-issued token',
      input: Type.Object({ n: Type.Optional(Type.Integer({ 'x-mcp-header': 'N' })), note: Type.Optional(Type.String({ 'x-mcp-header': 'Note' })) })
    }, async (_args, ctx) => {
      counters.runs++
      const state = (ctx as typeof ctx & { state: Record<string, unknown> }).state
      const raw = JSON.parse(String(ctx.request.body)) as { params?: Record<string, unknown> }
      // A handshake-era request (served without a session) never reads a requestState.
      const sentState = raw.params?.requestState !== undefined && !isLegacyRequest(String(ctx.request.body), ctx.request.headers['mcp-protocol-version'] as string | undefined)
      if (sentState) {
        counters.runsWithState++
        if (typeof state.token !== 'string' || !issued.has(state.token)) counters.violations.push(`ran on unverified state ${JSON.stringify(raw.params?.requestState).slice(0, 80)}`)
      } else if (Object.keys(state).length > 0) {
        counters.violations.push('state without a requestState')
      }
      if (state.token === undefined) {
        state.token = randomUUID()
        issued.add(state.token as string)
      }
      const r = await ctx.elicit('confirm', { message: 'Sure?', requestedSchema: confirmSchema })
      return `confirmed=${String(r.content?.ok)}`
    })
    m.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
    m.tool({ name: 'slowlog', description: 'Logs and reports progress' }, async (_a, ctx) => {
      await ctx.progress({ progress: 1 })
      await ctx.log('info', 'x')
      return 'ok'
    })
    m.prompt({ name: 'confirm', description: 'Asks for confirmation' }, async (_a, ctx) => {
      const r = await ctx.elicit('confirm', { message: 'Sure?', requestedSchema: confirmSchema })
      return [{ role: 'user', content: { type: 'text', text: String(r.action) } }]
    })
    m.resource({ uri: 'test://r', name: 'r', description: 'R' }, async (uri) => ({ uri, text: 'r' }))
  })

  // ─── genuine states to replay, and forgeries ───────────────────────────────────────────────
  const ELICIT = { elicitation: {} }
  const genuine: Array<{ state: string, method: string, params: Record<string, unknown> }> = []
  for (const args of [{}, { n: 1 }, { n: 2, note: 'a' }, { note: 'zürich' }]) {
    const params = { name: 'guarded', arguments: args }
    const r = finalOf(await post(app, rpc('tools/call', params, { caps: ELICIT }), { headers: paramHeaders(args) }))
    t.equal(r.result?.resultType, 'input_required', `seed state for ${JSON.stringify(args)}`)
    genuine.push({ state: r.result.requestState, method: 'tools/call', params })
  }
  const promptState = finalOf(await post(app, rpc('prompts/get', { name: 'confirm' }, { caps: ELICIT }))).result.requestState as string
  genuine.push({ state: promptState, method: 'prompts/get', params: { name: 'confirm' } })
  const baseline = counters.runs

  const [payload0, mac0] = genuine[1].state.split('.')
  const decoded0 = JSON.parse(Buffer.from(payload0, 'base64url').toString()) as Record<string, unknown>
  const otherSecret = new StateSealer('another-secret-0123456789abcdef', 600_000)
  const sameSecretExpired = new StateSealer(SECRET, -1000)
  const sameSecret = new StateSealer(SECRET, 600_000)
  const forgeries: string[] = [
    // Valid-looking payload, foreign or missing MAC.
    otherSecret.seal({ p: null, m: 'tools/call', d: decoded0.d as string, s: { token: 'forged' } }),
    `${Buffer.from(JSON.stringify({ ...decoded0, s: { token: 'forged' } })).toString('base64url')}.${mac0}`,
    `${Buffer.from(JSON.stringify({ ...decoded0, e: Date.now() + 1e9 })).toString('base64url')}.${mac0}`,
    // Genuine MAC, but expired or bound to another principal.
    sameSecretExpired.seal({ p: null, m: 'tools/call', d: decoded0.d as string, s: { token: 'expired' } }),
    sameSecret.seal({ p: 'mallory', m: 'tools/call', d: decoded0.d as string, s: { token: 'mallory' } }),
    sameSecret.seal({ p: null, m: 'prompts/get', d: decoded0.d as string, s: { token: 'other-method' } }),
    sameSecret.seal({ p: null, m: 'tools/call', d: 'other-digest', s: { token: 'other-params' } }),
    // Genuine MAC over a payload that is not the expected JSON shape.
    (() => { const body = Buffer.from('not json').toString('base64url'); return `${body}.${macOf(body)}` })(),
    (() => { const body = Buffer.from(JSON.stringify({ p: null, m: 'tools/call', d: decoded0.d, e: Date.now() + 1e6, s: null })).toString('base64url'); return `${body}.${macOf(body)}` })(),
    (() => { const body = Buffer.from(JSON.stringify({ p: null, m: 'tools/call', d: decoded0.d, e: 'never', s: {} })).toString('base64url'); return `${body}.${macOf(body)}` })(),
    '', '.', `${payload0}.`, `.${mac0}`, payload0, `${payload0}.${mac0}.extra`, `${payload0}.${mac0.slice(1)}`
  ]
  function macOf (body: string): string {
    // The MAC the server computes with SECRET (HMAC-SHA256 keyed by the SHA-256 of the secret).
    return createHmac('sha256', createHash('sha256').update(SECRET).digest()).update(body).digest('base64url')
  }

  // ─── arbitraries ───────────────────────────────────────────────────────────────────────────
  const long = (ch: string, ...lengths: number[]): fc.Arbitrary<string> => fc.noBias(fc.constantFrom(...lengths)).map(n => ch.repeat(n))
  const longId = long('i', MAX_ID_LENGTH, MAX_ID_LENGTH + 1, 100 * 1024)
  const longToken = long('p', MAX_PROGRESS_TOKEN_LENGTH, MAX_PROGRESS_TOKEN_LENGTH + 1, 64 * 1024, 900 * 1024)
  const deep = fc.noBias(fc.constantFrom(MAX_DEPTH - 4, MAX_DEPTH - 3, MAX_DEPTH, MAX_DEPTH + 1, 1_000, 100_000)).map(deepMarker)
  const safeText = fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCDEF0123456789-_./:=?+ '.split('')), maxLength: 24 })
  const anyJson = fc.jsonValue({ maxDepth: 3 })
  const version = fc.oneof(
    { weight: 16, arbitrary: fc.constant(MODERN) },
    { weight: 1, arbitrary: fc.constantFrom('2025-11-25', '2025-06-18', '2025-03-26', '2099-01-01', '', '2026-07-28 ') },
    { weight: 1, arbitrary: anyJson }
  )
  const caps = fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom({}, { elicitation: {} }, { elicitation: {} }, { elicitation: { url: {} } }, { sampling: {}, roots: {} }, { elicitation: { form: {} }, sampling: {} }) },
    { weight: 1, arbitrary: anyJson }
  )
  const metaArb = fc.oneof(
    {
      weight: 16,
      arbitrary: fc.record({
        [META_VERSION]: version,
        [META_CAPS]: caps,
        [META_CLIENT]: fc.oneof({ weight: 12, arbitrary: fc.constant({ name: 'fuzz', version: '1' }) }, { weight: 1, arbitrary: anyJson }),
        [META_LOG]: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('debug', 'info', 'emergency') }, { weight: 1, arbitrary: fc.constantFrom('verbose', 3, null, 'INFO') }),
        progressToken: fc.oneof({ weight: 4, arbitrary: fc.string({ maxLength: 8 }) }, { weight: 4, arbitrary: fc.integer() }, { weight: 1, arbitrary: longToken }),
        junk: anyJson,
        // Now and then a huge _meta, within the body limit.
        huge: fc.oneof({ weight: 30, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.integer({ min: 10_000, max: 900_000 }).map(n => 'x'.repeat(n)) })
      }, { requiredKeys: [META_VERSION, META_CAPS] })
    },
    { weight: 1, arbitrary: fc.record({ [META_VERSION]: version, [META_CAPS]: caps }, { requiredKeys: [] }) },
    { weight: 1, arbitrary: anyJson }
  )
  const args = fc.oneof(
    {
      weight: 4,
      arbitrary: fc.record({ n: fc.oneof(fc.integer({ min: -5, max: 5 }), fc.constant(null)), note: fc.oneof(safeText, fc.constant('zürich'), fc.constant(' pad ')) }, { requiredKeys: [] })
    },
    { weight: 1, arbitrary: anyJson },
    { weight: 1, arbitrary: deep.map(d => ({ deep: d })) }
  )
  const inputResponses = fc.oneof(
    fc.constant(undefined),
    fc.constant({ confirm: { action: 'accept', content: { ok: true } } }),
    fc.constant({ confirm: { action: 'accept', content: { ok: true } }, extra: [1, 2] }),
    fc.constantFrom([], 'yes', 0, null, true, { confirm: 'yes' }, { confirm: { action: 5 } }, { other: { action: 'accept' } }, [{ confirm: { action: 'accept' } }]),
    anyJson
  )
  const requestState = fc.oneof(
    { weight: 3, arbitrary: fc.constant(undefined) },
    { weight: 3, arbitrary: fc.record({ genuine: fc.integer({ min: 0, max: genuine.length - 1 }), own: fc.boolean() }) },
    { weight: 2, arbitrary: fc.record({ forged: fc.constantFrom(...forgeries), own: fc.boolean() }) },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.integer({ min: 0, max: genuine.length - 1 }), fc.nat(), fc.constantFrom(...'AB_-x0'.split(''))).map(([i, at, ch]) => {
        const s = genuine[i].state
        const k = at % s.length
        return { forged: s.slice(0, k) + (s[k] === ch ? 'Q' : ch) + s.slice(k + 1) }
      })
    },
    { weight: 1, arbitrary: anyJson.map(v => ({ forged: v })) }
  )
  const method = fc.oneof(
    { weight: 6, arbitrary: fc.constant('tools/call') },
    { weight: 3, arbitrary: fc.constantFrom('prompts/get', 'resources/read', 'tools/list', 'server/discover', 'prompts/list', 'resources/list', 'resources/templates/list', 'completion/complete') },
    { weight: 1, arbitrary: fc.constantFrom('initialize', 'ping', 'logging/setLevel', 'resources/subscribe', 'notifications/cancelled', 'x/y') }
  )
  const name = fc.oneof({ weight: 6, arbitrary: fc.constant('guarded') }, { weight: 2, arbitrary: fc.constantFrom('echo', 'slowlog', 'confirm', 'test://r', 'nope') }, { weight: 1, arbitrary: safeText })
  const malformedSentinel = fc.oneof(
    fc.constantFrom('=?base64?###?=', '=?base64?Z3VhcmRlZA?=', '=?base64?/w==?=', '=?base64?Z3Vh=cmRlZA==?=', '=?base64??=', '=?BASE64?Z3VhcmRlZA==?=', '=?base64?Z3VhcmRlZA==?'),
    safeText.map(s => `=?base64?${s}?=`)
  )
  /** What to do with one derived header: keep it, drop it, or replace it. */
  const headerEdit = fc.oneof(
    { weight: 40, arbitrary: fc.constant<{ kind: 'keep' }>({ kind: 'keep' }) },
    { weight: 1, arbitrary: fc.constant<{ kind: 'drop' }>({ kind: 'drop' }) },
    { weight: 1, arbitrary: safeText.map(v => ({ kind: 'set' as const, v })) },
    { weight: 1, arbitrary: malformedSentinel.map(v => ({ kind: 'set' as const, v })) },
    { weight: 1, arbitrary: fc.constant<{ kind: 'pad' }>({ kind: 'pad' }) }
  )
  const id = fc.oneof({ weight: 20, arbitrary: fc.oneof(fc.integer(), safeText) }, { weight: 1, arbitrary: fc.constantFrom(null, undefined, 1.5, { a: 1 }, true) }, { weight: 1, arbitrary: longId })
  const shape = fc.oneof(
    { weight: 30, arbitrary: fc.constant('request') },
    { weight: 1, arbitrary: fc.constantFrom('batch', 'garbage', 'response', 'no-params', 'params-array') }
  )
  const reqArb = fc.record({
    shape,
    id,
    method,
    name,
    args,
    meta: metaArb,
    inputResponses,
    requestState,
    edits: fc.record({
      'mcp-protocol-version': headerEdit,
      'mcp-method': headerEdit,
      'mcp-name': headerEdit,
      'mcp-param-n': headerEdit,
      'mcp-param-note': headerEdit
    }),
    extra: fc.record({
      'mcp-session-id': fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: safeText }),
      'last-event-id': fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: safeText }),
      accept: fc.oneof({ weight: 20, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom('text/event-stream', 'application/json', '*/*') }),
      'content-type': fc.oneof({ weight: 20, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom('text/plain', 'application/json; charset=utf-8') })
    }, { requiredKeys: [] })
  })

  // ─── the property ──────────────────────────────────────────────────────────────────────────
  let sent = 0
  let genuineSent = 0
  const heapBefore = heapAfterGc()
  /** Requests past each bound (the property must exercise them). */
  const bounded = { deep: 0, longId: 0, longToken: 0 }
  const statuses = new Map<number, number>()
  const reasons = new Map<string, number>()
  await fc.assert(fc.asyncProperty(reqArb, async (r) => {
    let methodName: string = r.method
    let params: Record<string, unknown> = { _meta: r.meta }
    if (methodName === 'tools/call' || methodName === 'prompts/get') { params.name = r.name; params.arguments = r.args }
    if (methodName === 'resources/read') params.uri = r.name
    if (methodName === 'completion/complete') { params.ref = { type: 'ref/prompt', name: r.name }; params.argument = r.args }
    if (r.inputResponses !== undefined) params.inputResponses = r.inputResponses
    if (r.requestState !== undefined) {
      if ('genuine' in r.requestState) {
        const g = genuine[r.requestState.genuine]
        // Half of the time on its own request (method and params), so verified states do get through.
        if (r.requestState.own) {
          methodName = g.method
          params = { _meta: params._meta, inputResponses: params.inputResponses, ...g.params }
        }
        params.requestState = g.state
        genuineSent++
      } else {
        // Forgeries are bound to genuine[1]'s request: half of the time, send them on it.
        if ('own' in r.requestState && r.requestState.own) {
          methodName = 'tools/call'
          params = { _meta: params._meta, inputResponses: params.inputResponses, ...genuine[1].params }
        }
        params.requestState = r.requestState.forged
      }
    }
    const msg: Record<string, any> = { jsonrpc: '2.0', method: methodName, params }
    if (r.id !== undefined) msg.id = r.id
    const headers = modernHeaders(msg)
    Object.assign(headers, paramHeaders(msg.params.arguments))
    for (const [k, e] of Object.entries(r.edits)) {
      if (e.kind === 'drop') delete headers[k]
      else if (e.kind === 'set') headers[k] = e.v
      else if (e.kind === 'pad' && headers[k] !== undefined) headers[k] = `  ${headers[k]} `
    }
    for (const [k, v] of Object.entries(r.extra)) if (v !== undefined) headers[k] = v
    let payload: string
    switch (r.shape) {
      case 'batch': payload = JSON.stringify([msg, msg]); break
      case 'garbage': payload = JSON.stringify(msg).slice(0, 17); break
      case 'response': payload = JSON.stringify({ jsonrpc: '2.0', id: r.id ?? 1, result: { _meta: r.meta } }); break
      case 'no-params': payload = JSON.stringify({ jsonrpc: '2.0', id: r.id ?? 1, method: methodName }); break
      case 'params-array': payload = JSON.stringify({ ...msg, params: [params] }); break
      default: payload = JSON.stringify(msg)
    }
    payload = withDeep(payload)
    sent++
    const res = await app.inject({ method: 'POST', url: '/mcp', headers, payload })
    statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1)
    // Neither `_meta` nor the header names 2026-07-28 and no session is named: a handshake-era
    // request, served without a session (docs/clients.md): its results have no resultType.
    checkResponse(res, payload, isLegacyRequest(payload, headers['mcp-protocol-version']))
  }), { seed: SEED, numRuns: RUNS, endOnFailure: true })

  function checkResponse (res: LightMyRequestResponse, payload: string, legacy: boolean): void {
    const size = payload.length
    const depth = textDepth(payload)
    if (depth > MAX_DEPTH) bounded.deep++
    if (payload.includes(LONG_ID_ECHO)) bounded.longId++
    if (payload.includes(LONG_TOKEN_ECHO)) bounded.longToken++
    const where = `status ${res.statusCode}, body ${res.body.slice(0, 300)} (request ${size} bytes)`
    if (res.statusCode >= 500) throw new Error(`5xx: ${where}`)
    // The bounds: too deep is refused before anything runs; over-long ids and tokens are never
    // echoed; no answer is much larger than its request.
    if (depth > MAX_DEPTH && res.statusCode !== 413 && res.statusCode !== 415 &&
      (res.statusCode !== 400 || res.body !== `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: the body nests deeper than ${MAX_DEPTH} levels"}}`)) {
      throw new Error(`a body nesting ${depth} levels was not refused as such: ${where}`)
    }
    if (res.body.includes(LONG_ID_ECHO) || res.body.includes(LONG_TOKEN_ECHO)) throw new Error(`an id or a progress token over its bound was echoed: ${where}`)
    if (res.body.length > AMPLIFICATION * size + AMPLIFICATION_SLACK) throw new Error(`a ${size}-byte request got a ${res.body.length}-byte answer: ${where}`)
    if (res.statusCode === 202) {
      if (res.body !== '') throw new Error(`202 with a body: ${where}`)
      return
    }
    if (res.statusCode >= 400) {
      let body: any
      try { body = res.json() } catch { throw new Error(`4xx body is not JSON: ${where}`) }
      const reason = `${String(body?.error?.code)} ${String(body?.error?.message).replace(/"[^"]*"/g, '…').slice(0, 60)}`
      reasons.set(reason, (reasons.get(reason) ?? 0) + 1)
      if (body?.jsonrpc !== '2.0' || typeof body.error?.code !== 'number' || typeof body.error?.message !== 'string' || !('id' in body) || 'result' in body) {
        throw new Error(`4xx body is not a JSON-RPC error: ${where}`)
      }
      return
    }
    if (res.statusCode !== 200) throw new Error(`unexpected status: ${where}`)
    const msgs = messagesOf(res)
    const last = msgs[msgs.length - 1]
    if (last?.jsonrpc !== '2.0' || !('id' in last) || ('result' in last) === ('error' in last)) throw new Error(`200 without a final JSON-RPC response: ${where}`)
    if (last.error?.code === -32603) throw new Error(`internal error: ${where}`)
    if (!legacy && 'result' in last && typeof last.result.resultType !== 'string') throw new Error(`result without resultType: ${where}`)
    for (const m of msgs.slice(0, -1)) if ('id' in m) throw new Error(`a request or a second response on the stream: ${where}`)
  }

  t.ok(sent >= 1000, `${sent} random requests`)
  t.comment(`statuses: ${JSON.stringify(Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])))}; handler runs ${counters.runs - baseline}, with state ${counters.runsWithState}; ` +
    `genuine states sent ${genuineSent}`)
  t.comment(`refusals: ${JSON.stringify(Object.fromEntries([...reasons].sort((a, b) => b[1] - a[1])), null, 1)}`)
  t.same(counters.violations, [], 'no handler ran on a requestState the server did not verify')
  t.ok(counters.runsWithState <= genuineSent, `runs with a state (${counters.runsWithState}) ≤ requests carrying a genuine state (${genuineSent})`)
  t.ok(counters.runsWithState > 0, 'some genuine states were accepted (the property exercised the verified path)')
  t.ok(counters.runs - baseline > counters.runsWithState, 'and some first rounds ran')
  t.ok(bounded.deep > 0 && bounded.longId > 0 && bounded.longToken > 0, `requests past the bounds: ${JSON.stringify(bounded)}`)
  t.same(errors.map(e => [e.msg, e.err?.message]), [], 'nothing logged at error level (no internal error, no stack overflow)')
  const growth = heapAfterGc() - heapBefore
  t.ok(growth < MAX_HEAP_GROWTH, `the heap grew by ${(growth / 1048576).toFixed(1)} MiB over the run (less than ${MAX_HEAP_GROWTH / 1048576} MiB)`)
  t.ok((statuses.get(400) ?? 0) > 0 && (statuses.get(200) ?? 0) > 0, 'both accepted and refused requests were generated')

  // Past the body limit: 413 with a JSON-RPC error, never a 5xx.
  const tooBig = await post(app, rpc('tools/list', {}, { meta: { huge: 'x'.repeat(BODY_LIMIT) } }))
  t.equal(tooBig.statusCode, 413)
  t.equal(tooBig.json().error?.code, -32600)

  // The server still answers a valid request, and a full round trip completes.
  const body = rpc('tools/call', { name: 'guarded', arguments: { n: 3 } }, { caps: ELICIT })
  const first = finalOf(await post(app, body, { headers: paramHeaders({ n: 3 }) }))
  t.equal(first.result.resultType, 'input_required')
  const retry = { ...body, id: 'final', params: { ...body.params, inputResponses: { confirm: { action: 'accept', content: { ok: true } } }, requestState: first.result.requestState } }
  const done = finalOf(await post(app, retry, { headers: paramHeaders({ n: 3 }) }))
  t.same(done.result.content, [{ type: 'text', text: 'confirmed=true' }])
  const discover = await post(app, rpc('server/discover', {}, { meta: { [META_CLIENT]: { name: 'after', version: '1' } } }))
  t.equal(discover.statusCode, 200)
  t.same(discover.json().result.supportedVersions, [MODERN])
  t.equal((await app.inject({
    method: 'POST',
    url: '/mcp',
    headers: { accept: ACCEPT, 'content-type': 'application/json', 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/list' },
    payload: JSON.stringify(rpc('tools/list', {}, { id: 'l' }))
  })).json().result.tools.length, 3)
})

/** Mcp-Param-* headers mirroring the `guarded` tool's annotated arguments. */
function paramHeaders (args: unknown): Record<string, string> {
  const h: Record<string, string> = {}
  if (typeof args !== 'object' || args === null || Array.isArray(args)) return h
  const a = args as Record<string, unknown>
  if (a.n !== undefined && a.n !== null) h['mcp-param-n'] = typeof a.n === 'string' ? a.n : JSON.stringify(a.n)
  if (a.note !== undefined && a.note !== null) {
    const v = typeof a.note === 'string' ? a.note : JSON.stringify(a.note)
    h['mcp-param-note'] = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(v) ? v : b64(v)
  }
  return h
}
