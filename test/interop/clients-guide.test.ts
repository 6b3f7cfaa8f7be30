/**
 * The client guide (docs/client-guide.md) runs: each of its client programs is a file under
 * examples/clients/, shown in the guide as it is (checked here, block by block), and run here
 * against the demo's tools on a listening server: curl on both protocol eras (bash scripts), the
 * v1 SDK client, the v2 client pinned to 2026-07-28, and the official tasks client with the raw
 * dispatch the guide gives to copy.
 */
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import Fastify from 'fastify'
import mcp from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { extTasksExample } from '../../examples/clients/ext-tasks.js'
import { v1Example } from '../../examples/clients/v1-sdk.js'
import { v2Example } from '../../examples/clients/v2-client.js'
import { ROOT } from '../docs/markdown-files.js'
import { serve } from '../helpers/http-client.js'

t.setTimeout(120_000)
const run = promisify(execFile)

const app = Fastify({ logger: false })
t.teardown(() => app.close())
await app.register(mcp, { requestState: { secret: 'clients-guide-secret-0123456789' }, tasks: { pollIntervalMs: 200 } })
registerDemoTools(app.mcp)
const { url } = await serve(t, app)

t.test('the guide shows each example file as it is', async t => {
  const guide = readFileSync(join(ROOT, 'docs/client-guide.md'), 'utf8')
  const shown = [...guide.matchAll(/<!-- (examples\/clients\/[\w.-]+) -->\s*\n```\w+\n([\s\S]*?)\n```/g)]
  t.same(shown.map(m => m[1]).sort(), [
    'examples/clients/curl-2025.sh', 'examples/clients/curl-2026.sh', 'examples/clients/ext-tasks-dispatch.ts',
    'examples/clients/ext-tasks.ts', 'examples/clients/python_client.py', 'examples/clients/v1-sdk.ts', 'examples/clients/v2-client.ts'
  ], 'every example is in the guide')
  for (const [, file, code] of shown) t.equal(code, readFileSync(join(ROOT, file!), 'utf8').replace(/\n$/, ''), `${file} as it is`)
})

t.test('the Python script parses (it is run by hand: see the guide)', async t => {
  const file = join(ROOT, 'examples/clients/python_client.py')
  await run('python3', ['-c', 'import ast, sys; ast.parse(open(sys.argv[1]).read())', file])
  t.pass('python3 parsed it')
})

t.test('curl, 2026-07-28: discover, a handle, an input_required round, a task', async t => {
  const { stdout } = await run('bash', [join(ROOT, 'examples/clients/curl-2026.sh'), url], { timeout: 60_000 })
  t.same(stdout.trim().split('\n'), [
    '["2026-07-28"]', '{"count":1}', '{"resultType":"input_required","asked":["name"]}', 'Hello, Ada!', '"complete"', 'long_job done after 2 s'
  ])
})

t.test('curl, 2025-11-25: a session, a counter, a handle, a question on the call\'s stream, DELETE', async t => {
  const { stdout } = await run('bash', [join(ROOT, 'examples/clients/curl-2025.sh'), url], { timeout: 60_000 })
  t.same(stdout.trim().split('\n'), ['{"counter":2}', '{"count":1}', 'Hello, Ada!', '200'])
})

t.test('the v1 SDK client (2025-11-25)', async t => {
  t.same(await v1Example(url), ['basket: pear', 'greeting: Hello, Ada!', 'counter: 2'])
})

t.test('the v2 client pinned to 2026-07-28', async t => {
  t.same(await v2Example(url), ['era: modern', 'basket: pear', 'greeting: Hello, Ada!'])
})

t.test('the official tasks client: a task with a question, settled', async t => {
  const [kind, statuses, result] = await extTasksExample(url)
  t.equal(kind, 'kind: task')
  t.match(statuses, /input_required.*completed$/, 'it saw the question and the end')
  t.equal(result, 'result: long_job done after 2 s')
})
