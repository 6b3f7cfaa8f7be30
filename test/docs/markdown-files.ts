/**
 * The repository's user documentation, as the docs tests read it: README.md, CHANGELOG.md,
 * every page under docs/, and the bench notes. Paths are relative to the repository root.
 */
import { readdirSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('../../', import.meta.url))

/** `.md` files under `dir` (relative to the root), sorted, at any depth. */
function markdownUnder (dir: string): string[] {
  const out: string[] = []
  const walk = (abs: string): void => {
    for (const name of readdirSync(abs).sort()) {
      const path = join(abs, name)
      if (statSync(path).isDirectory()) walk(path)
      else if (name.endsWith('.md')) out.push(relative(ROOT, path))
    }
  }
  walk(join(ROOT, dir))
  return out
}

/** The documentation files, README.md first. */
export function docFiles (): string[] {
  return ['README.md', 'CHANGELOG.md', ...markdownUnder('docs'), 'bench/NOTES.md']
}
