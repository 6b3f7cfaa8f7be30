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

/** The text outside fenced code blocks, line by line (a fenced line becomes empty). */
export function prose (text: string): string[] {
  let fence: string | null = null
  return text.split('\n').map(line => {
    const open = /^\s*(`{3,}|~{3,})/.exec(line)
    if (fence === null && open !== null) { fence = open[1]!; return '' }
    if (fence !== null) {
      if (line.trim().startsWith(fence)) fence = null
      return ''
    }
    return line.replace(/(`+)[^`]*?\1/g, '')
  })
}

/** GitHub's anchor of a heading's text. */
export function slug (heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1') // a link keeps its text
    .replace(/`/g, '')
    .toLowerCase()
    .trim()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-')
}

/** The anchors a Markdown text offers: its headings' slugs (repeats numbered) and explicit ids. */
export function anchors (text: string): Set<string> {
  const out = new Set<string>()
  const seen = new Map<string, number>()
  let fence: string | null = null
  for (const line of text.split('\n')) {
    const open = /^\s*(`{3,}|~{3,})/.exec(line)
    if (fence === null && open !== null) { fence = open[1]!; continue }
    if (fence !== null) {
      if (line.trim().startsWith(fence)) fence = null
      continue
    }
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (h !== null) {
      const base = slug(h[1]!)
      const n = seen.get(base) ?? 0
      seen.set(base, n + 1)
      out.add(n === 0 ? base : `${base}-${n}`)
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) out.add(m[1]!)
  }
  return out
}

/** The relative link targets of a Markdown text, with their line numbers. */
export function links (text: string): Array<{ line: number, target: string }> {
  const out: Array<{ line: number, target: string }> = []
  for (const [i, line] of prose(text).entries()) {
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = m[1]!
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // https:, mailto:…
      out.push({ line: i + 1, target })
    }
  }
  return out
}

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
