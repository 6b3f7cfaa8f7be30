// The quick tier's compiled mirror (scripts/quick-mirror.ts): what it compiles, links and leaves out.
import { existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { MIRRORS, buildMirror, mirrorTaprc, removeStaleMirrors } from '../../scripts/quick-mirror.js'
import { ROOT } from '../../scripts/tiers.js'

t.test('the mirror .taprc: the checkout\'s, with source maps instead of tsx', async t => {
  const taprc = readFileSync(join(ROOT, '.taprc'), 'utf8')
  const mirrored = mirrorTaprc(taprc)
  t.notMatch(mirrored, /tsx/, 'no tsx left')
  t.match(mirrored, /^node-arg:\n {2}- --enable-source-maps$/m)
  for (const key of ['timeout', 'jobs', 'plugin', 'include']) {
    t.match(mirrored, new RegExp(`^${key}:`, 'm'), `${key} kept`)
  }
  t.match(mirrored, /"!@tapjs\/typescript"/, 'the same plugins: tap does not rebuild its Test class')
})

t.test('.ts compiled to the .js its imports name; the rest linked; tap\'s output and .git left out', async t => {
  const root = t.testdir({
    '.taprc': 'jobs: 3\nnode-arg:\n  - --import=tsx\ninclude:\n  - test/**/*.test.ts\n',
    '.git': { HEAD: 'ref: refs/heads/main\n' },
    '.tap': { 'report.txt': 'old' },
    'package.json': '{"type":"module"}',
    'tsconfig.json': '{"compilerOptions":{"target":"ES2022","module":"NodeNext"}}',
    node_modules: { dep: { 'index.js': 'export const x = 1\n' } },
    lib: {
      'a.ts': 'import { b } from \'./b.js\'\nexport const a = (n: number): number => b(n) + 1\n',
      'b.ts': 'export function b (n: number): number { return n * 2 }\n',
      'types.d.ts': 'export type T = string\n',
      'README.md': '# lib\n'
    }
  })
  const out = join(root, MIRRORS, String(process.pid))
  await buildMirror(root)
  const a = readFileSync(join(out, 'lib', 'a.js'), 'utf8')
  t.match(a, /from "\.\/b\.js"|from '\.\/b\.js'/, 'the import kept as it is written')
  t.notMatch(a, /: number/, 'types stripped')
  t.match(a, /sourceMappingURL=data:application\/json;base64,/, 'an inline source map')
  const { a: run } = await import(join(out, 'lib', 'a.js')) as { a: (n: number) => number }
  t.equal(run(2), 5, 'the compiled module runs without a loader')
  t.equal(readlinkSync(join(out, 'lib', 'a.ts')), join(root, 'lib', 'a.ts'), 'the source linked beside it')
  t.ok(lstatSync(join(out, 'lib', 'README.md')).isSymbolicLink(), 'other files linked')
  t.ok(lstatSync(join(out, 'lib', 'types.d.ts')).isSymbolicLink(), 'declarations linked, not compiled')
  t.equal(realpathSync(join(out, 'node_modules')), realpathSync(join(root, 'node_modules')), 'node_modules linked whole')
  t.throws(() => lstatSync(join(out, '.git')), 'no .git')
  t.throws(() => lstatSync(join(out, '.tap')), 'no tap output')
  t.notMatch(readFileSync(join(out, '.taprc'), 'utf8'), /tsx/, 'its own .taprc')

  await buildMirror(root)
  t.equal(readFileSync(join(out, 'lib', 'b.js'), 'utf8').includes('n * 2'), true, 'built afresh over an old mirror')
})

t.test('a mirror whose run is gone is removed; a running one is kept', async t => {
  const root = t.testdir({})
  const dead = join(root, MIRRORS, '999999999')
  const live = join(root, MIRRORS, String(process.pid))
  const odd = join(root, MIRRORS, 'not-a-pid')
  for (const dir of [dead, live, odd]) mkdirSync(dir, { recursive: true })
  removeStaleMirrors(root)
  t.notOk(existsSync(dead), 'the dead run\'s mirror removed')
  t.notOk(existsSync(odd), 'anything else removed')
  t.ok(existsSync(live), 'the running one kept')
  removeStaleMirrors(t.testdir({}))
  t.pass('no mirrors folder: nothing to do')
})
