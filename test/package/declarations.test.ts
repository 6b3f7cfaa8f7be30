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
  'sessions/session-handle.d.ts': ['getProtocol', 'setProtocol', 'seal', 'markSaved', 'reload'],
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
import mcp, { MemorySessionLock, RedisSessionLock, PgSessionLock, type McpPluginOptions, type LocalAcquireOptions, type ToolEntry } from './dist/index.js'

const options: McpPluginOptions = { sessions: { lock: new MemorySessionLock() } }
const app = Fastify()
await app.register(mcp, options)
const entries: ToolEntry[] = [...app.mcp.tools.values()]
const acquire: LocalAcquireOptions = { timeout: 1000 }
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
