/**
 * The bounds on client input, below the wire: the depth scan of `parseBody` (against the depth of
 * any JSON value), `classify`'s id and progress-token bounds, and the normalization of the client
 * capabilities `initialize` stores (it must make every capability decision the declared
 * capabilities make). The wire behaviour (statuses, logs, stores): bounds.test.ts.
 */
import t from 'tap'
import fc from 'fast-check'
import { classify, MAX_DEPTH, MAX_ID_LENGTH, MAX_PROGRESS_TOKEN_LENGTH, nestsDeeper, parseBody } from '../../lib/jsonrpc/messages.js'
import { MAX_CLIENT_INFO_FIELD, MAX_HANDSHAKE_PARAMS, normalizeClientCapabilities, shortClientInfo } from '../../lib/protocol/handshake/initialize.js'
import { missingCapability } from '../../lib/protocol/base-context.js'

/** `depth` nested arrays, as text. */
const nested = (depth: number, inner = ''): string => '['.repeat(depth) + inner + ']'.repeat(depth)

/** Nesting depth of a JSON value (a scalar is 0, `[]` and `{}` are 1). */
function depthOf (v: unknown): number {
  if (Array.isArray(v)) return 1 + Math.max(0, ...v.map(depthOf))
  if (typeof v === 'object' && v !== null) return 1 + Math.max(0, ...Object.values(v).map(depthOf))
  return 0
}

// ─── parseBody / classify ───────────────────────────────────────────────────────────────────────

t.test('parseBody: a body nesting deeper than MAX_DEPTH is -32600 with id null, before it is parsed', async (t) => {
  t.equal(MAX_DEPTH, 64)
  // The message object is level 1: params 2, arguments 3, then the argument's own nesting.
  const at = (levels: number): string => `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"v":${nested(levels - 3)}}}}`
  const ok = parseBody(at(MAX_DEPTH))
  t.ok(ok.ok, 'exactly MAX_DEPTH levels is fine')
  for (const text of [at(MAX_DEPTH + 1), nested(100_000), `[${at(MAX_DEPTH)}]`, '['.repeat(1_000_000)]) {
    const r = parseBody(text)
    t.same(r, { ok: false, error: { jsonrpc: '2.0', id: null, error: { code: -32600, message: `Invalid Request: the body nests deeper than ${MAX_DEPTH} levels` } } }, `${text.length} chars`)
  }
  // Brackets inside strings do not count, escaped quotes do not end a string.
  const inString = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping', params: { a: '['.repeat(10_000), b: 'x\\"{{{{\\', c: '"[[[[' } })
  t.ok(parseBody(inString).ok, 'brackets inside strings are not nesting')
  const afterBackslash = parseBody('{"a":"\\\\"' + nested(MAX_DEPTH) + '}')
  t.equal(!afterBackslash.ok && afterBackslash.error.error.code, -32600, 'a string ending in an escaped backslash ends there: what follows counts')
  const unterminated = parseBody('{"a":"unterminated' + nested(100))
  t.equal(!unterminated.ok && unterminated.error.error.code, -32700, 'brackets in an unterminated string do not count')
  // Garbage is still -32700.
  const garbage = parseBody('{"a": [1, 2')
  t.equal(!garbage.ok && garbage.error.error.code, -32700)
})

t.test('nestsDeeper agrees with the depth of any JSON value', async (t) => {
  fc.assert(fc.property(fc.jsonValue({ maxDepth: 12 }), fc.integer({ min: 0, max: 12 }), (v, max) => {
    const text = JSON.stringify(v)
    return nestsDeeper(text, max) === (depthOf(v) > max)
  }), { seed: 8, numRuns: 2000 })
  // With strings full of quotes, backslashes and brackets.
  const tricky = fc.stringMatching(/^[\\"[\]{}a]{0,12}$/)
  fc.assert(fc.property(fc.letrec(tie => ({
    v: fc.oneof({ depthSize: 'small' }, tricky, fc.array(tie('v'), { maxLength: 3 }), fc.dictionary(tricky, tie('v'), { maxKeys: 3 }))
  })).v, fc.integer({ min: 0, max: 6 }), (v, max) => nestsDeeper(JSON.stringify(v), max) === (depthOf(v) > max)), { seed: 9, numRuns: 2000 })
  t.pass('2 × 2,000 values')
})

t.test('classify: ids over MAX_ID_LENGTH are invalid with id null; tokens over MAX_PROGRESS_TOKEN_LENGTH are -32602', async (t) => {
  t.equal(MAX_ID_LENGTH, 256)
  t.equal(MAX_PROGRESS_TOKEN_LENGTH, 256)
  const id = 'i'.repeat(MAX_ID_LENGTH)
  t.equal(classify({ jsonrpc: '2.0', id, method: 'ping' }).kind, 'request')
  t.same(classify({ jsonrpc: '2.0', id: id + 'i', method: 'ping' }),
    { kind: 'invalid', id: null, error: { code: -32600, message: `Invalid Request: id must be at most ${MAX_ID_LENGTH} characters` } })
  t.same(classify({ jsonrpc: '2.0', id: id + 'i', result: {} }),
    { kind: 'invalid', id: null, error: { code: -32600, message: `Invalid Request: response id must be at most ${MAX_ID_LENGTH} characters` } })
  t.same(classify({ jsonrpc: '2.0', id: id + 'i', method: 7 }), { kind: 'invalid', id: null, error: { code: -32600, message: 'Invalid Request: method must be a non-empty string' } },
    'an invalid message never echoes a long id')
  t.equal(classify({ jsonrpc: '2.0', id: 1e300, method: 'ping' }).kind, 'request', 'numbers are not bounded')
  const token = 't'.repeat(MAX_PROGRESS_TOKEN_LENGTH)
  t.equal(classify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { _meta: { progressToken: token } } }).kind, 'request')
  t.equal(classify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { _meta: { progressToken: 1e300 } } }).kind, 'request')
  t.same(classify({ jsonrpc: '2.0', id: 'x', method: 'tools/call', params: { _meta: { progressToken: token + 't' } } }),
    { kind: 'invalid', id: 'x', error: { code: -32602, message: `Invalid params: _meta.progressToken must be at most ${MAX_PROGRESS_TOKEN_LENGTH} characters` } })
  t.equal(classify({ jsonrpc: '2.0', method: 'notifications/progress', params: { _meta: { progressToken: token + 't' } } }).kind, 'notification', 'notifications are not echoed: not checked')
})

t.test('normalized capabilities make the same elicitation/sampling/roots decisions as the declared ones', async (t) => {
  const sub = fc.oneof(fc.constant({}), fc.constant(null), fc.constant(true), fc.constant('x'), fc.constant([]), fc.record({ k: fc.integer() }))
  const part = (keys: string[]): fc.Arbitrary<unknown> => fc.oneof(
    fc.dictionary(fc.constantFrom(...keys, 'other'), sub, { maxKeys: 4 }), sub)
  const caps = fc.record({
    elicitation: part(['form', 'url']),
    sampling: part(['tools', 'context']),
    roots: part(['listChanged']),
    experimental: sub
  }, { requiredKeys: [] })
  const asks: Array<[string, Record<string, unknown>]> = [
    ['elicitation/create', {}], ['elicitation/create', { mode: 'form' }], ['elicitation/create', { mode: 'url' }],
    ['sampling/createMessage', {}], ['sampling/createMessage', { tools: [] }], ['roots/list', {}]
  ]
  fc.assert(fc.property(caps, (c) => {
    const n = normalizeClientCapabilities(c)
    return asks.every(([method, params]) => JSON.stringify(missingCapability(c, method, params)) === JSON.stringify(missingCapability(n, method, params)))
  }), { seed: 14, numRuns: 3000 })
  t.same(normalizeClientCapabilities({
    elicitation: { form: { applyDefaults: true }, url: {} },
    sampling: { tools: {}, context: {} },
    roots: { listChanged: true },
    experimental: { big: 'x'.repeat(100) }
  }),
  { elicitation: { form: {}, url: {} }, sampling: { context: {}, tools: {} }, roots: { listChanged: true } })
  t.same(normalizeClientCapabilities({ elicitation: {}, sampling: { tools: true }, roots: { listChanged: 'yes' } }), { elicitation: {}, sampling: {}, roots: {} })
})

t.test('clientInfo keeps name, version and title, strings cut to MAX_CLIENT_INFO_FIELD', async (t) => {
  t.equal(MAX_CLIENT_INFO_FIELD, 256)
  t.equal(MAX_HANDSHAKE_PARAMS, 65_536)
  t.same(shortClientInfo({ name: 'n'.repeat(300), version: 1, title: 'T', icons: [], websiteUrl: 'https://x' }), { name: 'n'.repeat(256), title: 'T' })
})
