/**
 * The peer versions an app may already have, each in a fresh project outside the repo: the
 * plugin's build (declarations and JavaScript of lib/, the same tsc as `npm run build`) installed
 * next to exact versions of ioredis, TypeBox, zod and ArkType, then
 *   - consumer .ts files type-checked under `strict` with `skipLibCheck: false` by the repo's
 *     TypeScript: the handler's arguments and `structuredContent` are inferred from each schema
 *     library (the `@ts-expect-error` lines fail the check if a type were `any` or `unknown`),
 *     and each ioredis client (standalone and Cluster) is accepted where the plugin takes one;
 *   - node scripts against the built JavaScript: schemas validated at call time, zod without a
 *     JSON Schema converter refused at definition time, the store, lock, bus and event log
 *     working on an ioredis 5 and an ioredis 6 client (a private redis-server), and an app
 *     without ioredis serving (and told clearly what is missing when it asks for Redis).
 *
 * The projects (the matrix, exact versions):
 *   oldest   ioredis 5.11.1, @sinclair/typebox 0.33.22, zod 4.2.0 (the first with a converter)
 *   current  ioredis 6, @sinclair/typebox 0.34, zod 4 (the repo's three), typebox 1.4.3 (the
 *            `typebox` package), arktype 2.2.10
 *   zod-4.1  zod 4.1.13 (no JSON Schema converter: refused at definition time)
 *   ioredis-5 ioredis 5.11.1 alone (the plugin loads it: its scripts go out as ioredis 5 Commands)
 *   noredis  no ioredis at all
 * The packages come from the npm cache (or the registry, the first time).
 */
import t, { type Test } from 'tap'
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { mustRun, ROOT, run, TSC, versionOf } from '../helpers/npm.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { NO_REDIS_RUN, REDIS_RUN, REDIS_TS, schemasRun, schemasTs, TYPEBOX1_TS } from './fixtures/peer-sources.js'

// Four tsc runs with skipLibCheck off: on two cores, with three or four files of the suite at a
// time, this file took up to 273 s.
t.setTimeout(600_000)

const work = await mkdtemp(join(tmpdir(), 'mcp-peers-'))
t.teardown(() => rm(work, { recursive: true, force: true }))

// ---- the build and the packages ---------------------------------------------------------------

const pkg = join(work, 'pkg')
const store = join(work, 'store')

const VERSIONS = {
  'ioredis-5': 'ioredis@5.11.1',
  'ioredis-6': `ioredis@${await versionOf('ioredis')}`,
  'sinclair-0.33': '@sinclair/typebox@0.33.22',
  'sinclair-0.34': `@sinclair/typebox@${await versionOf('@sinclair/typebox')}`,
  'typebox-1': 'typebox@1.4.3',
  'zod-4.1': 'zod@4.1.13',
  'zod-4.2': 'zod@4.2.0',
  'zod-current': `zod@${await versionOf('zod')}`,
  'arktype-2': 'arktype@2.2.10'
} as const
type Alias = keyof typeof VERSIONS

await t.test('build the plugin and install the peer versions', async t => {
  const repoPkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as Record<string, unknown>
  await mkdir(pkg, { recursive: true })
  await mustRun(process.execPath, [TSC, '-p', join(ROOT, 'tsconfig.json'), '--outDir', join(pkg, 'dist')], ROOT)
  await writeFile(join(pkg, 'package.json'), JSON.stringify({
    name: repoPkg.name, version: repoPkg.version, type: repoPkg.type, main: repoPkg.main, types: repoPkg.types, exports: repoPkg.exports
  }, null, 2))
  await mkdir(store)
  await writeFile(join(store, 'package.json'), JSON.stringify({ name: 'peers-store', version: '1.0.0', private: true }))
  await mustRun('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error',
    ...Object.entries(VERSIONS).map(([alias, spec]) => `${alias}@npm:${spec}`)], store)
  for (const [alias, spec] of Object.entries(VERSIONS)) {
    const installed = JSON.parse(await readFile(join(store, 'node_modules', alias, 'package.json'), 'utf8')) as { version: string }
    t.equal(installed.version, spec.slice(spec.lastIndexOf('@') + 1), `${alias} is ${spec}`)
  }
})

/** The plugin's own runtime dependencies and fastify, from the repo (as the pack test does). */
const FROM_REPO = ['fastify', '@types/node', '@fastify/error', '@opentelemetry/api', 'ajv', 'ajv-formats', 'fastify-plugin', 'jose']

/**
 * A project: the build copied in, the repo's fastify, and the packages `peers` names (under their
 * real names); `nested` ones go under the plugin's own node_modules (a second copy, as a package
 * manager installs a dependency whose range the app's version does not meet).
 */
async function project (name: string, peers: Partial<Record<string, Alias>>, files: Record<string, string>,
  nested: Partial<Record<string, Alias>> = {}): Promise<string> {
  const dir = join(work, name)
  const modules = join(dir, 'node_modules')
  await mkdir(modules, { recursive: true })
  await cp(pkg, join(modules, 'fastify-mcp-http'), { recursive: true })
  const links: Array<[string, string]> = [
    ...FROM_REPO.map(n => [n, join(ROOT, 'node_modules', n)] as [string, string]),
    ...Object.entries(peers).map(([n, alias]) => [n, join(store, 'node_modules', alias as string)] as [string, string]),
    ...Object.entries(nested).map(([n, alias]) => [join('fastify-mcp-http', 'node_modules', n), join(store, 'node_modules', alias as string)] as [string, string])
  ]
  for (const [n, target] of links) {
    await mkdir(dirname(join(modules, n)), { recursive: true })
    await symlink(target, join(modules, n), 'dir')
  }
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name, version: '1.0.0', private: true, type: 'module' }))
  await writeFile(join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', types: ['node'], strict: true, skipLibCheck: false, noEmit: true
    },
    files: Object.keys(files).filter(f => f.endsWith('.ts'))
  }, null, 2))
  for (const [file, text] of Object.entries(files)) await writeFile(join(dir, file), text)
  return dir
}

/** Type-checks a project; the diagnostics by file (relative to the project; others by their path). */
async function typecheck (dir: string): Promise<Map<string, string[]>> {
  const { stdout } = await run(process.execPath, [TSC, '-p', 'tsconfig.json', '--pretty', 'false'], dir)
  const byFile = new Map<string, string[]>()
  let last = ''
  for (const line of stdout.split('\n')) {
    const m = /^(.+?)\(\d+,\d+\): error /.exec(line)
    if (m !== null) last = m[1] as string
    else if (line.trim() === '' || last === '') continue
    byFile.set(last, [...byFile.get(last) ?? [], line])
  }
  return byFile
}

/** Runs a node script of a project; its last stdout line is JSON. */
async function runScript (dir: string, file: string, args: string[] = []): Promise<any> {
  const r = await mustRun(process.execPath, [file, ...args], dir)
  return JSON.parse(r.stdout.trim().split('\n').pop() ?? '')
}

// ---- the consumer files: test/package/fixtures/peer-sources.ts

// ---- the projects -------------------------------------------------------------------------------

function noErrors (t: Test, byFile: Map<string, string[]>, pick: (file: string) => boolean, what: string): void {
  const found = [...byFile].filter(([file]) => pick(file)).flatMap(([, lines]) => lines)
  t.same(found, [], what)
}

const isDeclaration = (file: string): boolean => file.includes('node_modules/fastify-mcp-http/')

for (const [name, peers, options, nested] of [
  // The app's ioredis 5 next to a copy of ioredis 6 under the plugin (what npm installs while the
  // plugin depends on ioredis ^6): the layout of the reported "'Redis' is not assignable".
  ['oldest', { ioredis: 'ioredis-5', '@sinclair/typebox': 'sinclair-0.33', zod: 'zod-4.2' }, { arktype: false, typebox1: false }, { ioredis: 'ioredis-6' }],
  ['current', { ioredis: 'ioredis-6', '@sinclair/typebox': 'sinclair-0.34', zod: 'zod-current', arktype: 'arktype-2', typebox: 'typebox-1' },
    { arktype: true, typebox1: true }, {}]
] as const) {
  const nestedNote = Object.keys(nested).length > 0 ? ' (and ioredis 6 under the plugin)' : ''
  await t.test(`${name}: ${Object.entries(peers).map(([n, a]) => `${n} ${VERSIONS[a].slice(VERSIONS[a].lastIndexOf('@') + 1)}`).join(', ')}${nestedNote}`, async t => {
    const dir = await project(name, peers, {
      'redis.ts': REDIS_TS,
      'schemas.ts': schemasTs({ typebox: '@sinclair/typebox', zod: true, arktype: options.arktype }),
      ...options.typebox1 ? { 'typebox1.ts': TYPEBOX1_TS } : {},
      'schemas-run.mjs': schemasRun({ typebox: '@sinclair/typebox', zod: 'ok', arktype: options.arktype, typebox1: options.typebox1 }),
      'redis-run.mjs': REDIS_RUN
    }, nested)
    const diagnostics = await typecheck(dir)
    noErrors(t, diagnostics, f => f === 'schemas.ts', 'schemas.ts type-checks: arguments and structuredContent inferred')
    if (options.typebox1) noErrors(t, diagnostics, f => f === 'typebox1.ts', 'TypeBox 1.x: arguments inferred as its Static type, structuredContent checked')
    t.test('Redis clients type-check', async t => {
      noErrors(t, diagnostics, f => f === 'redis.ts' || isDeclaration(f), 'redis.ts type-checks against the declarations')
    })
    noErrors(t, diagnostics, f => !['redis.ts', 'schemas.ts', 'typebox1.ts'].includes(f) && !isDeclaration(f), 'no other diagnostics (the libraries\' own declarations)')

    const ran = await runScript(dir, 'schemas-run.mjs')
    const tools = ['tb', 'zod', ...options.arktype ? ['ark'] : [], ...options.typebox1 ? ['tb1'] : []]
    t.same(Object.keys(ran.calls).sort(), tools.sort(), 'every library\'s tool was listed and called')
    for (const tool of tools) {
      t.same(ran.calls[tool]?.good?.content, [{ type: 'text', text: 'ok' }], `${tool}: valid arguments reach the handler`)
      t.equal(ran.calls[tool]?.bad?.isError, true, `${tool}: invalid arguments are a tool error`)
      t.match(ran.tools[tool], { type: 'object', properties: { a: { type: 'string', minLength: 2 } } }, `${tool}: advertised as JSON Schema`)
    }

    await t.test('the store, lock, bus and event log on this ioredis', async t => {
      const server = await startRedisServer(t)
      const redis = await runScript(dir, 'redis-run.mjs', [server.url]).catch((err: Error) => ({ error: err.message }))
      t.equal(redis.ioredis, VERSIONS[peers.ioredis].slice(VERSIONS[peers.ioredis].lastIndexOf('@') + 1), 'the app\'s ioredis ran')
      t.same(redis.results, [{ status: 200, ids: true, text: '1' }, { status: 200, ids: true, text: '2' }],
        'two calls on one session: stored, locked, streamed through the event log')
      t.ok(redis.keys > 0, 'the session is in Redis')
      // (With a second ioredis under the plugin, the app's client of the other copy keeps evalsha().)
      if (Object.keys(nested).length === 0) t.equal(redis.evalshaCalls, 0, 'scripts sent as Commands of the app\'s ioredis, never through evalsha()')
    })
  })
}

await t.test(`ioredis ${VERSIONS['ioredis-5'].split('@')[1]} alone: the plugin loads it, and sends its scripts as its Commands`, async t => {
  const dir = await project('ioredis-5', { ioredis: 'ioredis-5' }, { 'redis-run.mjs': REDIS_RUN })
  const server = await startRedisServer(t)
  const redis = await runScript(dir, 'redis-run.mjs', [server.url])
  t.equal(redis.ioredis, VERSIONS['ioredis-5'].split('@')[1])
  t.same(redis.results, [{ status: 200, ids: true, text: '1' }, { status: 200, ids: true, text: '2' }], 'two calls on one session')
  t.equal(redis.evalshaCalls, 0, 'never through evalsha()')
})

await t.test(`zod ${VERSIONS['zod-4.1'].split('@')[1]}: no JSON Schema converter, refused at definition time`, async t => {
  const dir = await project('zod-4.1', { zod: 'zod-4.1', ioredis: 'ioredis-6' }, {
    'schemas-run.mjs': schemasRun({ typebox: '', zod: 'refused', arktype: false, typebox1: false })
  })
  const ran = await runScript(dir, 'schemas-run.mjs')
  t.equal(ran.zodRefused?.code, 'FST_ERR_MCP_INVALID_DEFINITION', 'FST_ERR_MCP_INVALID_DEFINITION')
  t.match(ran.zodRefused?.message, /input is a Standard Schema \(vendor "zod"\) without a JSON Schema converter .*zod ≥ 4\.2/)
  t.same(ran.tools, {}, 'never listed')
})

await t.test('noredis: an app without ioredis', async t => {
  const dir = await project('noredis', {}, {
    'schemas.ts': schemasTs({ typebox: '', zod: false, arktype: false }),
    'no-redis-run.mjs': NO_REDIS_RUN
  })
  const diagnostics = await typecheck(dir)
  noErrors(t, diagnostics, f => f === 'schemas.ts', 'a tool without input, ctx.state')
  t.test('the declarations type-check without ioredis installed', async t => {
    noErrors(t, diagnostics, isDeclaration, 'no diagnostics in the plugin\'s declarations')
  })
  noErrors(t, diagnostics, f => f !== 'schemas.ts' && !isDeclaration(f), 'no other diagnostics')

  await t.test('it serves, and asking for Redis says what is missing', async t => {
    const out = await runScript(dir, 'no-redis-run.mjs').catch((err: Error) => ({ error: err.message }))
    t.equal(out.served, 200, 'the plugin loads and serves without ioredis')
    t.match(out.lock, /need the "ioredis" package \(version 5 or 6\), which is not installed/, 'RedisSessionLock from a URL')
    t.match(out.plugin, /need the "ioredis" package \(version 5 or 6\), which is not installed/, 'the redis option with a URL')
  })
})
