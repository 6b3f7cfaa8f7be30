/**
 * Reading Markdown as the link checks do (test/docs/links.test.ts, test/package/readme-links.test.ts):
 * the prose outside code, GitHub's heading anchors, and the relative link targets.
 */

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
