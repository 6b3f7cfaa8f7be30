/**
 * The TypeScript blocks of the README and of every page under docs/ compile under `strict`,
 * against this repository's `lib/index.ts`: what readers copy must work as shown (`process.env.X`
 * is `string | undefined`, a client needs the options it is shown with…).
 *
 * Each ```ts block becomes a module of a temporary project (`import … from 'fastify-mcp-http'` maps
 * to `lib/index.ts`; `node_modules` is this repository's). A block may leave out its imports of the
 * plugin's exports (they are added), and may use what the reader's own app has (`app`, and the
 * loaders of the Usage example, declared below). A block preceded by `<!-- not-compiled: why -->`
 * is skipped; keep such exceptions rare. A block preceded by `<!-- examples/….ts -->` is that file
 * of the repository shown as it is (test/interop/clients-guide.test.ts checks they are equal):
 * the file is type-checked with the repository (tsconfig.test.json), so the block is not here.
 */
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as lib from '../../lib/index.js'

import { ROOT, docFiles } from './markdown-files.js'

// CPU-bound (tsc over every block): on a busy 2-core machine it runs past tap's 60 s.
t.setTimeout(240_000)

/** What the snippets take from the reader's app rather than from the plugin. */
const READER_GLOBALS = `
declare var app: import('fastify').FastifyInstance
declare function loadCatalog (): Promise<unknown>
declare function loadItem (sku: string): Promise<unknown>
`

interface Block { file: string, line: number, code: string, skipped: string | null, shows: string | null }

/** The ```ts blocks of `file`, with the line their code starts on. */
function tsBlocks (file: string, text: string): Block[] {
  const lines = text.split('\n')
  const blocks: Block[] = []
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== '```ts' && lines[i]!.trim() !== '```typescript') continue
    let before = i - 1
    while (before >= 0 && lines[before]!.trim() === '') before--
    const marker = before >= 0 ? /^<!--\s*not-compiled\b:?\s*(.*?)\s*-->$/.exec(lines[before]!.trim()) : null
    const shows = before >= 0 ? /^<!--\s*(examples\/[\w./-]+\.ts)\s*-->$/.exec(lines[before]!.trim()) : null
    const start = i + 1
    let end = start
    while (end < lines.length && lines[end]!.trim() !== '```') end++
    blocks.push({ file, line: start + 1, code: lines.slice(start, end).join('\n'), skipped: marker === null ? null : (marker[1] || 'no reason given'), shows: shows?.[1] ?? null })
    i = end
  }
  return blocks
}

/** `import mcp, { … } from 'fastify-mcp-http'` for the plugin's exports the block uses without importing. */
function missingImports (code: string): string {
  const imported = new Set<string>()
  for (const m of code.matchAll(/import\s+([^;]*?)\s+from\s+['"][^'"]+['"]/g)) {
    for (const name of m[1]!.replace(/[{}]/g, ',').split(',')) {
      const local = name.trim().replace(/^type\s+/, '').split(/\s+as\s+/).pop()?.trim()
      if (local !== undefined && local !== '') imported.add(local)
    }
  }
  const used = (name: string): boolean => new RegExp(`(?<![\\w.$])${name.replace(/\$/g, '\\$')}(?![\\w$])`).test(code)
  const names = Object.keys(lib).filter(n => n !== 'default' && !imported.has(n) && used(n))
  const withDefault = !imported.has('mcp') && used('mcp')
  if (!withDefault && names.length === 0) return ''
  const parts = [withDefault ? 'mcp' : '', names.length > 0 ? `{ ${names.join(', ')} }` : ''].filter(p => p !== '')
  return `import ${parts.join(', ')} from 'fastify-mcp-http'`
}

const files = docFiles().filter(f => f === 'README.md' || f.startsWith('docs/'))
const blocks = files.flatMap(f => tsBlocks(f, readFileSync(join(ROOT, f), 'utf8')))

t.test('the README and the docs have TypeScript blocks, and few are exempt', async t => {
  t.ok(blocks.filter(b => b.file === 'README.md').length >= 3, 'the README has some')
  t.ok(blocks.length >= 15, `${blocks.length} blocks in ${files.length} files`)
  const skipped = blocks.filter(b => b.skipped !== null)
  for (const b of blocks.filter(b => b.shows !== null)) t.ok(existsSync(join(ROOT, b.shows!)), `${b.file}:${b.line} shows ${b.shows}, a file type-checked with the repository`)
  t.ok(skipped.length <= 2, `exempt: ${skipped.map(b => `${b.file}:${b.line} (${b.skipped ?? ''})`).join(', ') || 'none'}`)
})

t.test('every TypeScript block of the README and the docs compiles under strict', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'mcp-readme-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  symlinkSync(realpathSync(join(ROOT, 'node_modules')), join(dir, 'node_modules'), 'dir')
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
  writeFileSync(join(dir, 'reader-app.d.ts'), READER_GLOBALS)
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      target: 'ES2023',
      lib: ['ES2023'],
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      types: ['node'],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      paths: { 'fastify-mcp-http': [join(ROOT, 'lib/index.ts')] }
    },
    include: ['*.ts']
  }))
  /** The Markdown file and line of each module's line 1. */
  const origin = new Map<string, { file: string, line: number, preamble: number }>()
  for (const [i, b] of blocks.entries()) {
    if (b.skipped !== null || b.shows !== null) continue
    const imports = missingImports(b.code)
    const file = `block-${i + 1}.ts`
    const preamble = imports === '' ? 0 : 1
    writeFileSync(join(dir, file), `${imports === '' ? '' : `${imports}\n`}${b.code}\nexport {}\n`)
    origin.set(file, { file: b.file, line: b.line, preamble })
  }
  const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', dir], { encoding: 'utf8', cwd: dir })
  // Point each error at its Markdown line.
  const errors = `${tsc.stdout}${tsc.stderr}`.split('\n').filter(l => l.trim() !== '').map(l => {
    const m = /^(block-\d+\.ts)\((\d+),(\d+)\): (.*)$/.exec(l)
    const o = m === null ? undefined : origin.get(m[1]!)
    return o === undefined || m === null ? l : `${o.file}:${o.line + Number(m[2]) - 1 - o.preamble}:${m[3]} ${m[4]}`
  })
  t.same(errors, [], 'tsc --strict reports nothing')
  t.equal(tsc.status, 0)
})
