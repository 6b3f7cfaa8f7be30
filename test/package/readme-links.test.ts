/**
 * The README works from the package: every relative link of the packed README, and of the pages
 * it ships with (docs/, the changelog), names a file that is in the package (`npm pack --dry-run`:
 * what `files` takes, without building). Before, the README's links to docs/ were dead once
 * installed (docs/ was not packed). Fragments are checked by test/docs/links.test.ts.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import { mustRun, ROOT } from '../helpers/npm.js'
import { links } from '../docs/markdown-links.js'

t.test('every relative link of the packed Markdown names a packed file', async t => {
  const out = await mustRun('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], ROOT)
  const packed = new Set((JSON.parse(out.stdout) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map(f => f.path))
  t.ok(packed.has('README.md'), 'the README is packed')
  const pages = [...packed].filter(p => p.endsWith('.md'))
  t.ok(pages.includes('docs/README.md') && pages.includes('CHANGELOG.md'), `the pages it links to are packed (${pages.length} Markdown files)`)
  const dead: string[] = []
  let count = 0
  for (const page of pages) {
    for (const { line, target } of links(readFileSync(join(ROOT, page), 'utf8'))) {
      const path = decodeURIComponent(target.split('#')[0]!)
      if (path === '') continue
      count++
      const resolved = normalize(join(dirname(page), path)).split('\\').join('/')
      if (!packed.has(resolved) && !packed.has(`${resolved.replace(/\/$/, '')}/README.md`)) dead.push(`${page}:${line} → ${target}`)
    }
  }
  t.ok(count >= 40, `${count} relative links checked`)
  t.same(dead, [], 'no link into a file the package leaves out')
})
