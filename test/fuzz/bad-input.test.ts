/**
 * Property-based fuzzing of the endpoint with `app.inject()`: random bodies (JSON values, near-valid
 * JSON-RPC messages and batches, garbage, large strings) and random header sets on POST, GET and
 * DELETE. Whatever arrives:
 *   - never a 5xx;
 *   - a 4xx with a body carries a JSON-RPC error object;
 *   - 2xx bodies are JSON-RPC (JSON or SSE events);
 *   - a session is created only by a successful initialize, and its id is the one handed out;
 *   - a malformed MCP-Protocol-Version is never accepted on a request naming a session, GET or DELETE;
 *   - the bounds on client input hold (docs/errors-and-bounds.md, "Bounds"): a body nesting deeper than 64 levels, a
 *     string id over 256 characters, a progress token over 256 characters are refused with a 400
 *     and never echoed; a POST's answer is never much larger than its body (no amplification);
 *   - afterwards the server still works, and nothing leaked (sessions, hub entries, bus channels),
 *     every stored session is small, and the heap grew by less than a bound.
 * Bodies include 2026-07-28 (stateless) requests with their Mcp-Method / Mcp-Name headers, and the
 * shapes of the bounds: long ids and tokens, deep nesting, huge initialize params.
 *
 * Deterministic: seed FC_SEED, FC_RUNS runs (default 1,200); their defaults, the bounds and the
 * generators are in fixtures/arbitraries.ts. The harness is stateful (a pool of live sessions, SSE
 * event ids seen), so failures are reported unshrunk.
 * FC_DEBUG=1 prints a tally of the refusal messages.
 */
import t from 'tap'
import fc from 'fast-check'
import Fastify, { type LightMyRequestResponse } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { MemoryBus, MemorySessionStore } from '../../lib/index.js'
import { initialize as initializeApp } from '../helpers/handshake-app.js'
import { sleep } from '../helpers/time.js'
import { fullGc } from '../helpers/gc.js'
import { headers as sessionHeaders, LEGACY } from '../helpers/wire.js'
import { textDepth } from '../helpers/json-depth.js'
import {
  AMPLIFICATION, AMPLIFICATION_SLACK, BODY_LIMIT, bodyText, LONG_ID_ECHO, LONG_TOKEN_ECHO, MAX_DEPTH, MAX_HEAP_GROWTH,
  MAX_STORED_SESSION, CAPS, dead, eventIds, isObj, materialize, MISSING, pool, type Ref, requestArb, type RequestInput,
  resolveRef, RUNS, SEED, serverRequestIds, VERSIONS
} from './fixtures/arbitraries.js'

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
  clientRequestTimeoutMs: 30,
  keepAliveIntervalMs: 0,
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

async function initialize (version: string, capabilities: Record<string, unknown> = {}): Promise<string> {
  const { sid } = await initializeApp(app, { version, capabilities })
  pool.push({ sid, version })
  return sid
}

let refills = 0
async function refillPool (): Promise<void> {
  while (pool.length < 6) {
    refills++
    await initialize(VERSIONS[refills % VERSIONS.length], CAPS[refills % CAPS.length])
  }
  if (pool.length > 30) pool.splice(0, pool.length - 30)
}

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

function heapAfterGc (): number {
  fullGc()
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
  t.comment(`statuses: ${JSON.stringify(Object.fromEntries([...stats.status].sort((a, b) => a[0] - b[0])))}; SSE responses ${stats.sse} (GET streams ${stats.getStreams}); ` +
    `sessions created by fuzzed requests ${stats.sessionsCreated}`)
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
