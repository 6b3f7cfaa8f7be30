// Builds dist/ from lib/ (`tsc -p tsconfig.json`) after removing the old dist/, so a module that
// left lib/ cannot linger in the package. Run by `npm run build` and by two lifecycle scripts:
// - `prepare`: `npm install`/`npm ci` in a clone, and installs from a git URL;
// - `prepack`: `npm pack` and `npm publish` (also what other package managers run before packing).
// npm runs `prepare` after `prepack` when packing as well; that second build would only redo the
// first one, so `prepare` skips it when the npm command is pack or publish.
import { spawnSync } from 'node:child_process'
import { rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const event = process.env.npm_lifecycle_event
const command = process.env.npm_command

if (event === 'prepare' && (command === 'pack' || command === 'publish')) {
  console.log(`build: dist/ was built by prepack for npm ${command}`)
  process.exit(0)
}

const tsc = createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc')
rmSync(join(root, 'dist'), { recursive: true, force: true })
const result = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.json')], { cwd: root, stdio: 'inherit' })
if (result.error !== undefined) throw result.error
process.exitCode = result.status ?? 1
