/**
 * The file lock's native addon (fs-native-extensions) is an optional dependency loaded on first
 * use. Importing the package, serving requests on a FileSessionStore and its gc() never load it;
 * `new FileSessionLock()` does, and without the addon throws an error that names the package and
 * how to install it. Each case is a fresh Node process (tsx on lib/): a loaded addon stays loaded.
 * The same probe runs on the packed package in test/package/pack.test.ts, there with the addon
 * really uninstalled.
 */
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
const PROBE = join(ROOT, 'test', 'package', 'fixtures', 'addon-probe.mjs')
const HIDE = ['--import', pathToFileURL(join(ROOT, 'test', 'locks', 'fixtures', 'hide-addon.mjs')).href]
const INDEX = pathToFileURL(join(ROOT, 'lib', 'index.ts')).href

interface Loaded { dlopened: string[], required: string[] }
interface ProbeReport {
  afterImport: Loaded
  served: { init: number, call: number, text: string }
  afterServe: Loaded
  lock: { ok: boolean, name?: string, code?: string, message?: string, cause?: string }
  afterLock: Loaded
}

function childEnv (): NodeJS.ProcessEnv {
  const env = { ...process.env }
  for (const key of Object.keys(env)) {
    if (key === 'NODE_OPTIONS' || key === 'NODE_V8_COVERAGE' || key.startsWith('_TAPJS_')) delete env[key]
  }
  return env
}

async function node<T> (t: Test, args: string[]): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-addon-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return await new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', ...args, dir], { cwd: ROOT, env: childEnv(), timeout: 30_000 }, (err, stdout, stderr) => {
      if (err !== null) reject(new Error(`node ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`))
      else resolve(JSON.parse(stdout.trim().split('\n').pop() ?? '') as T)
    })
  })
}

const none: Loaded = { dlopened: [], required: [] }
const INSTALL_HINT = /FileSessionLock needs the optional dependency "fs-native-extensions", which is not installed.*Install it: npm install fs-native-extensions/

t.test('importing the package and serving on a file store do not load the addon; FileSessionLock does', async t => {
  const report = await node<ProbeReport>(t, [PROBE, INDEX])
  t.same(report.afterImport, none, 'not loaded by importing the package')
  t.same(report.served, { init: 200, call: 200, text: 'hi' }, 'initialize and tools/call served on a FileSessionStore')
  t.same(report.afterServe, none, 'not loaded by serving nor by the store\'s gc()')
  t.same(report.lock, { ok: true }, 'FileSessionLock takes and releases a lock')
  // The control: the probe does see the addon once it is loaded.
  t.match(report.afterLock.dlopened, [/fs-native-extensions.*\.node$/], 'its .node file was dlopened by FileSessionLock')
  t.ok(report.afterLock.required.length > 0, 'and its JavaScript required')
})

t.test('without the addon: the package works, new FileSessionLock() says what to install', async t => {
  const report = await node<ProbeReport>(t, [...HIDE, PROBE, INDEX])
  t.same(report.afterImport, none)
  t.same(report.served, { init: 200, call: 200, text: 'hi' }, 'serving works without it')
  t.equal(report.lock.ok, false, 'FileSessionLock refused')
  t.equal(report.lock.name, 'SessionLockError')
  t.match(report.lock.message, INSTALL_HINT)
  t.equal(report.lock.cause, 'MODULE_NOT_FOUND', 'the resolution error is the cause')
})

t.test('without the addon: tryLockExistingFile needs it only for a file that exists', async t => {
  const report = await node<{ missing: unknown, existing: { name: string, message: string } }>(t,
    [...HIDE, join(ROOT, 'test', 'locks', 'fixtures', 'try-lock-existing.ts')])
  t.equal(report.missing, null, 'a missing lock file: null, no addon needed')
  t.equal(report.existing.name, 'SessionLockError')
  t.match(report.existing.message, INSTALL_HINT)
})

t.test('with the addon: tryLockExistingFile locks an existing file', async t => {
  const report = await node<{ missing: unknown, existing: unknown }>(t, [join(ROOT, 'test', 'locks', 'fixtures', 'try-lock-existing.ts')])
  t.same(report, { missing: null, existing: 'locked' })
})
