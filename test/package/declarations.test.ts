/**
 * The published declarations (issue 35): dist/ is built with the build's own config
 * (`tsconfig.json`, `stripInternal`) into a temporary folder, then
 *   (a) no `.d.ts` carries an `@internal` tag: what is internal is stripped, what is left is public;
 *   (b) the members that users must not call (the locks' pass-on paths, the sync twins of the
 *       fast paths, the leases' mutable read) are not declared in their class's `.d.ts`;
 *   (c) a consumer importing the package's one entry type-checks under `strict` with
 *       `skipLibCheck: false`: nothing the entry reaches names a stripped declaration;
 *   (d) so does a program holding every emitted `.d.ts`, also those the entry never reaches
 *       (they ship in the tarball, and a consumer's `skipLibCheck: false` checks whatever its
 *       program pulls in): no declaration names a class or member that was stripped.
 * (c) is what `test/package/pack.test.ts` checks on the packed tarball too; here it runs on the
 * declarations alone, quicker, with the failure naming the file.
 */
import t from 'tap'
import { mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative, sep } from 'node:path'
import ts from 'typescript'
import { mustRun, ROOT, run, TSC } from '../helpers/npm.js'

t.setTimeout(300_000)

/** Per declaration file, the members stripInternal must remove (marked `@internal` in lib/). */
const STRIPPED: Record<string, string[]> = {
  'locks/redis-lock.d.ts': ['acquireWith', 'passOn', 'releaseWith'],
  'locks/pg-lock.d.ts': ['acquireWith', 'passOn', 'releaseWith'],
  'locks/backend-lease.d.ts': ['read', 'readBy'],
  'locks/lease.d.ts': ['releaseNow', 'releasesNow', 'whenLost', 'expiresBy'],
  'locks/memory-lock.d.ts': ['acquireNow'],
  'locks/keyed-fifo.d.ts': ['grantNow'],
  'state/state-scope.d.ts': ['openNow', 'closeNow', 'lockAndLoad'],
  'sessions/memory-store.d.ts': ['loadNow'],
  'sessions/redis-store.d.ts': ['decode'],
  'sessions/session-handle.d.ts': ['getProtocol', 'setProtocol', 'deleteProtocol', 'protocolKeys', 'seal', 'markSaved', 'reload'],
  'decorator.d.ts': ['attach'],
  'telemetry/telemetry.d.ts': ['instruments']
}

/** Whether `dts` declares `member` (a property, accessor or method of a class or interface; comments aside). */
function declares (dts: string, member: string): boolean {
  const code = dts.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '')
  return new RegExp(`^\\s*(?:(?:readonly|static|protected|get|set)\\s+)*${member}\\??\\s*[<(:]`, 'm').test(code)
}

/** The flags of a strict consumer's tsc run, its own checks of the declarations on. */
const CONSUMER_TSC = ['--noEmit', '--strict', '--skipLibCheck', 'false', '--target', 'ES2023', '--lib', 'ES2023',
  '--module', 'NodeNext', '--moduleResolution', 'NodeNext', '--types', 'node']

/** The errors of a tsc run by the file they are in: `{ 'dist/x.d.ts': ['TS2304: Cannot find name …'] }`. */
function errorsByFile (out: string): Record<string, string[]> {
  const byFile: Record<string, string[]> = {}
  for (const line of out.split('\n')) {
    const m = /^(\S.*?)\(\d+,\d+\): error (TS\d+: .*)$/.exec(line)
    if (m !== null) (byFile[m[1]] ??= []).push(m[2])
  }
  return byFile
}

const CONSUMER = `
import Fastify from 'fastify'
import mcp, { MemorySessionLock, RedisSessionLock, PgSessionLock, type McpPluginOptions, type AcquireOptions, type ToolEntry } from './dist/index.js'

const options: McpPluginOptions = { sessions: { lock: new MemorySessionLock() } }
const app = Fastify()
await app.register(mcp, options)
const entries: ToolEntry[] = [...app.mcp.tools.values()]
const acquire: AcquireOptions = { timeout: 1000, signal: new AbortController().signal }
const lease = await new MemorySessionLock().acquire('id', acquire)
await lease?.release()
export const kinds = [entries.length, RedisSessionLock.name, PgSessionLock.name]
`

const work = await mkdtemp(join(tmpdir(), 'mcp-dts-'))
t.teardown(() => rm(work, { recursive: true, force: true }))
const dist = join(work, 'dist')
await mustRun(process.execPath, [TSC, '-p', join(ROOT, 'tsconfig.json'), '--outDir', dist], ROOT)

const files: string[] = []
for (const entry of await readdir(dist, { withFileTypes: true, recursive: true })) {
  if (entry.isFile() && entry.name.endsWith('.d.ts')) files.push(relative(dist, join(entry.parentPath, entry.name)).split(sep).join('/'))
}

t.test('no declaration file carries an @internal tag', async (t) => {
  t.ok(files.includes('index.d.ts'), 'the build wrote the entry declarations')
  const tagged: string[] = []
  for (const file of files) if ((await readFile(join(dist, file), 'utf8')).includes('@internal')) tagged.push(file)
  t.same(tagged, [], 'declaration files with @internal')
})

t.test('the members users must not call are not declared', async (t) => {
  for (const [file, members] of Object.entries(STRIPPED)) {
    const dts = await readFile(join(dist, file), 'utf8')
    for (const member of members) t.notOk(declares(dts, member), `${file} does not declare ${member}`)
  }
  // The accessors of the pairings (the backend locks' engine, the memory backends' steps without a promise) are not published either.
  for (const [file, accessor] of [['locks/redis-lock.d.ts', 'redisLeaseEngine'], ['locks/pg-lock.d.ts', 'pgLeaseEngine'], ['locks/backend-lock.d.ts', 'leaseEngine'],
    ['locks/memory-lock.d.ts', 'memoryLockNow'], ['sessions/memory-store.d.ts', 'memoryLoadNow'], ['locks/memory-lock.d.ts', 'MemoryLease']]) {
    t.notOk((await readFile(join(dist, file), 'utf8')).includes(accessor), `${file} does not declare ${accessor}`)
  }
  // The check itself sees a declaration: the public members next to them are found.
  t.ok(declares(await readFile(join(dist, 'locks/redis-lock.d.ts'), 'utf8'), 'ready'), 'RedisSessionLock.ready is declared')
  t.ok(declares(await readFile(join(dist, 'locks/backend-lock.d.ts'), 'utf8'), 'acquire'), 'the backend locks\' acquire is declared')
  t.ok(declares(await readFile(join(dist, 'locks/lease.d.ts'), 'utf8'), 'release'), 'Lease.release is declared')
})

// The consumer's folder: the package's dependencies, and dist/ beside it as if installed.
await writeFile(join(work, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }))
await symlink(join(ROOT, 'node_modules'), join(work, 'node_modules'), 'dir')

t.test('a consumer of the entry type-checks with skipLibCheck off', async (t) => {
  await writeFile(join(work, 'consumer.ts'), CONSUMER)
  const r = await run(process.execPath, [TSC, ...CONSUMER_TSC, 'consumer.ts'], work)
  t.equal(r.code, 0, 'tsc exits 0')
  t.equal(r.stdout + r.stderr, '', 'tsc reports nothing')
})

t.test('every declaration file type-checks with skipLibCheck off, also those the entry never reaches', async (t) => {
  t.ok(files.length > 1 && files.includes('index.d.ts'), 'the program holds the entry and the rest of dist/')
  const r = await run(process.execPath, [TSC, ...CONSUMER_TSC, ...files.map(f => `dist/${f}`)], work)
  const out = r.stdout + r.stderr
  t.same(errorsByFile(out), {}, 'declaration files with errors, and their errors')
  t.equal(r.code, 0, 'tsc exits 0')
  t.equal(out, '', 'tsc reports nothing')
})

/**
 * The package's API, name by name (values and types): a name added to or dropped from
 * lib/index.ts is a change of the API, made here on purpose.
 */
const PUBLIC_API = [
  'AccessFields', 'AccessRule', 'AcquireOptions', 'AuthError', 'AuthFailureReason', 'AuthOptions', 'AuthPrincipal', 'AuthenticateOptions', 'BackendFailurePolicy',
  'BackendSessionLock', 'Bus', 'BusListener', 'BusMessage', 'CacheKind', 'CacheOptions', 'CallToolResult', 'Checked', 'CompiledTemplate',
  'Completer', 'ContentBlock', 'CreateOptions', 'CreateRedisClientOptions', 'DEFAULT_ALGORITHMS', 'DEFAULT_PG_PREFIX', 'ElicitResult', 'ErrorCode',
  'EventLog', 'EventLogOptions', 'ExpiryListener', 'ExtraMetadata', 'FST_ERR_MCP_CAPABILITY', 'FST_ERR_MCP_CLIENT_REQUEST',
  'FST_ERR_MCP_CLIENT_TIMEOUT', 'FST_ERR_MCP_INVALID_DEFINITION', 'FST_ERR_MCP_INVALID_OPTION', 'FST_ERR_MCP_NO_SESSION',
  'FST_ERR_MCP_SERVER_CLOSING', 'FST_ERR_MCP_SESSION_BUSY', 'FileSessionLock', 'FileSessionLockOptions', 'FileSessionStore',
  'FileSessionStoreOptions', 'FormElicitParams', 'FromJsonSchema', 'GcLogger', 'GcPolicy', 'GcPolicyOptions', 'GetPromptResult', 'HandleAdmin',
  'HandleKind', 'HandleKindOptions', 'HandleMinter', 'Icon', 'IdempotencyOptions', 'Implementation', 'InjectClient', 'InjectClientOptions', 'InjectNotification',
  'InjectRequestOptions', 'InjectToolResult', 'InternalToolError', 'JsonRpcErrorObject', 'JsonValue', 'JwtVerifierOptions', 'LOCK_CLIENT_OPTIONS',
  'LOG_LEVELS', 'LeaseFence', 'LimitBackend', 'LimitDecision', 'LimitKind', 'LimitSpec', 'ListKind', 'LockedSession', 'LockingSessionStore',
  'LogLevel', 'LoggedEvent', 'McpContext', 'McpDecorator', 'McpError', 'McpPluginOptions', 'McpPrincipal', 'McpRegistry', 'McpStatus', 'MemoryBus',
  'MemoryEventLog', 'MemoryLimitBackend', 'MemoryLimitBackendOptions', 'MemorySessionLock', 'MemorySessionLockOptions', 'MemorySessionStore',
  'MemorySessionStoreOptions', 'OutcomeUnknownError', 'POOL_DEFAULTS', 'PgBus', 'PgBusOptions', 'PgClientLike', 'PgEventLog', 'PgEventLogOptions',
  'PgLimitBackend', 'PgLimitBackendOptions', 'PgPoolLike', 'PgQuery', 'PgResult', 'PgSessionLock', 'PgSessionLockOptions', 'PgSessionStore',
  'PgSessionStoreOptions', 'ProgressUpdate', 'PromptArgument', 'PromptDefinition', 'PromptEntry', 'PromptHandle', 'PromptHandler', 'PromptMessage',
  'ProtectedResourceMetadata', 'RateLimit', 'ReadOnlyStateError', 'RedisBus', 'RedisBusOptions', 'RedisClientLike', 'RedisClientLogger',
  'RedisConnectionOptions', 'RedisEventLog', 'RedisEventLogOptions', 'RedisLimitBackend', 'RedisLimitBackendOptions', 'RedisLimitClient',
  'RedisPubSubClient', 'RedisSentinelConnection', 'RedisSessionLock', 'RedisSessionLockOptions', 'RedisSessionStore', 'RedisSessionStoreOptions',
  'RedisStreamsClient', 'RefusalKind', 'Replay', 'ReplicaAck', 'ReplicaAckOptions', 'ResourceContents', 'ResourceDefinition', 'ResourceEntry',
  'ResourceHandle', 'ResourceHandler', 'ResourceReturn', 'ResourceServerOptions', 'ResourceTemplateDefinition', 'ResourceTemplateHandle', 'Root', 'SamplingParams',
  'SamplingResult', 'SaveGuard', 'SaveResult', 'SchemaStatic', 'SessionChanges', 'SessionDataError', 'SessionHandle', 'SessionIdAttribute',
  'SessionLease', 'SessionLock', 'SessionLockError', 'SessionLockTimeoutError', 'SessionOptions', 'SessionRecord', 'SessionStore',
  'SessionStoreOptions', 'StandardJsonSchemaConverter', 'StandardResult', 'StandardSchemaV1', 'StandardSchemaV1Props', 'StructuredToolResult',
  'TaskSupport', 'TelemetryOption', 'TelemetryOptions', 'TemplateEntry', 'TemplateHandler', 'ToolAnnotations', 'ToolArgs', 'ToolDefinition',
  'ToolEntry', 'ToolHandle', 'ToolHandleOption', 'ToolHandler', 'ToolLimit', 'ToolLimitError', 'ToolLimitErrorData', 'ToolLimitsOptions',
  'ToolResultFor', 'ToolReturn', 'ToolSchema', 'ToolStructured', 'ToolUpdate', 'UnconfirmedLeaseError', 'UnconfirmedWriteError', 'UrlElicitParams',
  'Validator', 'VerifyToken', 'createLockClient', 'createPgPool', 'createRedisClient', 'default', 'fastifyMcp', 'hasScopes', 'hashSessionId',
  'injectClient', 'isLockingStore', 'migratePostgres', 'parseSentinels', 'principalScopes'
]

/**
 * Types declared in the package that exported types name and users never do, each with why:
 * the type-level machinery of the schema inference, and the Redis lock's client with its scripts.
 */
const UNNAMED: Record<string, string> = {
  Depth: 'the recursion bound of FromJsonSchema',
  FromTypeName: 'a step of FromJsonSchema',
  UnionToIntersection: 'a step of FromJsonSchema',
  Typed: 'the inference of ToolArgs and ToolStructured',
  RedisClient: 'RedisSessionLock\'s type argument: RedisClientLike with the plugin\'s scripts added'
}

/** The entry's exports, resolved, and the program that read them. */
function entryExports (): { checker: ts.TypeChecker, exports: ts.Symbol[], resolve: (s: ts.Symbol) => ts.Symbol } {
  const program = ts.createProgram([join(dist, 'index.d.ts')], {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2023, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, types: ['node']
  })
  const checker = program.getTypeChecker()
  const entry = program.getSourceFile(join(dist, 'index.d.ts'))
  const module = entry === undefined ? undefined : checker.getSymbolAtLocation(entry)
  if (module === undefined) throw new Error('dist/index.d.ts was not read')
  const resolve = (s: ts.Symbol): ts.Symbol => (s.flags & ts.SymbolFlags.Alias) !== 0 ? checker.getAliasedSymbol(s) : s
  return { checker, exports: checker.getExportsOfModule(module), resolve }
}

t.test('the entry exports exactly the public API', async t => {
  const { exports } = entryExports()
  t.same(exports.map(e => e.name).sort(), [...PUBLIC_API].sort(), 'the names dist/index.d.ts exports')
})

/**
 * Every type an exported declaration names (its members, parameters, heritage) that is declared in
 * the package is exported too: a user can name what the API hands them, and nothing internal is
 * part of a public signature. Private and protected members are not looked into (the former are
 * declared without a type; the latter serve the bundled classes' own subclasses, not users).
 */
t.test('no exported declaration names a type the entry does not export', async t => {
  const { checker, exports, resolve } = entryExports()
  const exported = new Set(exports.map(resolve))
  const leaks = new Set<string>()
  const hidden = (node: ts.Node): boolean =>
    (ts.isPropertyDeclaration(node) || ts.isMethodDeclaration(node) || ts.isGetAccessorDeclaration(node) || ts.isSetAccessorDeclaration(node) ||
      ts.isConstructorDeclaration(node)) &&
    ((node.name !== undefined && ts.isPrivateIdentifier(node.name)) || (ts.getCombinedModifierFlags(node) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) !== 0)
  const visit = (node: ts.Node, owner: string): void => {
    if (hidden(node)) return
    const named = ts.isTypeReferenceNode(node) ? node.typeName : ts.isExpressionWithTypeArguments(node) ? node.expression : ts.isTypeQueryNode(node) ? node.exprName : undefined
    const symbol = named === undefined ? undefined : checker.getSymbolAtLocation(named)
    if (symbol !== undefined) {
      const target = resolve(symbol)
      const file = target.declarations?.[0]?.getSourceFile().fileName
      if ((target.flags & ts.SymbolFlags.TypeParameter) === 0 && file?.startsWith(dist) === true && !exported.has(target) && !(target.name in UNNAMED)) {
        leaks.add(`${owner} names ${target.name} (${relative(dist, file)})`)
      }
    }
    ts.forEachChild(node, child => { visit(child, owner) })
  }
  for (const e of exports) {
    for (const declaration of resolve(e).declarations ?? []) {
      if (declaration.getSourceFile().fileName.startsWith(dist)) visit(declaration, e.name)
    }
  }
  t.same([...leaks].sort(), [], 'exported declarations naming an internal type')
})
