/**
 * Every relative link of the documentation resolves: the file (or folder) it names exists, and a
 * `#fragment` names a heading of the Markdown file it points into (as GitHub slugs headings:
 * lower case, punctuation dropped, spaces to hyphens, `-1`, `-2`… for repeats) or an explicit
 * `<a id="…">`. Links in code blocks and code spans are not links; absolute URLs are not checked.
 */
import t from 'tap'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import { ROOT, docFiles } from './markdown-files.js'
import { anchors, links, slug } from './markdown-links.js'

/** Why `target`, linked from `file`, does not resolve; null when it does. */
function broken (file: string, target: string): string | null {
  const hash = target.indexOf('#')
  const path = hash === -1 ? target : target.slice(0, hash)
  const fragment = hash === -1 ? null : decodeURIComponent(target.slice(hash + 1))
  if (path.startsWith('/')) return 'an absolute path (GitHub resolves it against the host, not the repository)'
  const resolved = path === '' ? file : normalize(join(dirname(file), decodeURIComponent(path)))
  if (resolved.startsWith('..')) return 'outside the repository'
  if (!existsSync(join(ROOT, resolved))) return `${resolved} does not exist`
  if (fragment === null) return null
  if (!resolved.endsWith('.md')) return `#${fragment} points into ${resolved}, which is not Markdown`
  return anchors(readFileSync(join(ROOT, resolved), 'utf8')).has(fragment) ? null : `${resolved} has no heading #${fragment}`
}

t.test('the slugs are GitHub\'s', async t => {
  t.equal(slug('Shutting down (drain)'), 'shutting-down-drain')
  t.equal(slug('The handler context `ctx`'), 'the-handler-context-ctx')
  t.equal(slug('Errors and bounds (reference)'), 'errors-and-bounds-reference')
  t.equal(slug('Tool, resource and prompt handles'), 'tool-resource-and-prompt-handles')
  t.same([...anchors('# A\n## A\n```\n# not a heading\n```\n### A b.c\n<a id="x"></a>')], ['a', 'a-1', 'a-bc', 'x'])
  t.same(links('[a](x.md#y) `[b](z.md)` [c](https://e.org) [d](#e "title")\n```\n[f](g.md)\n```'),
    [{ line: 1, target: 'x.md#y' }, { line: 1, target: '#e' }])
})

t.test('every relative link of the documentation resolves', async t => {
  const files = docFiles()
  t.ok(files.length >= 10, `${files.length} files: ${files.join(', ')}`)
  const problems: string[] = []
  let count = 0
  for (const file of files) {
    const text = readFileSync(join(ROOT, file), 'utf8')
    for (const { line, target } of links(text)) {
      count++
      const why = broken(file, target)
      if (why !== null) problems.push(`${file}:${line} (${target}): ${why}`)
    }
  }
  t.ok(count >= 50, `${count} links checked`)
  t.same(problems, [], 'no broken link')
})
