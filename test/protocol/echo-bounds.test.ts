/**
 * What an error echoes of a client's request is bounded: a name, a key or a path is cut to 128
 * characters (a URI in a "Resource not found" to 2048), and the problems of a tool's arguments are listed up to 10, each cut to 256
 * characters. Before, a tools/call of an unknown 1 MiB name was answered with the 1 MiB name, and
 * arguments with 200k wrong items made 200k validator errors and a 5 MB answer: one request could
 * make the server hold and send several times what it was sent. Both eras where the method exists
 * on both; the answer stays the error the spec gives, only shorter. The request's log lines carry
 * its method and tool name cut the same way.
 */
import t, { type Test } from 'tap'
import { Writable } from 'node:stream'
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { MemorySessionStore } from '../../lib/index.js'

const ACCEPT = 'application/json, text/event-stream'
const LEGACY = '2025-11-25'
const MODERN = '2026-07-28'
const MIB = 'x'.repeat(1024 * 1024)
const CUT = `${'x'.repeat(128)}…`

/** A Standard Schema whose validator reports `count` issues, each quoting `quote`, or throws `quote`. */
function noisySchema (count: number, quote: string, throws = false): object {
  return {
    '~standard': {
      version: 1,
      vendor: 'hand-made',
      validate: () => {
        if (throws) throw new Error(`cannot read ${quote}`)
        return { issues: Array.from({ length: count }, (_, i) => ({ message: `received ${quote}`, path: [{ key: `k${i}` }] })) }
      },
      jsonSchema: { input: () => ({ type: 'object' }), output: () => ({ type: 'object' }) }
    }
  }
}

async function build (t: Test, logs?: string[]): Promise<FastifyInstance> {
  const store = new MemorySessionStore({ sweepInterval: 0 })
  const stream = new Writable({ write (chunk, _enc, cb) { logs?.push(String(chunk)); cb() } })
  const app = Fastify({ logger: logs === undefined ? false : { level: 'info', stream }, bodyLimit: 8 * 1024 * 1024 })
  t.teardown(async () => { await app.close(); await store.close() })
  await app.register(mcp, { sessions: { store, gcProbability: 0 }, requestState: { secret: 'echo-bounds-secret-0123456789' }, keepAliveIntervalMs: 0 })
  app.mcp.tool({ name: 'sum', description: 'Sums', input: Type.Object({ xs: Type.Array(Type.Integer()), o: Type.Optional(Type.Record(Type.String(), Type.Integer())) }) },
    async ({ xs }) => String(xs.length))
  app.mcp.tool({ name: 'noisy', description: 'Many issues', input: noisySchema(10_000, 'y'.repeat(1024)) as never }, async () => 'never')
  app.mcp.tool({ name: 'throwing', description: 'Validator throws', input: noisySchema(0, MIB, true) as never }, async () => 'never')
  app.mcp.prompt({ name: 'p', description: 'A prompt', arguments: [{ name: 'a' }] }, async () => [])
  app.mcp.resource({ uri: 'echo://a', name: 'a', description: 'A' }, async (uri) => ({ uri, text: 'A' }))
  await app.ready()
  return app
}

async function post (app: FastifyInstance, body: unknown, headers: Record<string, string>): Promise<LightMyRequestResponse> {
  return await app.inject({ method: 'POST', url: '/mcp', headers: { accept: ACCEPT, 'content-type': 'application/json', ...headers }, payload: JSON.stringify(body) })
}

async function session (app: FastifyInstance): Promise<Record<string, string>> {
  const init = await post(app, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: LEGACY, capabilities: {}, clientInfo: { name: 'c', version: '1' } } }, {})
  const h = { 'mcp-session-id': String(init.headers['mcp-session-id']), 'mcp-protocol-version': LEGACY }
  await post(app, { jsonrpc: '2.0', method: 'notifications/initialized' }, h)
  return h
}

/** The error message (or a tool error's text) of a short answer. */
function shortAnswer (t: Test, res: LightMyRequestResponse, what: string, limit = 1024): string {
  t.ok(res.body.length < limit, `${what}: ${res.body.length} bytes, under ${limit}`)
  const body = res.json()
  return body.error?.message ?? body.result?.content?.[0]?.text
}

t.test('handshake era: unknown names and keys are echoed cut to 128 characters', async t => {
  const app = await build(t)
  const h = await session(app)
  const cases: Array<[string, string, unknown, string]> = [
    ['unknown tool', 'tools/call', { name: MIB, arguments: {} }, `Invalid params: unknown tool "${CUT}"`],
    ['unknown prompt', 'prompts/get', { name: MIB }, `Invalid params: unknown prompt "${CUT}"`],
    ['a prompt argument key', 'prompts/get', { name: 'p', arguments: { [MIB]: 1 } }, `Invalid params: argument "${CUT}" must be a string`],
    ['completion of an unknown prompt', 'completion/complete', { ref: { type: 'ref/prompt', name: MIB }, argument: { name: 'a', value: 'b' } }, `Invalid params: unknown prompt "${CUT}"`],
    ['completion of an unknown template', 'completion/complete', {
      ref: { type: 'ref/resource', uri: MIB },
      argument: { name: 'a', value: 'b' }
    }, `Invalid params: unknown resource template "${CUT}"`],
    ['an unknown method', MIB, {}, `Method not found: ${CUT}`]
  ]
  for (const [what, method, params, message] of cases) {
    const res = await post(app, { jsonrpc: '2.0', id: 1, method, params }, h)
    t.equal(res.statusCode, 200, what)
    t.equal(shortAnswer(t, res, what), message, what)
  }
})

t.test('Resource not found names the URI in its data, cut to 2048 characters, on both eras', async t => {
  const app = await build(t)
  const h = await session(app)
  const legacy = await post(app, { jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri: MIB } }, h)
  t.equal(shortAnswer(t, legacy, 'handshake era', 4096), 'Resource not found')
  t.equal(legacy.json().error.code, -32002)
  t.equal(legacy.json().error.data.uri, `${MIB.slice(0, 2048)}…`)
  t.equal((await post(app, { jsonrpc: '2.0', id: 2, method: 'resources/read', params: { uri: 'echo://none' } }, h)).json().error.data.uri, 'echo://none', 'a URI of ordinary length is echoed whole')

  const uri = 'u'.repeat(8000)
  const meta = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} }
  const modern = await post(app, { jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri, _meta: meta } },
    { 'mcp-protocol-version': MODERN, 'mcp-method': 'resources/read', 'mcp-name': uri })
  t.equal(shortAnswer(t, modern, '2026-07-28', 4096), 'Resource not found')
  t.equal(modern.json().error.data.uri, `${uri.slice(0, 2048)}…`)
})

t.test('a cut through a surrogate pair still answers well-formed JSON', async t => {
  const app = await build(t)
  const h = await session(app)
  const name = `a${'😀'.repeat(200)}` // the cut at 128 code units falls inside a pair
  const res = await post(app, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: {} } }, h)
  t.equal(shortAnswer(t, res, 'emoji name'), `Invalid params: unknown tool "${name.slice(0, 128)}…"`)
})

t.test('the log lines of a request carry its method and tool name cut', async t => {
  const logs: string[] = []
  const app = await build(t, logs)
  const h = await session(app)
  logs.length = 0
  await post(app, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: MIB, arguments: {} } }, h)
  await post(app, { jsonrpc: '2.0', id: 2, method: MIB, params: {} }, h)
  t.ok(logs.length >= 4, `${logs.length} lines: each request's incoming and completed lines at least`)
  for (const line of logs) t.ok(line.length < 2048, `a line of ${line.length} characters`)
  const done = logs.map(l => JSON.parse(l) as Record<string, unknown>).filter(l => l.mcpMethod !== undefined)
  t.ok(done.some(l => l.mcpMethod === 'tools/call' && l.mcpTool === CUT), 'the tool, cut')
  t.ok(done.some(l => l.mcpMethod === CUT), 'the method, cut')
})

t.test('an unsupported MCP-Protocol-Version header is echoed cut', async t => {
  const app = await build(t)
  const h = await session(app)
  const res = await post(app, { jsonrpc: '2.0', id: 1, method: 'ping' }, { ...h, 'mcp-protocol-version': 'v'.repeat(8000) })
  t.equal(res.statusCode, 400)
  t.equal(shortAnswer(t, res, 'version header'), `Bad Request: unsupported MCP-Protocol-Version "${'v'.repeat(128)}…"`)
})

t.test('2026-07-28: an unknown tool named in Mcp-Name (up to the header limit) is echoed cut', async t => {
  const app = await build(t)
  const name = 'n'.repeat(8000)
  const meta = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} }
  const res = await post(app, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: {}, _meta: meta } },
    { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': name })
  t.match(shortAnswer(t, res, 'modern unknown tool'), `unknown tool "${'n'.repeat(128)}…"`)
})

t.test('invalid tool arguments: the first problem, its path cut; not one problem per wrong item', async t => {
  const app = await build(t)
  const h = await session(app)
  const call = async (name: string, args: unknown): Promise<LightMyRequestResponse> =>
    await post(app, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } }, h)

  // ~1 MiB of wrong items: was a 5 MB answer listing each, and as many validator errors held.
  const many = await call('sum', { xs: new Array(200_000).fill('a') })
  t.equal(shortAnswer(t, many, 'many wrong items'), 'Invalid arguments for tool "sum": /xs/0 must be integer')
  t.equal(many.json().result.isError, true, 'still a tool error (SEP-1303), not a protocol error')

  const key = await call('sum', { xs: [], o: { [MIB]: 'not a number' } })
  const text = shortAnswer(t, key, 'a 1 MiB key in the path')
  t.equal(text, `Invalid arguments for tool "sum": ${`/o/${MIB}`.slice(0, 256)}…`)

  t.equal((await call('sum', { xs: [1, 2] })).json().result.content[0].text, '2', 'valid arguments still pass')
})

t.test('a Standard Schema: at most 10 issues listed, each cut; a thrown message cut', async t => {
  const app = await build(t)
  const h = await session(app)
  const noisy = await post(app, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'noisy', arguments: {} } }, h)
  const text = shortAnswer(t, noisy, '10,000 issues of 1 KiB', 4096)
  t.equal(text.split('; ').length, 11, 'ten issues and the count of the rest')
  t.match(text, /^Invalid arguments for tool "noisy": \/k0 received y{200,}…; \/k1 received/)
  t.match(text, /; and 9990 more$/)

  const throwing = await post(app, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'throwing', arguments: {} } }, h)
  t.match(shortAnswer(t, throwing, 'a thrown 1 MiB message'), /^Invalid arguments for tool "throwing": validation failed: cannot read x+…$/)
})
