// The import-boundary rule (scripts/eslint-layers.mjs): lib/README.md's layer drawing, enforced by
// the lint run. A deliberately wrong import fails it; the same import pointing down passes.
import t from 'tap'
import { readLayers } from '../../scripts/eslint-layers.mjs'
import { mustRun, ROOT } from '../helpers/npm.js'

t.setTimeout(180_000)

/**
 * The repository's own lint run (its eslint.config.js) over sources given as if they were files of
 * lib/, in one child process (ESLint's config loading does not run under tsx): per path, the
 * messages of the layer rule.
 */
const LINT = `
import { ESLint } from 'eslint'
const eslint = new ESLint()
const out = {}
for (const [path, code] of Object.entries(JSON.parse(process.argv[1]))) {
  const [result] = await eslint.lintText(code, { filePath: path })
  out[path] = result.messages.filter(m => m.ruleId === 'local/layers').map(m => m.message)
}
console.log(JSON.stringify(out))
`
const CASES: Record<string, string> = {
  'lib/sessions/wrong-way.ts': "import { StateEngine } from '../state/engine.js'\nexport const engine = StateEngine\n",
  'lib/state/right-way.ts': "import { isLockingStore } from '../sessions/session-store.js'\nexport const check = isLockingStore\n",
  'lib/locks/re-export.ts': "export { McpEngine } from '../protocol/engine.js'\n",
  'lib/state/dynamic.ts': "export const load = async (): Promise<unknown> => await import('../http/routes.js')\n",
  'lib/protocol/handshake/other-era.ts': "import { StatelessWire } from '../stateless/wire.js'\nexport const wire = StatelessWire\n",
  'lib/nowhere/file.ts': 'export const x = 1\n'
}
const linted = JSON.parse((await mustRun(process.execPath, ['--input-type=module', '-e', LINT, JSON.stringify(CASES)], ROOT)).stdout) as Record<string, string[]>

t.test('the drawing is read from lib/README.md, left to right', async t => {
  const layers = readLayers()
  t.same(layers[0], ['index.ts'])
  const at = (room: string): number => layers.findIndex(l => l.includes(room))
  t.ok(at('protocol/') < at('state/') && at('state/') < at('sessions/') && at('sessions/') < at('locks/'), 'protocol/ ─ … ─ state/ ─ sessions/ ─ locks/')
  t.ok(layers.at(-1)?.includes('util/'), 'util/ is in the last layer')
})

t.test('an import pointing left (sessions/ → state/) fails the lint', async t => {
  const errors = linted['lib/sessions/wrong-way.ts']
  t.equal(errors.length, 1)
  t.match(errors[0], /sessions\/wrong-way\.ts \(layer \d+\) imports state\/engine\.ts \(layer \d+\): imports point down only/)
})

t.test('the same import pointing down (state/ → sessions/) passes', async t => {
  t.same(linted['lib/state/right-way.ts'], [])
})

t.test('a re-export and a dynamic import are checked too', async t => {
  t.equal(linted['lib/locks/re-export.ts'].length, 1)
  t.equal(linted['lib/state/dynamic.ts'].length, 1)
})

t.test('the era rooms never import each other', async t => {
  t.match(linted['lib/protocol/handshake/other-era.ts'], [/the era rooms never import each other/])
})

t.test('a room missing from the drawing is reported', async t => {
  t.match(linted['lib/nowhere/file.ts'], [/nowhere\/ is not in lib\/README\.md's layer drawing/])
})
