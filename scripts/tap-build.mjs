// Builds tap's Test class with the plugins .taprc names (without @tapjs/typescript: the tests are
// loaded through tsx). Run by `prepare` after `npm install`/`npm ci` in a clone. tap rebuilds it by
// itself on its first run when the plugin list differs, but the test processes of that first run
// still load the default plugins — ts-node among them, about 2 s of CPU per test file — so on a
// fresh machine (CI) the whole first `npm test` paid it. Skipped when the package is installed
// into another project (from a git URL): that install is not for running this repository's tests.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const tap = join(root, 'node_modules', '.bin', 'tap')
const here = process.env.INIT_CWD === undefined || resolve(process.env.INIT_CWD) === root

if (!here || !existsSync(tap)) {
  console.log('tap-build: not this repository\'s own install; skipped')
} else {
  const result = spawnSync(tap, ['build'], { cwd: root, stdio: 'inherit' })
  if (result.error !== undefined) throw result.error
  process.exitCode = result.status ?? 1
}
