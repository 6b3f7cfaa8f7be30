/**
 * The test tiers (see CONTRIBUTING.md; scripts/test-tiers.ts runs them). `npm test` runs every
 * test file; `npm run test:quick` runs the quick tier: the files that start no child process,
 * install no package and stop, pause or kill no Redis server.
 *
 * A file's tier is read from its source and from every file it imports through a relative path
 * (test helpers and fixtures, bench/, lib/), so a new test file lands in its tier by itself. The
 * one child process a quick file may start is its private `redis-server`
 * (test/helpers/redis-server.ts), as long as no file in its imports calls a fault control
 * (`.stop()`, `.start()`, `.pause()`, `.resume()`, `.kill()`) — a conservative match: a file it
 * catches wrongly only runs in the full tier. `FULL_ONLY` below names the files that are slow for
 * another reason.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')

/** Files that start no process yet are too slow for the inner loop: path from the root → why. */
export const FULL_ONLY: Readonly<Record<string, string>> = {
  'test/features/registry-heap.test.ts': 'thousands of schema compilations and full GCs: CPU-bound',
  'test/testing/broken-engines.test.ts': 'runs the whole kit over six broken engines, one of them waiting out a lost lease that is never signalled',
  'test/sessions/eviction-flood.test.ts': 'floods of 10,000 records and the eviction they cause: CPU-bound',
  'test/engine/sqlite-engine.test.ts': 'the whole kit again over the SQLite example (the bundled engines run it in the quick tier)',
  'test/concurrency/cancel-grace.test.ts': 'waits out cancel grace periods and leases on the memory and Redis locks'
}

/** The one process-starting helper a quick file may use: a private Redis, started once. */
const REDIS_HELPER = 'test/helpers/redis-server.ts'
const NPM_HELPER = 'test/helpers/npm.ts'
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*)['"]([^'"]+)['"]/g
/** `import type … from` and `export type … from`: erased, they load nothing. */
const TYPE_ONLY = /\b(?:import|export)\s+type\b[^;'"]*?\bfrom\s*['"][^'"]+['"]/g
const SPAWNING_MODULES = new Set(['child_process', 'node:child_process', 'cluster', 'node:cluster'])
const REDIS_FAULT = /\.(?:stop|start|pause|resume|kill)\(\)/

export interface Tier {
  tier: 'quick' | 'full'
  /** Why a file is in the full tier (empty for a quick one). */
  reasons: string[]
}

interface Loaded {
  /** The file's source. */
  source: string
  /** What it imports at run time: root-relative paths of local files, and bare module names. */
  imports: string[]
}

/** Every test file under `test/`, as paths from the root with `/` separators. */
export function testFiles (root = ROOT): string[] {
  const dir = join(root, 'test')
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter(f => f.endsWith('.test.ts'))
    .map(f => `test/${f.split(sep).join('/')}`)
    .sort()
}

/** `file` and every local file it imports at run time, transitively (keyed by root-relative path). */
export function importClosure (file: string, root = ROOT): Map<string, Loaded> {
  const loaded = new Map<string, Loaded>()
  const queue = [file]
  while (queue.length > 0) {
    const current = queue.pop() as string
    if (loaded.has(current)) continue
    const source = readFileSync(join(root, current), 'utf8')
    const imports: string[] = []
    for (const [, specifier] of source.replace(TYPE_ONLY, '').matchAll(IMPORT)) {
      const target = (specifier as string).startsWith('.') ? resolveImport(root, current, specifier as string) : specifier
      if (target === undefined) continue
      imports.push(target)
      if (target !== specifier && !loaded.has(target)) queue.push(target)
    }
    loaded.set(current, { source, imports })
  }
  return loaded
}

/** A relative specifier as TypeScript resolves it (`./x.js` may name `./x.ts`); undefined if absent. */
function resolveImport (root: string, from: string, specifier: string): string | undefined {
  const base = join(dirname(join(root, from)), specifier)
  // The TypeScript source first, as TypeScript looks (the quick tier's mirror has both).
  const candidates = [base.replace(/\.js$/, '.ts'), base.replace(/\.mjs$/, '.mts'), base, `${base}.ts`]
  const found = candidates.find(c => existsSync(c) && statSync(c).isFile())
  return found === undefined ? undefined : relative(root, found).split(sep).join('/')
}

/** The tier of one test file, with the reasons it is in the full one. */
export function classify (file: string, root = ROOT, fullOnly: Readonly<Record<string, string>> = FULL_ONLY): Tier {
  const reasons: string[] = []
  const listed = fullOnly[file]
  if (listed !== undefined) reasons.push(`listed: ${listed}`)
  for (const [dep, { source, imports }] of importClosure(file, root)) {
    if (dep === REDIS_HELPER) continue
    const where = dep === file ? '' : ` (through ${dep})`
    if (dep === NPM_HELPER) reasons.push('installs packages')
    else if (imports.some(i => SPAWNING_MODULES.has(i))) reasons.push(`starts a child process${where}`)
    if (imports.includes(REDIS_HELPER) && REDIS_FAULT.test(source)) reasons.push(`stops, pauses or kills Redis${where}`)
  }
  return { tier: reasons.length === 0 ? 'quick' : 'full', reasons: [...new Set(reasons)] }
}

/** The quick tier's files. */
export function quickFiles (root = ROOT): string[] {
  return testFiles(root).filter(f => classify(f, root).tier === 'quick')
}
