/**
 * The package as a user receives it: `npm pack` (the package's own lifecycle scripts build dist/),
 * the tarball installed next to fastify in a fresh project outside the repo, then
 *   (a) imported from ESM, registered on a Fastify app, answering tools/call on both wires;
 *   (b) the same through `require()` from CommonJS (require(esm), Node >= 20.19);
 *   (c) a consumer .ts using the README's public API type-checked under `strict` with
 *       `skipLibCheck: false`, by the repo's own TypeScript;
 *   (d) the file lock's native addon: not loaded by importing or serving, loaded by
 *       FileSessionLock, and, once uninstalled (`--omit=optional`), a clear error from it alone;
 *   (e) the test kit (`fastify-mcp-http/testing/contracts`) run by `node --test` on the project's
 *       own files: the memory store and lock pass, a store of the project's own that re-creates
 *       destroyed records fails exactly the cases named for that rule.
 * Nothing is mocked: the real npm, the npm cache (or the registry) and fresh Node processes, with
 * the test runner's NODE_OPTIONS removed so no loader of ours helps the consumer.
 */
import t, { type Test } from 'tap'
import { existsSync } from 'node:fs'
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { mustRun, ROOT, run, versionOf } from '../helpers/npm.js'

// Packing builds dist/ (a few seconds of tsc) and installing takes a few more with a warm cache;
// on two cores, with three or four files of the suite at a time, this file took up to 137 s.
t.setTimeout(480_000)

async function filesUnder (dir: string): Promise<string[]> {
  const out: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) out.push(relative(dir, join(entry.parentPath, entry.name)).split(sep).join('/'))
  }
  return out.sort()
}

const work = await mkdtemp(join(tmpdir(), 'mcp-pack-'))
t.teardown(() => rm(work, { recursive: true, force: true }))
const app = join(work, 'app')
const installed = join(app, 'node_modules', 'fastify-mcp-http')

/** The exercise both module systems run: a tool, then tools/call on the 2026-07-28 and 2025 wires. */
const EXERCISE = `
async function exercise (Fastify, mcp, Type) {
  const app = Fastify({ logger: false })
  await app.register(mcp, { serverInfo: { name: 'consumer', version: '1.0.0' }, requestState: { secret: 'pack-test-secret-0123456789' } })
  app.mcp.tool({
    name: 'add',
    description: 'Adds two numbers',
    input: Type.Object({ a: Type.Number(), b: Type.Number() }),
    output: Type.Object({ sum: Type.Number() })
  }, async ({ a, b }, ctx) => {
    ctx.session?.set('last', a + b)
    return { structuredContent: { sum: a + b } }
  })
  const base = { accept: 'application/json, text/event-stream', 'content-type': 'application/json' }
  const post = (headers, body) => app.inject({ method: 'POST', url: '/mcp', headers: { ...base, ...headers }, payload: JSON.stringify(body) })
  const out = {}

  const modern = await post({ 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'add' }, {
    jsonrpc: '2.0', id: 1, method: 'tools/call',
    params: {
      name: 'add', arguments: { a: 2, b: 3 },
      _meta: {
        'io.modelcontextprotocol/protocolVersion': '2026-07-28',
        'io.modelcontextprotocol/clientCapabilities': {},
        'io.modelcontextprotocol/clientInfo': { name: 'pack-test', version: '1.0.0' }
      }
    }
  })
  out.modern = { status: modern.statusCode, body: modern.body }

  const init = await post({}, {
    jsonrpc: '2.0', id: 2, method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'pack-test', version: '1.0.0' } }
  })
  const session = { 'mcp-session-id': String(init.headers['mcp-session-id']), 'mcp-protocol-version': '2025-11-25' }
  const ack = await post(session, { jsonrpc: '2.0', method: 'notifications/initialized' })
  const legacy = await post(session, { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'add', arguments: { a: 20, b: 22 } } })
  out.legacy = { init: init.statusCode, ack: ack.statusCode, status: legacy.statusCode, body: legacy.body }
  await app.close()
  return out
}
`

/** What one consumer script printed (its last stdout line is JSON). */
interface Report {
  system: string
  exports: string[]
  modern: { status: number, body: string }
  legacy: { init: number, ack: number, status: number, body: string }
}

function checkReport (t: Test, report: Report): void {
  t.equal(report.modern.status, 200, `2026-07-28 tools/call answered 200: ${report.modern.body}`)
  const modern = JSON.parse(report.modern.body) as { id: number, result?: { structuredContent?: unknown, isError?: boolean } }
  t.same(modern.result?.structuredContent, { sum: 5 }, '2026-07-28 tools/call result')
  t.notOk(modern.result?.isError, 'not a tool error')
  t.equal(report.legacy.init, 200, 'initialize answered')
  t.equal(report.legacy.ack, 202, 'notifications/initialized accepted')
  t.equal(report.legacy.status, 200, `2025-11-25 tools/call answered 200: ${report.legacy.body}`)
  const legacy = JSON.parse(report.legacy.body) as { id: number, result?: { structuredContent?: unknown } }
  t.same(legacy.result?.structuredContent, { sum: 42 }, '2025-11-25 tools/call result')
  for (const name of ['default', 'fastifyMcp', 'MemorySessionStore', 'FileSessionStore', 'RedisSessionStore',
    'MemorySessionLock', 'FileSessionLock', 'RedisSessionLock', 'FST_ERR_MCP_INVALID_OPTION', 'SessionLockError']) {
    t.ok(report.exports.includes(name), `exports ${name}`)
  }
}

async function runConsumer (file: string): Promise<Report> {
  const { stdout } = await mustRun(process.execPath, [file], app, 60_000)
  const last = stdout.trim().split('\n').pop() ?? ''
  return JSON.parse(last) as Report
}

let tarball = ''
let listing: string[] = []

t.test('npm pack builds dist/ and packs only what a user needs', async t => {
  const dest = join(work, 'tarball')
  await mkdir(dest)
  await mustRun('npm', ['pack', '--pack-destination', dest], ROOT)
  const made = (await readdir(dest)).filter(f => f.endsWith('.tgz'))
  t.equal(made.length, 1, `one tarball: ${made.join(', ')}`)
  tarball = join(dest, made[0] as string)
  listing = (await mustRun('tar', ['-tzf', tarball], work)).stdout.split('\n').filter(Boolean)
    .map(p => p.replace(/^package\//, '')).sort()

  for (const needed of ['package.json', 'README.md', 'LICENSE', 'dist/index.js', 'dist/index.d.ts']) {
    t.ok(listing.includes(needed), `the tarball has ${needed}`)
  }
  // No maps (see tsconfig.json), hence no lib/ sources for them to point at.
  const stray = listing.filter(p => !/^(package\.json|README\.md|LICENSE|CHANGELOG\.md|docs\/.+\.md|docs\/img\/[^/]+\.svg|dist\/.+\.(js|d\.ts))$/.test(p))
  t.same(stray, [], 'nothing but package.json, README, LICENSE, CHANGELOG, docs/*.md and charts (the README links to them) and dist/*.js, *.d.ts (no tests, bench, scripts, examples, .tap, maps)')

  // dist/ is exactly the build of lib/: every module is there, and nothing else (a stale module, or
  // tests compiled by a build config that reaches beyond lib/).
  const sources = (await filesUnder(join(ROOT, 'lib'))).filter(f => f.endsWith('.ts') && !f.endsWith('.d.ts'))
  const expected = sources.map(f => `dist/${f.replace(/\.ts$/, '.js')}`).sort()
  t.same(listing.filter(p => p.endsWith('.js')), expected, 'one dist/*.js per lib/*.ts')
  t.same(listing.filter(p => p.endsWith('.d.ts')), expected.map(f => f.replace(/\.js$/, '.d.ts')), 'one dist/*.d.ts per lib/*.ts')
})

t.test('a fresh project installs the tarball next to fastify', async t => {
  t.ok(tarball, 'packed')
  await mkdir(app)
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true, type: 'module' }, null, 2))
  await mustRun('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', tarball,
    ...await Promise.all(['fastify', '@sinclair/typebox', 'ioredis', '@types/node'].map(async name => `${name}@${await versionOf(name)}`))], app)
  const files = await filesUnder(installed)
  t.ok(files.includes('dist/index.js'), 'installed with dist/')

  // A sourceMappingURL to a map that is not shipped makes debuggers and bundlers warn.
  const dangling: string[] = []
  for (const file of files.filter(f => f.endsWith('.js') || f.endsWith('.d.ts'))) {
    const url = /\/\/# sourceMappingURL=(\S+)\s*$/.exec(await readFile(join(installed, file), 'utf8'))?.[1]
    if (url !== undefined && !files.includes(relative(installed, resolve(dirname(join(installed, file)), url)).split(sep).join('/'))) {
      dangling.push(`${file} -> ${url}`)
    }
  }
  t.same(dangling, [], 'no file names a map that is not shipped')
})

t.test('(a) ESM: import mcp from "fastify-mcp-http", register, tools/call', async t => {
  const file = join(app, 'esm.mjs')
  await writeFile(file, `import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp from 'fastify-mcp-http'
import * as all from 'fastify-mcp-http'
${EXERCISE}
const out = await exercise(Fastify, mcp, Type)
console.log(JSON.stringify({ system: 'esm', exports: Object.keys(all), ...out }))
`)
  checkReport(t, await runConsumer(file))
})

t.test('(b) CommonJS: require("fastify-mcp-http"), register, tools/call', async t => {
  const file = join(app, 'cjs.cjs')
  await writeFile(file, `'use strict'
const Fastify = require('fastify')
const { Type } = require('@sinclair/typebox')
const all = require('fastify-mcp-http')
${EXERCISE}
exercise(Fastify, all.default, Type).then(out => {
  if (all.fastifyMcp !== all.default) throw new Error('fastifyMcp and default differ')
  console.log(JSON.stringify({ system: 'cjs', exports: Object.keys(all), ...out }))
}, err => { console.error(err); process.exitCode = 1 })
`)
  checkReport(t, await runConsumer(file))
})

t.test('(c) a consumer .ts type-checks under strict, skipLibCheck off', async t => {
  await writeFile(join(app, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      types: ['node'],
      strict: true,
      skipLibCheck: false,
      noEmit: true
    },
    files: ['consumer.ts']
  }, null, 2))
  await writeFile(join(app, 'consumer.ts'), CONSUMER)
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
  const listed = await mustRun(process.execPath, [tsc, '-p', 'tsconfig.json', '--listFiles'], app).then(
    ({ stdout }) => stdout.split('\n').map(f => f.trim()).filter(Boolean),
    (err: Error) => {
      // The diagnostics without the list of files.
      throw new Error(err.message.split('\n').filter(line => !/^\S+\.ts$/.test(line.trim())).join('\n'))
    })
  t.ok(listed.some(f => f.endsWith('node_modules/fastify-mcp-http/dist/index.d.ts')), 'checked against the installed declarations')
  const ownTs = join(ROOT, 'node_modules', 'typescript') + sep
  t.same(listed.filter(f => resolve(f).startsWith(ROOT + sep) && !resolve(f).startsWith(ownTs)), [],
    'no file of the repo took part (only the compiler and its lib files)')
})

t.test('(d) the file-lock addon: loaded by FileSessionLock only, optional, and missed clearly', async t => {
  interface Loaded { dlopened: string[], required: string[] }
  interface ProbeReport {
    afterImport: Loaded
    served: unknown
    afterServe: Loaded
    lock: { ok: boolean, name?: string, message?: string, cause?: string }
    afterLock: Loaded
  }
  const none: Loaded = { dlopened: [], required: [] }
  await copyFile(join(ROOT, 'test', 'package', 'fixtures', 'addon-probe.mjs'), join(app, 'addon-probe.mjs'))
  const probe = async (): Promise<ProbeReport> => {
    const scratch = await mkdtemp(join(work, 'probe-'))
    const { stdout } = await mustRun(process.execPath, ['addon-probe.mjs', 'fastify-mcp-http', scratch], app, 60_000)
    return JSON.parse(stdout.trim().split('\n').pop() ?? '') as ProbeReport
  }

  const present = await probe()
  t.same(present.afterImport, none, 'importing the package loads no addon')
  t.same(present.served, { init: 200, call: 200, text: 'hi' }, 'served on a FileSessionStore')
  t.same(present.afterServe, none, 'serving and the file store\'s gc() load no addon')
  t.same(present.lock, { ok: true }, 'FileSessionLock works')
  t.match(present.afterLock.dlopened, [/fs-native-extensions.*\.node$/], 'FileSessionLock loaded the addon (the probe sees it)')

  const lock = JSON.parse(await readFile(join(app, 'package-lock.json'), 'utf8')) as { packages: Record<string, { optional?: boolean }> }
  t.equal(lock.packages['node_modules/fs-native-extensions']?.optional, true, 'npm installed it as an optional dependency')
  await mustRun('npm', ['prune', '--omit=optional', '--no-audit', '--no-fund', '--loglevel=error'], app)
  t.notOk(existsSync(join(app, 'node_modules', 'fs-native-extensions')), '--omit=optional leaves it out')

  const missing = await probe()
  t.same(missing.afterImport, none)
  t.same(missing.served, { init: 200, call: 200, text: 'hi' }, 'the package works without it')
  t.equal(missing.lock.ok, false, 'FileSessionLock refused')
  t.equal(missing.lock.name, 'SessionLockError')
  t.match(missing.lock.message, /needs the optional dependency "fs-native-extensions", which is not installed.*Install it: npm install fs-native-extensions/)
  t.equal(missing.lock.cause, 'MODULE_NOT_FOUND')
})

t.test('(e) the test kit: node --test runs fastify-mcp-http/testing/contracts from a fresh project', async t => {
  // The consumer's own files; the kit needs nothing but Node (node:test, node:assert).
  for (const file of ['kit-memory.mjs', 'kit-broken.mjs']) await copyFile(join(ROOT, 'test', 'package', 'fixtures', file), join(app, file))
  const results = (stdout: string): { ok: string[], notOk: string[] } => ({
    ok: [...stdout.matchAll(/^ok \d+ - (.+?)(?: # .*)?$/gm)].map(m => m[1] as string),
    notOk: [...stdout.matchAll(/^not ok \d+ - (.+?)(?: # .*)?$/gm)].map(m => m[1] as string)
  })

  const memory = await run(process.execPath, ['--test', '--test-reporter=tap', 'kit-memory.mjs'], app, 120_000)
  const passed = results(memory.stdout)
  t.equal(memory.code, 0, `the memory store and lock pass the kit\n${memory.stdout.slice(-3000)}${memory.stderr}`)
  t.same(passed.notOk, [], 'no case failed')
  for (const name of ['store: save after destroy is gone and never brings the session back', 'lock: waiters of one process are served first come, first served',
    'pairing: write saves the changes and ends the lease']) t.ok(passed.ok.includes(name), `ran: ${name}`)
  t.ok(passed.ok.length > 40, `${passed.ok.length} cases passed`)

  const broken = await run(process.execPath, ['--test', '--test-reporter=tap', 'kit-broken.mjs'], app, 120_000)
  t.equal(broken.code, 1, 'a store that re-creates destroyed records fails the run')
  t.same(results(broken.stdout).notOk, [
    'my store: save of an unknown session is gone and creates nothing',
    'my store: save after destroy is gone and never brings the session back',
    'my store: an expired session is gone for every operation, and its id can be reused',
    'my store: a record with a TTL of its own lives and expires by it, refreshed by use'
  ], 'failed by name: the rules it breaks, and only those')
})

/**
 * The README's public API, as a TypeScript user writes it. The `@ts-expect-error` lines fail the
 * check if the handler's arguments were not inferred (an `any` accepts everything).
 */
const CONSUMER = `import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import { Redis } from 'ioredis'
import mcp, {
  FileSessionLock, FileSessionStore, MemorySessionLock, MemorySessionStore, RedisSessionLock, RedisSessionStore,
  FST_ERR_MCP_CAPABILITY, FST_ERR_MCP_CLIENT_TIMEOUT, FST_ERR_MCP_INVALID_OPTION, SessionLockError, SessionLockTimeoutError,
  type McpPluginOptions, type SessionLock, type SessionStore
} from 'fastify-mcp-http'

declare function loadCatalog (): Promise<Array<{ sku: string }>>
declare function loadItem (sku: string): Promise<{ sku: string, price: number }>

const app = Fastify({ logger: true })
const store: SessionStore = new MemorySessionStore({ ttl: 3_600_000, max: 10_000 })
const lock: SessionLock = new MemorySessionLock({ timeout: 30_000 })
const options: McpPluginOptions = { serverInfo: { name: 'shop', version: '1.0.0' }, sessions: { store, lock } }
await app.register(mcp, options)

app.mcp.tool({
  name: 'add_to_cart',
  description: 'Adds an item to the cart of this session',
  input: Type.Object({ sku: Type.String(), qty: Type.Integer({ minimum: 1 }) }),
  output: Type.Object({ items: Type.Integer() })
}, async ({ sku, qty }, ctx) => {
  const name: string = sku
  const count: number = qty
  // @ts-expect-error qty is inferred as a number
  const notAString: string = qty
  void notAString
  const cart = ctx.session?.get<Array<{ sku: string, qty: number }>>('cart') ?? []
  cart.push({ sku: name, qty: count })
  ctx.session?.set('cart', cart)
  await ctx.progress({ progress: 1, total: 1 })
  return { content: [{ type: 'text', text: \`\${cart.length} items\` }], structuredContent: { items: cart.length } }
})

// @ts-expect-error the schema has no argument "colour"
app.mcp.tool({ name: 'paint', input: Type.Object({ sku: Type.String() }) }, async ({ colour }) => String(colour))

app.mcp.resource({ uri: 'shop://catalog', name: 'catalog', description: 'The catalog', mimeType: 'application/json' },
  async (uri) => ({ uri, mimeType: 'application/json', text: JSON.stringify(await loadCatalog()) }))

app.mcp.resourceTemplate({ uriTemplate: 'shop://items/{sku}', name: 'item', description: 'One item' },
  async (uri, { sku }) => ({ uri, text: JSON.stringify(await loadItem(String(sku))) }))

app.mcp.prompt({ name: 'summarize', description: 'Summarize a text', arguments: [{ name: 'text', required: true }] },
  async ({ text }) => [{ role: 'user', content: { type: 'text', text: \`Summarize: \${text}\` } }])

app.get('/cart', async (request) => request.mcpSession?.get<unknown[]>('cart') ?? [])

const redis = new Redis('redis://127.0.0.1:6379', { lazyConnect: true })
const shared = await Fastify().register(mcp, {
  sessions: {
    store: new RedisSessionStore({ redis, ttl: 3_600_000, prefix: 'mcp:' }),
    lock: new RedisSessionLock({ redis: 'redis://127.0.0.1:6379', timeout: 30_000, ttl: 30_000 })
  },
  redis,
  requestState: { secret: 'change-me-0123456789' }
})
void shared

const files = new FileSessionStore({ dir: '/var/lib/mcp/sessions' })
const fileLock = (): FileSessionLock => new FileSessionLock({ dir: '/var/lib/mcp/sessions', timeout: 30_000 })
void fileLock
const removed: string[] = await files.gc()
app.log.info({ removed: removed.length }, 'expired MCP sessions removed')

try {
  await app.ready()
} catch (err) {
  if (err instanceof FST_ERR_MCP_INVALID_OPTION) app.log.error(err.message)
  if (err instanceof SessionLockTimeoutError) app.log.warn(\`\${err.sessionId} \${err.timeout}\`)
  else if (err instanceof SessionLockError) app.log.warn(err.code)
}
const codes: string[] = [new FST_ERR_MCP_CAPABILITY('sampling').code, new FST_ERR_MCP_CLIENT_TIMEOUT('roots/list', 1000).code]
void codes
`
