/**
 * Property-based fuzzing of the endpoint with `app.inject()`: random bodies (JSON values, near-valid
 * JSON-RPC messages and batches, garbage, large strings) and random header sets on POST, GET and
 * DELETE. Whatever arrives:
 *   - never a 5xx;
 *   - a 4xx with a body carries a JSON-RPC error object;
 *   - 2xx bodies are JSON-RPC (JSON or SSE events);
 *   - a session is created only by a successful initialize, and its id is the one handed out;
 *   - a malformed MCP-Protocol-Version is never accepted on a request naming a session, GET or DELETE;
 *   - the bounds on client input hold (README, "Bounds"): a body nesting deeper than 64 levels, a
 *     string id over 256 characters, a progress token over 256 characters are refused with a 400
 *     and never echoed; a POST's answer is never much larger than its body (no amplification);
 *   - afterwards the server still works, and nothing leaked (sessions, hub entries, bus channels),
 *     every stored session is small, and the heap grew by less than a bound.
 * Bodies include 2026-07-28 (stateless) requests with their Mcp-Method / Mcp-Name headers, and the
 * shapes of the bounds: long ids and tokens, deep nesting, huge initialize params.
 *
 * Deterministic: seed FC_SEED (default below), FC_RUNS runs (default 1,200). The harness is
 * stateful (a pool of live sessions, SSE event ids seen), so failures are reported unshrunk.
 * FC_DEBUG=1 prints a tally of the refusal messages.
 */
import t from 'tap'
import fc from 'fast-check'
import v8 from 'node:v8'
import vm from 'node:vm'
import Fastify, { type LightMyRequestResponse } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { MemoryBus, MemorySessionStore } from '../../lib/index.js'
import { initialize as initializeApp } from '../plugin/helper.js'
import { sleep } from '../helpers/time.js'
import { headers as sessionHeaders, LEGACY, META_CAPS, META_LOG, META_VERSION } from '../helpers/wire.js'
import { deepMarker, textDepth, withDeep } from '../helpers/json-depth.js'

const SEED = Number(process.env.FC_SEED ?? 20251125)
const RUNS = Number(process.env.FC_RUNS ?? 1200)
const BODY_LIMIT = 256 * 1024
const VERSIONS = [LEGACY, '2025-06-18', '2025-03-26'] as const
const LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency']
/** The bounds under test (README, "Bounds"). */
const MAX_DEPTH = 64
const MAX_ID_LENGTH = 256
const MAX_PROGRESS_TOKEN_LENGTH = 256
/** The largest session the store may hold after the run (normalized capabilities, short client info, a few keys). */
const MAX_STORED_SESSION = 4096
/** How much the heap may grow over the whole run, after a forced GC (sessions and event logs of ~1,200 requests). */
const MAX_HEAP_GROWTH = 8 * 1024 * 1024
/** A POST's answer is at most this much larger than its body, plus the constant below. */
const AMPLIFICATION = 2
const AMPLIFICATION_SLACK = 16 * 1024
/** What an echoed over-long id or token would look like (they are runs of one letter). */
const LONG_ID_ECHO = 'i'.repeat(MAX_ID_LENGTH + 1)
const LONG_TOKEN_ECHO = 'p'.repeat(MAX_PROGRESS_TOKEN_LENGTH + 1)

// ─── the server under test ──────────────────────────────────────────────────────────────────────

const store = new MemorySessionStore({ sweepInterval: 0 })
/** Ids created (successfully) during the request being checked. */
let createdNow: string[] = []
/** Every session id ever created (to measure what the store holds at the end). */
const createdAll: string[] = []
let creates = 0
let destroys = 0
const create = store.create.bind(store)
store.create = async (id, data) => {
  await create(id, data)
  creates++
  createdNow.push(id)
  createdAll.push(id)
}
const destroy = store.destroy.bind(store)
store.destroy = async (id) => {
  const existed = await destroy(id)
  if (existed) destroys++
  return existed
}
const bus = new MemoryBus()

const app = Fastify({ logger: false })
await app.register(mcp, {
  path: '/mcp',
  sessions: { store, gcProbability: 0 },
  bus,
  bodyLimit: BODY_LIMIT,
  clientRequestTimeout: 30,
  keepAliveInterval: 0,
  pageSize: 2
})
app.mcp.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String({ maxLength: 1000 }) }) },
  async ({ text }) => text)
app.mcp.tool({
  name: 'add',
  description: 'Adds',
  input: Type.Object({ a: Type.Integer(), b: Type.Integer() }),
  output: Type.Object({ sum: Type.Integer() })
}, async ({ a, b }) => ({ structuredContent: { sum: a + b } }))
app.mcp.tool({ name: 'progress', description: 'Reports progress and logs' }, async (_args, ctx) => {
  for (let i = 1; i <= 3; i++) await ctx.progress({ progress: i, total: 3 })
  await ctx.log('warning', { note: 'log from a tool' })
  return 'done'
})
app.mcp.tool({ name: 'count', description: 'Reports progress 20 times (each echoes the progress token)' }, async (_args, ctx) => {
  for (let i = 1; i <= 20; i++) await ctx.progress({ progress: i, total: 20 })
  return 'counted'
})
app.mcp.tool({ name: 'fail', description: 'Throws' }, async () => { throw new Error('boom') })
app.mcp.tool({ name: 'bad_output', description: 'Breaks its output schema', output: Type.Object({ n: Type.Integer() }) },
  // Deliberately wrong: the types refuse it, the run-time check is what this tool exercises.
  async () => ({ structuredContent: { n: 'x' } as unknown as { n: number } }))
app.mcp.tool({ name: 'ask', description: 'Elicits (the fuzzer never answers)' }, async (_a, ctx) => {
  const r = await ctx.elicit('q', { message: 'Name?', requestedSchema: { type: 'object', properties: { n: { type: 'string' } } } })
  return r.action
})
app.mcp.tool({ name: 'sample', description: 'Samples (the fuzzer never answers)' }, async (_a, ctx) => {
  const r = await ctx.sample('s', { messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 5 })
  return r.model
})
app.mcp.tool({ name: 'roots', description: 'Lists roots (the fuzzer never answers)' }, async (_a, ctx) => {
  return (await ctx.roots('r')).map(r => r.uri).join(',')
})
app.mcp.tool({ name: 'drop', description: 'Drops its SSE connection and finishes' }, async (_a, ctx) => {
  await ctx.progress({ progress: 1 })
  ctx.closeSSEStream(10)
  await ctx.progress({ progress: 2 })
  return 'dropped'
})
app.mcp.resource({ uri: 'fuzz://a', name: 'a', description: 'A' }, async (uri) => ({ uri, text: 'A' }))
app.mcp.resourceTemplate({ uriTemplate: 'fuzz://items/{id}', name: 'item', description: 'Items', complete: { id: (v) => ['1', '2', '10'].filter(x => x.startsWith(v)) } },
  async (uri, { id }) => ({ uri, text: `item ${id}` }))
app.mcp.prompt({
  name: 'greet',
  description: 'Greets',
  arguments: [{ name: 'name', required: true }],
  complete: { name: (v) => ['Ada', 'Alan'].filter(x => x.startsWith(v)) }
}, async ({ name }) => [{ role: 'user', content: { type: 'text', text: `Hello ${name}` } }])
await app.ready()
/** Channels the plugin itself listens to for its whole life (broadcasts). */
const baseChannels = bus.channels

t.teardown(async () => {
  await app.close()
  await store.close()
})

// ─── helpers ────────────────────────────────────────────────────────────────────────────────────

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)
const isId = (v: unknown): boolean => typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v))

function isJsonRpcError (v: unknown): boolean {
  return isObj(v) && v.jsonrpc === '2.0' && (v.id === null || isId(v.id)) &&
    isObj(v.error) && Number.isInteger(v.error.code) && typeof v.error.message === 'string' &&
    Object.keys(v).every(k => k === 'jsonrpc' || k === 'id' || k === 'error')
}

function isJsonRpcResponse (v: unknown): boolean {
  return isJsonRpcError(v) || (isObj(v) && v.jsonrpc === '2.0' && isId(v.id) && isObj(v.result))
}

function isJsonRpcMessage (v: unknown): boolean {
  return isJsonRpcResponse(v) || (isObj(v) && v.jsonrpc === '2.0' && typeof v.method === 'string' && (v.params === undefined || isObj(v.params)))
}

/** Parses an SSE body into events (id, data). */
function sseEvents (text: string): Array<{ id?: string, data: string }> {
  const events: Array<{ id?: string, data: string }> = []
  for (const block of text.split('\n\n')) {
    let id: string | undefined
    const data: string[] = []
    let any = false
    for (const line of block.split('\n')) {
      if (line.startsWith('id:')) { id = line.slice(3).trim(); any = true } else if (line.startsWith('data:')) { data.push(line.slice(5).replace(/^ /, '')); any = true }
    }
    if (any) events.push({ id, data: data.join('\n') })
  }
  return events
}

/** Live sessions the fuzzer can name (id + protocol version), deleted ones, and SSE event ids seen. */
const pool: Array<{ sid: string, version: string }> = []
const dead: string[] = []
const eventIds: string[] = []
/** Server→client request ids seen in SSE streams (so the fuzzer can "answer" them). */
const serverRequestIds: string[] = []

async function initialize (version: string, capabilities: Record<string, unknown> = {}): Promise<string> {
  const { sid } = await initializeApp(app, { version, capabilities })
  pool.push({ sid, version })
  return sid
}

const CAPS = [{}, { elicitation: {} }, { sampling: {} }, { roots: { listChanged: true } }, { elicitation: { form: {}, url: {} }, sampling: { tools: {} }, roots: {} }]
let refills = 0
async function refillPool (): Promise<void> {
  while (pool.length < 6) {
    refills++
    await initialize(VERSIONS[refills % VERSIONS.length], CAPS[refills % CAPS.length])
  }
  if (pool.length > 30) pool.splice(0, pool.length - 30)
}

// ─── arbitraries ────────────────────────────────────────────────────────────────────────────────

/** A reference resolved at run time against the current pool / dead ids / event ids. */
type Ref = { ref: 'pool' | 'dead' | 'event' | 'srvreq', i: number }
const MISSING = Symbol('missing')
type Gen<T> = fc.Arbitrary<T>

const w = <T>(weight: number, arbitrary: Gen<T>): { weight: number, arbitrary: Gen<T> } => ({ weight, arbitrary })
const ref = (kind: Ref['ref']): Gen<Ref> => fc.nat(1000).map(i => ({ ref: kind, i }))

const printable = fc.string({ maxLength: 40 })
const anyString = fc.oneof(printable, fc.string({ unit: 'binary', maxLength: 40 }), fc.string({ unit: 'grapheme', maxLength: 20 }))
const latin1 = fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map(c => String.fromCharCode(c)), maxLength: 60 })
const weird: Gen<unknown> = fc.oneof(fc.constant(null), fc.boolean(), fc.integer(), fc.double(), anyString, fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 3 }), fc.jsonValue({ maxDepth: 2 }))

const METHODS = [
  'initialize', 'ping', 'tools/list', 'tools/call', 'resources/list', 'resources/templates/list', 'resources/read',
  'resources/subscribe', 'resources/unsubscribe', 'prompts/list', 'prompts/get', 'completion/complete', 'logging/setLevel',
  'notifications/initialized', 'notifications/cancelled', 'notifications/progress', 'notifications/roots/list_changed',
  'sampling/createMessage', 'elicitation/create', 'roots/list', 'tasks/get', 'tasks/list', 'server/discover'
]
const TOOLS = ['echo', 'add', 'progress', 'count', 'fail', 'bad_output', 'ask', 'sample', 'roots', 'drop', 'nope']

/** A string of `n` characters; lengths around the bounds, and far past them. */
const longString = (ch: string, ...lengths: number[]): Gen<string> => fc.noBias(fc.constantFrom(...lengths)).map(n => ch.repeat(n))
const longToken = longString('p', MAX_PROGRESS_TOKEN_LENGTH, MAX_PROGRESS_TOKEN_LENGTH + 1, 64 * 1024, 200 * 1024)
const longId = longString('i', MAX_ID_LENGTH, MAX_ID_LENGTH + 1, 100 * 1024)
/** Nesting around and far past the bound (the bodies stay well within BODY_LIMIT); see json-depth.ts. */
const deep: Gen<unknown> = fc.noBias(fc.constantFrom(MAX_DEPTH - 4, MAX_DEPTH - 3, MAX_DEPTH, MAX_DEPTH + 1, 1_000, 100_000)).map(deepMarker)

/** The body text of a JSON value (deep markers become nested arrays). */
const bodyText = (v: unknown): string | undefined => { const text = JSON.stringify(v); return text === undefined ? undefined : withDeep(text) }

const metaArb = fc.oneof(
  fc.constant(MISSING),
  fc.record({ progressToken: fc.oneof(w(6, fc.string({ maxLength: 8 })), w(6, fc.integer()), w(6, weird), w(2, longToken)) }, { requiredKeys: [] }),
  weird
)

/** Initialize params around and past the 64 KiB bound of capabilities + clientInfo, with what is kept buried in junk. */
const hugeCaps: Gen<unknown> = fc.noBias(fc.constantFrom(1_000, 60_000, 70_000, 200_000)).map(n => ({
  experimental: { blob: 'x'.repeat(n) }, elicitation: { form: { junk: 'y'.repeat(100) } }, sampling: { tools: {} }, roots: { listChanged: true }, other: [1, 2, 3]
}))
const hugeClientInfo: Gen<unknown> = fc.noBias(fc.constantFrom(1_000, 60_000, 70_000)).map(n => ({ name: 'n'.repeat(n), version: '1', icons: [{ src: 'z'.repeat(100) }] }))

function paramsFor (method: string): Gen<unknown> {
  const generic = fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 })
  let specific: Gen<unknown>
  switch (method) {
    case 'initialize':
      specific = fc.record({
        protocolVersion: fc.oneof(fc.constantFrom(...VERSIONS, '2024-11-05', '2026-07-28'), weird),
        capabilities: fc.oneof(w(4, fc.constantFrom(...CAPS)), w(4, weird), w(1, hugeCaps), w(1, deep)),
        clientInfo: fc.oneof(w(4, fc.constant({ name: 'fuzz', version: '1' })), w(4, weird), w(1, hugeClientInfo))
      }, { requiredKeys: [] })
      break
    case 'tools/call':
      specific = fc.record({
        name: fc.oneof(w(6, fc.constantFrom(...TOOLS)), w(1, weird)),
        arguments: fc.oneof(
          w(3, fc.constant({ text: 'hi' })), w(3, fc.record({ a: fc.integer(), b: fc.oneof(fc.integer(), weird) })),
          w(3, fc.dictionary(fc.string({ maxLength: 6 }), weird, { maxKeys: 3 })), w(3, weird), w(1, fc.record({ text: deep }))),
        _meta: metaArb
      }, { requiredKeys: ['name'] })
      break
    case 'resources/read': case 'resources/subscribe': case 'resources/unsubscribe':
      specific = fc.record({ uri: fc.oneof(fc.constantFrom('fuzz://a', 'fuzz://items/1', 'fuzz://items/', 'fuzz://b', ''), weird) }, { requiredKeys: [] })
      break
    case 'prompts/get':
      specific = fc.record({
        name: fc.oneof(fc.constant('greet'), weird),
        arguments: fc.oneof(fc.constant({ name: 'Ada' }), fc.dictionary(fc.string({ maxLength: 6 }), weird, { maxKeys: 3 }), weird)
      }, { requiredKeys: [] })
      break
    case 'completion/complete':
      specific = fc.record({
        ref: fc.oneof(fc.constant({ type: 'ref/prompt', name: 'greet' }), fc.constant({ type: 'ref/resource', uri: 'fuzz://items/{id}' }),
          fc.record({ type: weird, name: weird, uri: weird }, { requiredKeys: [] }), weird),
        argument: fc.oneof(fc.record({ name: fc.constantFrom('name', 'id', 'x'), value: fc.string({ maxLength: 3 }) }), weird),
        context: fc.oneof(fc.record({ arguments: fc.dictionary(fc.string({ maxLength: 4 }), weird, { maxKeys: 2 }) }), weird)
      }, { requiredKeys: [] })
      break
    case 'logging/setLevel':
      specific = fc.record({ level: fc.oneof(fc.constantFrom(...LEVELS), weird) }, { requiredKeys: [] })
      break
    case 'notifications/cancelled':
      specific = fc.record({ requestId: fc.oneof(fc.integer({ min: 0, max: 5 }), weird), reason: weird }, { requiredKeys: [] })
      break
    case 'tools/list': case 'resources/list': case 'prompts/list': case 'resources/templates/list':
      specific = fc.record({ cursor: fc.oneof(fc.constantFrom('', 'AAAA', 'eyJ4IjoxfQ'), fc.base64String({ maxLength: 24 }), weird) }, { requiredKeys: [] })
      break
    default:
      specific = generic
  }
  return fc.oneof(w(3, fc.constant(MISSING)), w(8, specific), w(2, generic), w(1, weird))
}

/** A request-ish, notification-ish or response-ish object with plausible and wrong field types. */
const message: Gen<unknown> = fc.oneof(
  // requests and notifications
  w(8, fc.oneof(w(6, fc.constantFrom(...METHODS)), w(1, anyString), w(1, weird)).chain(method => fc.record({
    jsonrpc: fc.oneof(w(12, fc.constant('2.0')), w(1, fc.constant(MISSING)), w(1, fc.constantFrom('1.0', '2', 2, 2.0, null))),
    id: fc.oneof(w(6, fc.integer({ min: -5, max: 1_000_000 })), w(3, fc.string({ maxLength: 12 })), w(4, fc.constant(MISSING)), w(2, weird), w(1, fc.constantFrom(null, 1.5, -0, 1e308, true)), w(1, longId)),
    method: fc.constant(method),
    params: typeof method === 'string' ? paramsFor(method) : weird,
    extra: fc.oneof(w(10, fc.constant(MISSING)), w(1, weird))
  }))),
  // responses to server requests
  w(2, fc.record({
    jsonrpc: fc.oneof(w(8, fc.constant('2.0')), w(1, weird)),
    id: fc.oneof(ref('srvreq'), fc.integer(), fc.string({ maxLength: 10 }), fc.constant(null), weird, longId),
    result: fc.oneof(fc.constant({ action: 'accept', content: { n: 'x' } }), fc.constant({ roots: [] }), fc.constant({ role: 'assistant', content: { type: 'text', text: 'x' }, model: 'm' }), fc.constant(MISSING), weird),
    error: fc.oneof(w(4, fc.constant(MISSING)), w(1, fc.record({ code: fc.oneof(fc.integer(), weird), message: fc.oneof(fc.string(), weird), data: weird }, { requiredKeys: [] })), w(1, weird))
  })),
  w(1, fc.jsonValue({ maxDepth: 3 }))
)

/** Replaces refs and drops MISSING fields. */
function materialize (v: unknown): unknown {
  if (Array.isArray(v)) return v.map(materialize)
  if (isObj(v)) {
    if ('ref' in v && typeof v.i === 'number' && Object.keys(v).length === 2) return resolveRef(v as unknown as Ref)
    const out: Record<string, unknown> = {}
    for (const [k, x] of Object.entries(v)) {
      if (x === MISSING) continue
      if (k === 'extra') { out[String(x).slice(0, 10) || 'extra'] = x; continue }
      out[k] = materialize(x)
    }
    return out
  }
  return v
}

function resolveRef (r: Ref): string {
  const pick = <T>(list: T[], fallback: T): T => list.length === 0 ? fallback : list[r.i % list.length]
  switch (r.ref) {
    case 'pool': return pick(pool, { sid: 'none', version: '' }).sid
    case 'dead': return pick(dead, 'dead-session-id')
    case 'event': return pick(eventIds, 'AAAAAAAAAAAA_1')
    case 'srvreq': return pick(serverRequestIds, 'srv-00000000-1')
  }
}

/** An initialize request, mostly well-formed. */
const initializeMessage: Gen<unknown> = fc.record({
  jsonrpc: fc.oneof(w(10, fc.constant('2.0')), w(1, weird)),
  id: fc.oneof(w(10, fc.integer({ min: 0, max: 100 })), w(1, weird), w(1, longId)),
  method: fc.constant('initialize'),
  params: fc.oneof(w(10, fc.record({
    protocolVersion: fc.oneof(w(6, fc.constantFrom(...VERSIONS, '2024-11-05', '2099-01-01')), w(1, weird)),
    capabilities: fc.oneof(w(6, fc.constantFrom(...CAPS)), w(1, weird), w(1, fc.constant(MISSING)), w(2, hugeCaps), w(1, deep)),
    clientInfo: fc.oneof(w(6, fc.constant({ name: 'fuzz', version: '1' })), w(1, weird), w(1, fc.constant(MISSING)), w(2, hugeClientInfo))
  })), w(1, weird))
})

/**
 * A 2026-07-28 (stateless) request: `_meta` carries version and capabilities, and the headers
 * (MCP-Protocol-Version, Mcp-Method, Mcp-Name) mostly mirror the body.
 */
const MODERN_METHODS = ['server/discover', 'tools/list', 'tools/call', 'prompts/get', 'resources/read', 'resources/list', 'completion/complete', 'subscriptions/listen', 'initialize', 'ping', 'nope/nope']
const modernMessage: Gen<unknown> = fc.constantFrom(...MODERN_METHODS).chain(method => fc.record({
  method: fc.constant(method),
  id: fc.oneof(w(10, fc.integer({ min: 0, max: 1000 })), w(1, weird), w(1, longId)),
  version: fc.oneof(w(10, fc.constant('2026-07-28')), w(1, fc.constantFrom('2025-11-25', '2027-01-01', '')), w(1, weird)),
  caps: fc.oneof(w(8, fc.constantFrom(...CAPS)), w(1, weird)),
  logLevel: fc.oneof(w(6, fc.constant(MISSING)), w(2, fc.constantFrom(...LEVELS)), w(1, weird)),
  params: paramsFor(method),
  name: fc.oneof(fc.constantFrom(...TOOLS, 'greet', 'fuzz://a', 'fuzz://items/2'), fc.string({ maxLength: 8 })),
  inputResponses: fc.oneof(w(6, fc.constant(MISSING)), w(1, fc.dictionary(fc.string({ maxLength: 4 }), weird, { maxKeys: 2 })), w(1, weird)),
  requestState: fc.oneof(w(6, fc.constant(MISSING)), w(1, fc.base64String({ maxLength: 40 })), w(1, weird)),
  headerVersion: fc.oneof(w(10, fc.constant('same')), w(1, fc.constant(MISSING)), w(1, fc.constantFrom('2026-07-28 ', '2025-11-25', 'x'))),
  headerMethod: fc.oneof(w(10, fc.constant('same')), w(1, fc.constant(MISSING)), w(1, anyString)),
  headerName: fc.oneof(w(8, fc.constant('same')), w(1, fc.constant('base64')), w(1, fc.constant(MISSING)), w(1, latin1), w(1, fc.constantFrom('=?base64?@@@@?=', '=?base64?/w==?=')))
})).map(r => {
  const params: Record<string, unknown> = isObj(r.params) ? { ...r.params } : {}
  const key = r.method === 'resources/read' ? 'uri' : 'name'
  if (r.method === 'tools/call' || r.method === 'prompts/get' || r.method === 'resources/read') params[key] = r.name
  params._meta = { ...(isObj(params._meta) ? params._meta : {}), [META_VERSION]: r.version, [META_CAPS]: r.caps, [META_LOG]: r.logLevel }
  params.inputResponses = r.inputResponses
  params.requestState = r.requestState
  const name = typeof params[key] === 'string' ? params[key] : ''
  const headers: Record<string, unknown> = {
    'mcp-protocol-version': r.headerVersion === 'same' ? (typeof r.version === 'string' ? r.version : JSON.stringify(r.version)) : r.headerVersion,
    'mcp-method': r.headerMethod === 'same' ? r.method : r.headerMethod,
    'mcp-name': r.headerName === 'same' ? name : r.headerName === 'base64' ? `=?base64?${Buffer.from(name).toString('base64')}?=` : r.headerName
  }
  return { json: { jsonrpc: '2.0', id: r.id, method: r.method, params }, headers }
})

/**
 * The shapes of the bounds, sent well-formed (transport headers right, on a live session, or for
 * initialize on none) so that they reach the wires: progress tokens and ids around and past their
 * bounds on a tool that reports progress 20 times, deep arguments, huge initialize params.
 */
const boundShapes: Gen<unknown> = fc.oneof(
  w(3, longToken.map(token => ({ json: { jsonrpc: '2.0', id: 'b', method: 'tools/call', params: { name: 'count', _meta: { progressToken: token } } }, onSession: true }))),
  w(1, longId.map(id => ({ json: { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'progress', _meta: { progressToken: 1 } } }, onSession: true }))),
  w(1, deep.map(d => ({ json: { jsonrpc: '2.0', id: 'd', method: 'tools/call', params: { name: 'echo', arguments: { text: d } } }, onSession: true }))),
  w(2, fc.tuple(fc.oneof(hugeCaps, deep), fc.oneof(hugeClientInfo, fc.constant({ name: 'fuzz', version: '1' }))).map(([capabilities, clientInfo]) => ({
    json: { jsonrpc: '2.0', id: 'i', method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities, clientInfo } }, fresh: true
  })))
)

/** Body text (or none). */
const body: Gen<unknown> = fc.oneof(
  w(3, boundShapes),
  w(2, initializeMessage.map(m => ({ json: m }))),
  w(3, modernMessage),
  w(10, message.map(m => ({ json: m }))),
  w(3, fc.array(message, { minLength: 0, maxLength: 6 }).map(m => ({ json: m }))),
  w(2, fc.jsonValue({ maxDepth: 3 }).map(m => ({ json: m }))),
  w(2, fc.oneof(
    anyString,
    fc.constantFrom('', ' ', '{', '[', '{"jsonrpc":"2.0",}', '\uFEFF{"jsonrpc":"2.0","id":1,"method":"ping"}', 'null', 'true', '0', '""',
      '[[]]', '[{}]', '{"__proto__":{"polluted":1},"jsonrpc":"2.0","id":1,"method":"ping"}', '{"constructor":{"prototype":{"x":1}}}',
      '{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2,"method":"ping"}', '{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
      '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":' + '['.repeat(5000) + ']'.repeat(5000) + '}}'),
    message.map(m => { const s = bodyText(materialize(m)) ?? ''; return s.slice(0, Math.floor(s.length / 2)) })
  ).map(text => ({ text }))),
  // large but (mostly) within the body limit; sometimes just beyond it
  w(1, fc.tuple(fc.constantFrom(1_000, 60_000, BODY_LIMIT - 200, BODY_LIMIT + 10), fc.constantFrom('tools/call', 'ping', 'notifications/progress')).map(([n, method]) => ({
    json: { jsonrpc: '2.0', id: 7, method, params: { name: 'echo', arguments: { text: 'x'.repeat(n) } } }
  }))),
  w(2, fc.constant({ none: true }))
)

function header (valid: Gen<unknown>, invalid: Gen<unknown>, validWeight = 8): Gen<unknown> {
  return fc.oneof(w(validWeight, valid), w(1, invalid))
}

const headers = fc.record({
  'content-type': header(fc.constantFrom('application/json', 'application/json; charset=utf-8', 'Application/JSON'),
    fc.oneof(fc.constantFrom(MISSING, '', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/jsonx', 'application/json-patch+json', ';'), latin1)),
  accept: header(fc.constantFrom('application/json, text/event-stream', 'text/event-stream', 'text/event-stream, application/json;q=0.5', '*/*'),
    fc.oneof(fc.constantFrom(MISSING, '', 'application/json', 'text/html', 'text/*', 'application/*', ',,,', 'text/event-stream;q=0'), latin1)),
  'mcp-session-id': fc.oneof(w(10, ref('pool')), w(4, fc.constant(MISSING)), w(1, ref('dead')), w(1, latin1), w(1, fc.constantFrom('', ' ', 'a'.repeat(129), 'a'.repeat(128), 'é', 'a b', '\u00ff'))),
  'mcp-protocol-version': header(fc.constantFrom(MISSING, MISSING, ...VERSIONS), fc.oneof(fc.constantFrom('2024-11-05', '2026-07-28', '', 'latest'), latin1), 10),
  origin: header(fc.constantFrom(MISSING, MISSING, 'http://localhost:3000', 'http://127.0.0.1', 'https://[::1]:8443'),
    fc.oneof(fc.constantFrom('https://evil.example', 'null', '', 'http://localhost.evil.example', 'file://', 'http://127.0.0.1.nip.io'), latin1), 12),
  host: header(fc.constantFrom(MISSING, 'localhost', '127.0.0.1:3000', '[::1]:80', 'LOCALHOST:1'),
    fc.oneof(fc.constantFrom('', 'evil.example', 'localhost.evil.example', '127.0.0.2', '[::2]'), latin1), 15),
  'last-event-id': fc.oneof(w(6, fc.constant(MISSING)), w(3, ref('event')), w(1, latin1), w(1, fc.tuple(fc.stringMatching(/^[A-Za-z0-9-]{8,20}$/), fc.nat()).map(([a, b]) => `${a}_${b}`))),
  authorization: fc.oneof(w(10, fc.constant(MISSING)), w(1, latin1))
})

const requestArb = fc.record({
  method: fc.oneof(w(14, fc.constant('POST' as const)), w(3, fc.constant('GET' as const)), w(3, fc.constant('DELETE' as const))),
  headers,
  body,
  /** Most initialize and 2026-07-28 bodies go without a session id (else they are refused early). */
  withoutSession: fc.oneof(w(4, fc.constant(true)), w(1, fc.constant(false)))
})

// ─── the property ───────────────────────────────────────────────────────────────────────────────

const debug = new Map<string, number>()
const stats = { status: new Map<number, number>(), sse: 0, getStreams: 0, sessionsCreated: 0, largestStored: 0, bounded: { deep: 0, longId: 0, longToken: 0 } }

/**
 * `promise`, or after `ms` the `otherwise` value (or an Error with that message, when a string); the
 * timer is cleared, so that nothing of a request outlives it (the heap is measured after the run).
 */
async function within<T, U> (ms: number, promise: Promise<T>, otherwise: U): Promise<T | (U extends string ? never : U)> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<U>((resolve, reject) => {
    timer = setTimeout(() => { typeof otherwise === 'string' ? reject(new Error(otherwise)) : resolve(otherwise) }, ms)
  })
  try {
    return await Promise.race([promise, late]) as T | (U extends string ? never : U)
  } finally {
    clearTimeout(timer)
  }
}

/** Reads a streamed inject response; a GET stream still open after `openAfter` ms is disconnected (client goes away). */
async function readBody (res: LightMyRequestResponse, openAfter: number): Promise<{ text: string, open: boolean }> {
  const stream = res.stream()
  const chunks: Buffer[] = []
  stream.on('data', (c: Buffer) => chunks.push(c))
  const ended = new Promise<boolean>(resolve => {
    stream.once('end', () => resolve(true))
    stream.once('error', () => resolve(true))
    stream.once('close', () => resolve(true))
  })
  const open = !await within(openAfter, ended, false)
  if (open) {
    (res.raw.res as unknown as { destroy: () => void }).destroy()
    await ended
  }
  return { text: Buffer.concat(chunks).toString('utf8'), open }
}

type RequestInput = typeof requestArb extends fc.Arbitrary<infer R> ? R : never

async function runOne (input: RequestInput): Promise<void> {
  await refillPool()
  const h: Record<string, string> = {}
  for (const [k, v] of Object.entries(input.headers)) {
    if (v === MISSING) continue
    h[k] = typeof v === 'string' ? v : resolveRef(v as Ref)
  }
  const b = input.body as { json?: unknown, text?: string, none?: true, headers?: Record<string, unknown>, onSession?: true, fresh?: true }
  const method = b.onSession === true || b.fresh === true ? 'POST' : input.method
  if (b.onSession === true || b.fresh === true) {
    for (const k of Object.keys(h)) delete h[k]
    Object.assign(h, sessionHeaders())
    if (b.onSession === true) {
      const named = input.headers['mcp-session-id'] as Ref | typeof MISSING | string
      const s = pool[(typeof named === 'object' ? named.i : 0) % pool.length]
      h['mcp-session-id'] = s.sid
      h['mcp-protocol-version'] = s.version
    }
  }
  const payload = b.none === true ? undefined : b.text ?? bodyText(materialize(b.json)) ?? 'undefined'
  for (const [k, v] of Object.entries(b.headers ?? {})) {
    if (v === MISSING) delete h[k]
    else h[k] = String(v)
  }
  if (input.withoutSession && (b.headers !== undefined || payload?.includes('"initialize"') === true)) delete h['mcp-session-id']
  /** A subscriptions/listen stream stays open: read it briefly, then go away. */
  const listens = payload?.includes('"subscriptions/listen"') === true
  const sid = h['mcp-session-id']
  createdNow = []
  const res = await within(5000, app.inject({ method, url: '/mcp', headers: h, payload, payloadAsStream: true }), 'the request did not answer within 5 s')
  const status = res.statusCode
  const { text, open } = await readBody(res, method === 'GET' || listens ? 20 : 5000)
  if (open && method !== 'GET' && !listens) throw new Error(`a ${method} response never ended`)
  stats.status.set(status, (stats.status.get(status) ?? 0) + 1)
  const ctype = String(res.headers['content-type'] ?? '')
  const where = `${method} ${status} ${ctype} body=${text.slice(0, 300)}`
  const depth = payload === undefined ? 0 : textDepth(payload)
  if (payload !== undefined && method === 'POST') {
    if (depth > MAX_DEPTH) stats.bounded.deep++
    if (payload.includes(LONG_ID_ECHO)) stats.bounded.longId++
    if (payload.includes(LONG_TOKEN_ECHO)) stats.bounded.longToken++
  }

  // Never a 5xx.
  if (status >= 500) throw new Error(`5xx: ${where}`)
  // 4xx bodies are JSON-RPC error objects.
  if (status >= 400 && text !== '') {
    let parsed: unknown
    try { parsed = JSON.parse(text) } catch { throw new Error(`4xx body is not JSON: ${where}`) }
    if (!isJsonRpcError(parsed)) throw new Error(`4xx body is not a JSON-RPC error: ${where}`)
    if (process.env.FC_DEBUG !== undefined) {
      const m = `${status} ${String((parsed as { error: { message: string } }).error.message).slice(0, 60)}`
      debug.set(m, (debug.get(m) ?? 0) + 1)
    }
    if (!ctype.startsWith('application/json')) throw new Error(`4xx body without application/json: ${where}`)
  }
  // A malformed MCP-Protocol-Version is refused (400) on every request naming a session, and on GET
  // and DELETE (surrounding whitespace is not part of a header value: real HTTP parsers strip it). (Session-less POSTs with an unknown version are routed to the 2026-07-28 wire,
  // which answers notifications 202 without looking at the version: see the report.)
  const pv = h['mcp-protocol-version']
  if (pv !== undefined && !/^\d{4}-\d{2}-\d{2}$/.test(pv.trim()) && status >= 200 && status < 300 && (sid !== undefined || method !== 'POST')) {
    throw new Error(`a malformed MCP-Protocol-Version ${JSON.stringify(pv)} was accepted: ${where}`)
  }
  // Sessions: created only by a successful initialize, and handed out.
  if (createdNow.length > 0) {
    if (status < 200 || status > 299) throw new Error(`a refused request created session(s) ${createdNow.join(',')}: ${where}`)
    if (createdNow.length !== 1 || res.headers['mcp-session-id'] !== createdNow[0]) {
      throw new Error(`created ${createdNow.length} session(s) but answered mcp-session-id ${String(res.headers['mcp-session-id'])}`)
    }
    stats.sessionsCreated++
    const stored = await store.load(createdNow[0])
    stats.largestStored = Math.max(stats.largestStored, JSON.stringify(stored?.data ?? {}).length)
    const version = ((): string => {
      try {
        const events = ctype.startsWith('text/event-stream') ? sseEvents(text).filter(e => e.data !== '').map(e => JSON.parse(e.data)) : [JSON.parse(text)]
        return String((events.find(e => isObj(e) && isObj(e.result)) as { result: { protocolVersion: string } }).result.protocolVersion)
      } catch { return '2025-11-25' }
    })()
    if (pool.length < 30) pool.push({ sid: createdNow[0], version })
  } else if (res.headers['mcp-session-id'] !== undefined && method === 'POST' && status === 200) {
    throw new Error(`answered mcp-session-id without creating a session: ${where}`)
  }
  // 2xx bodies are JSON-RPC.
  if (status >= 200 && status < 300 && text !== '') {
    if (ctype.startsWith('text/event-stream')) {
      stats.sse++
      if (open) stats.getStreams++
      for (const e of sseEvents(text)) {
        if (e.id !== undefined && e.id !== '' && eventIds.length < 200) eventIds.push(e.id)
        if (e.data === '') continue
        const m = JSON.parse(e.data) as unknown
        if (!isJsonRpcMessage(m)) throw new Error(`SSE event is not a JSON-RPC message: ${e.data}`)
        if (isObj(m) && typeof m.method === 'string' && isId(m.id) && serverRequestIds.length < 200) serverRequestIds.push(String(m.id))
      }
    } else if (ctype.startsWith('application/json')) {
      const parsed = JSON.parse(text) as unknown
      const list = Array.isArray(parsed) ? parsed : [parsed]
      if (list.length === 0 || !list.every(isJsonRpcResponse)) throw new Error(`2xx JSON body is not JSON-RPC: ${where}`)
    } else {
      throw new Error(`2xx body with content-type ${ctype}: ${where}`)
    }
  }
  if (status === 202 && text !== '') throw new Error(`202 with a body: ${where}`)
  // The bounds: a body nesting too deep never gets past parseBody (a 400 there says why); an id
  // or a token over its bound is never echoed (on this request or any replay); no amplification.
  if (method === 'POST' && depth > MAX_DEPTH) {
    if (status < 300) throw new Error(`a body nesting ${depth} levels was served: ${where}`)
    if (status === 400 && !/"id":null,"error":\{"code":-32600,"message":"Invalid Request: the body nests deeper than 64 levels"/.test(text)) {
      throw new Error(`a body nesting ${depth} levels got another 400: ${where}`)
    }
  }
  if (text.includes(LONG_ID_ECHO) || text.includes(LONG_TOKEN_ECHO)) throw new Error(`an id or a progress token over its bound was echoed: ${where}`)
  if (method === 'POST' && text.length > AMPLIFICATION * (payload?.length ?? 0) + AMPLIFICATION_SLACK) {
    throw new Error(`a ${payload?.length ?? 0}-byte POST got a ${text.length}-byte answer: ${where}`)
  }
  // A successful DELETE ends the session.
  if (method === 'DELETE' && status === 200 && sid !== undefined) {
    const i = pool.findIndex(s => s.sid === sid)
    if (i !== -1) pool.splice(i, 1)
    if (dead.length < 50) dead.push(sid)
    if (await store.exists(sid)) throw new Error('DELETE answered 200 but the session still exists')
  }
}

/** A full GC (for heap measures): `--expose-gc` turned on at run time, `gc` taken from a fresh context. */
v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void
function heapAfterGc (): number {
  gc()
  gc()
  return process.memoryUsage().heapUsed
}

let heapBefore = 0

t.test('random bodies and headers never break the endpoint', async t => {
  const started = Date.now()
  await refillPool()
  heapBefore = heapAfterGc()
  const sizeBefore = store.size
  const createsBefore = creates
  const destroysBefore = destroys
  await fc.assert(fc.asyncProperty(requestArb, runOne), { seed: SEED, numRuns: RUNS, endOnFailure: true })
  t.pass(`${RUNS} runs (seed ${SEED}) in ${Date.now() - started} ms`)
  t.comment(`statuses: ${JSON.stringify(Object.fromEntries([...stats.status].sort((a, b) => a[0] - b[0])))}; SSE responses ${stats.sse} (GET streams ${stats.getStreams}); sessions created by fuzzed requests ${stats.sessionsCreated}`)
  if (process.env.FC_DEBUG !== undefined) t.comment(JSON.stringify([...debug].sort((a, b) => b[1] - a[1]), null, 1))
  t.ok(stats.sessionsCreated > 0, 'some fuzzed initialize requests succeeded')
  const b = stats.bounded
  t.ok(b.deep > 0 && b.longId > 0 && b.longToken > 0, `POSTs past the bounds: ${JSON.stringify(b)}`)
  t.ok((stats.status.get(200) ?? 0) > RUNS / 20, 'a fair share of requests got past the checks')
  t.equal(store.size - sizeBefore, (creates - createsBefore) - (destroys - destroysBefore), 'the store holds exactly the sessions created minus those deleted')
})

t.test('the server still works afterwards, and nothing leaked', async t => {
  await sleep(50) // pending client requests time out (30 ms)
  t.equal(app.mcp.status().sessionsHeld, 0, 'the hub holds nothing for any session')
  t.equal(bus.channels, baseChannels, 'no session bus subscription left')

  // What the run left behind is small: every stored session (as created, and as it is now), and
  // the heap as a whole (the event logs keep the SSE events of the last 5 minutes, progress
  // notifications included).
  let largest = 0
  let live = 0
  for (const id of createdAll) {
    const rec = await store.load(id)
    if (rec === null) continue
    live++
    largest = Math.max(largest, JSON.stringify(rec.data).length)
  }
  t.ok(stats.largestStored <= MAX_STORED_SESSION, `the largest session a fuzzed initialize stored took ${stats.largestStored} characters (at most ${MAX_STORED_SESSION})`)
  t.ok(largest <= MAX_STORED_SESSION, `the largest of the ${live} sessions left takes ${largest} characters`)
  const growth = heapAfterGc() - heapBefore
  t.ok(growth < MAX_HEAP_GROWTH, `the heap grew by ${(growth / 1048576).toFixed(1)} MiB over the run (less than ${MAX_HEAP_GROWTH / 1048576} MiB)`)

  const before = creates
  const sid = await initialize(LEGACY)
  t.equal(creates, before + 1)
  const res = await app.inject({
    method: 'POST',
    url: '/mcp',
    headers: sessionHeaders({ sid, version: LEGACY }),
    payload: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'add', arguments: { a: 2, b: 3 } } }
  })
  t.equal(res.statusCode, 200)
  t.same(res.json(), { jsonrpc: '2.0', id: 1, result: { structuredContent: { sum: 5 }, content: [{ type: 'text', text: '{"sum":5}' }] } })
  t.equal(({} as Record<string, unknown>).polluted, undefined, 'no prototype pollution')
})
