/**
 * The demo's switches as documented: every environment variable `examples/server.ts` reads is
 * in the demo's table (docs/lock-internals.md#the-demo), and the documented defaults hold where
 * one variable is set without its partner (MCP_REDIS_WAIT_TIMEOUT_MS alone: acknowledgement off,
 * the demo starts).
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { buildDemo } from '../../examples/server.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { ROOT } from './markdown-files.js'

t.test('every variable the demo reads is in the demo\'s table', async t => {
  const source = readFileSync(`${ROOT}/examples/server.ts`, 'utf8')
  const read = new Set([...source.matchAll(/\benv\.([A-Z][A-Z0-9_]+)/g)].map(m => m[1]!))
  t.ok(read.size >= 15, `found the variables (${[...read].join(', ')})`)
  const doc = readFileSync(`${ROOT}/docs/lock-internals.md`, 'utf8')
  const table = doc.slice(doc.indexOf('## The demo'))
  const rows = table.split('\n').filter(line => line.startsWith('| `'))
  for (const name of read) t.ok(rows.some(row => row.includes(`\`${name}\``) || row.includes(`\`${name}=`)), `${name} is documented`)
})

t.test('the demo starts with MCP_REDIS_WAIT_TIMEOUT_MS alone (acknowledgement stays off)', async t => {
  const server = await startRedisServer(t)
  const app = await buildDemo({ logger: false, env: { MCP_STORE: 'redis', REDIS_URL: server.url, MCP_REDIS_WAIT_TIMEOUT_MS: '300' } })
  t.teardown(() => app.close())
  await app.ready()
  const res = await app.inject({
    method: 'POST',
    url: '/mcp',
    headers: { accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
    payload: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } } }
  })
  t.equal(res.statusCode, 200, 'serves')
})
