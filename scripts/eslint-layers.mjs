/**
 * The import-boundary lint rule (`local/layers`, eslint.config.js): `lib/`'s layers as
 * lib/README.md draws them, read from that drawing (the line `index.ts ─ … ─ util/`), so the
 * README and the rule cannot say two things. A file of `lib/` may import from its own folder, from
 * the folders and root files of its own layer (`redis/, bus/, …` share one) and from any layer to
 * its right; an arrow pointing left is reported, and so is a file whose room is not in the drawing
 * (a new folder gets its place there first). The two era rooms of `protocol/` never import each
 * other. Only relative imports are checked (packages are not `lib/`).
 */
import { readFileSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const LIB = join(ROOT, 'lib')

/** The rooms that never import each other (README: "Each era room … never the other era"). */
const APART = [['protocol/handshake/', 'protocol/stateless/']]

/** The layers of the README's drawing, left to right: each a list of rooms (`protocol/`, `index.ts`). */
export function readLayers (readme = readFileSync(join(LIB, 'README.md'), 'utf8')) {
  const line = readme.split('\n').find(l => l.startsWith('index.ts ─'))
  if (line === undefined) throw new Error('lib/README.md: the layer drawing (a line starting "index.ts ─") is missing')
  return line.split('─').map(layer => layer.split(',').map(room => room.trim()).filter(room => room !== ''))
}

/** The room of a path under lib/ (`protocol/handshake/wire.ts` → `protocol/`, `options.ts` → `options.ts`). */
function roomOf (rel) {
  const slash = rel.indexOf('/')
  return slash === -1 ? rel : rel.slice(0, slash + 1)
}

/** @type {import('eslint').Rule.RuleModule} */
export default {
  meta: {
    type: 'problem',
    docs: { description: 'imports in lib/ point down the layers of lib/README.md' },
    schema: [],
    messages: {
      up: '{{from}} (layer {{fromLayer}}) imports {{to}} (layer {{toLayer}}): imports point down only (lib/README.md); move what it needs further right or hand it in',
      apart: '{{from}} imports {{to}}: the era rooms never import each other (lib/README.md)',
      unplaced: '{{room}} is not in lib/README.md\'s layer drawing: give it its place there'
    }
  },
  create (context) {
    const file = context.filename
    const rel = relative(LIB, file).split(sep).join('/')
    if (rel.startsWith('..') || !rel.endsWith('.ts')) return {}
    const layerOf = new Map()
    readLayers().forEach((rooms, i) => { for (const room of rooms) layerOf.set(room, i) })
    const own = roomOf(rel)
    const ownLayer = layerOf.get(own)
    const check = (node) => {
      const spec = node.source?.value
      if (typeof spec !== 'string' || !spec.startsWith('.')) return
      const target = relative(LIB, resolve(dirname(file), spec)).split(sep).join('/').replace(/\.js$/, '.ts')
      if (target.startsWith('..')) return
      for (const [a, b] of APART) {
        if ((rel.startsWith(a) && target.startsWith(b)) || (rel.startsWith(b) && target.startsWith(a))) {
          context.report({ node: node.source, messageId: 'apart', data: { from: rel, to: target } })
        }
      }
      const room = roomOf(target)
      const layer = layerOf.get(room)
      if (room === own || layer === undefined || ownLayer === undefined || layer >= ownLayer) return
      context.report({ node: node.source, messageId: 'up', data: { from: rel, to: target, fromLayer: ownLayer, toLayer: layer } })
    }
    return {
      Program (node) {
        if (ownLayer === undefined) context.report({ node, messageId: 'unplaced', data: { room: own } })
      },
      ImportDeclaration: check,
      ExportNamedDeclaration: check,
      ExportAllDeclaration: check,
      ImportExpression: check
    }
  }
}
