/**
 * What the docs import from the package is exported by it: every name in an
 * `import … from 'fastify-mcp-http'` of a docs code block is a value or type export of
 * lib/index.ts (README's blocks are also type-checked, by readme-typescript.test.ts), and the
 * functions the docs name in prose as the package's (`hashSessionId`) are exported values.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import * as pkg from '../../lib/index.js'
import { ROOT, docFiles } from './markdown-files.js'

/** The names exported as types only (`export type { … }`, `export { type … }`), from the entry's text. */
function typeExports (): Set<string> {
  const text = readFileSync(`${ROOT}lib/index.ts`, 'utf8')
  const names = new Set<string>()
  for (const m of text.matchAll(/export\s+(type\s+)?\{([^}]*)\}/g)) {
    for (const part of m[2]!.split(',')) {
      const name = part.trim().replace(/^type\s+/, '').split(/\s+as\s+/).pop()!.trim()
      if (name !== '') names.add(name)
    }
  }
  for (const m of text.matchAll(/export\s+(?:interface|type|class|const|function|async function)\s+([A-Za-z0-9_]+)/g)) names.add(m[1]!)
  return names
}

t.test('every name the docs import from fastify-mcp-http is exported', async t => {
  const exported = new Set([...Object.keys(pkg), ...typeExports()])
  let imports = 0
  for (const file of docFiles()) {
    const text = readFileSync(`${ROOT}${file}`, 'utf8')
    for (const m of text.matchAll(/import\s+(?:type\s+)?(?:[A-Za-z0-9_]+\s*,\s*)?\{([^}]*)\}\s*from\s*'fastify-mcp-http'/g)) {
      for (const part of m[1]!.split(',')) {
        const name = part.trim().replace(/^type\s+/, '').split(/\s+as\s+/)[0]!.trim()
        if (name === '') continue
        imports++
        t.ok(exported.has(name), `${file}: ${name}`)
      }
    }
  }
  t.ok(imports > 10, `the docs' imports were found (${imports})`)
})

t.test('hashSessionId is exported, as docs/clients.md names it: SHA-256, base64url, 22 characters', async t => {
  const { createHash } = await import('node:crypto')
  const id = 'a-session-id-of-some-length'
  t.equal(pkg.hashSessionId(id), createHash('sha256').update(id).digest('base64url').slice(0, 22))
  t.match(readFileSync(`${ROOT}docs/clients.md`, 'utf8'), /`hashSessionId\(id\)`: SHA-256, base64url, the first 22 characters/)
})
