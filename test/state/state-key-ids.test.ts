/**
 * A state handle's or a task's store key (`~<kind>~<id>`, `~task~<id>`) lives in the sessions'
 * store beside the sessions. Sent as `Mcp-Session-Id`, it is refused 404 on POST, GET and DELETE
 * like any unknown session (lib/protocol/handshake/session.ts `sessionIdOf`), and the handle and
 * the task are untouched: not served as an anonymous session, not ended by the DELETE.
 */
import t from 'tap'
import Fastify from 'fastify'
import mcp from '../../lib/index.js'
import { registerDemoTools } from '../../examples/demo-tools.js'
import { headers, modernHeaders, rpc, LEGACY } from '../helpers/wire.js'

const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } }

const app = Fastify({ logger: false })
t.teardown(() => app.close())
await app.register(mcp, { requestState: { secret: 'state-key-ids-test-secret' } })
registerDemoTools(app.mcp)

async function modern (method: string, params: Record<string, unknown>, caps: Record<string, unknown> = {}): Promise<Record<string, any>> {
  const body = rpc(method, params, { caps })
  const res = await app.inject({ method: 'POST', url: '/mcp', headers: modernHeaders(body), payload: body })
  return res.json()
}

const basket = (await modern('tools/call', { name: 'basket_create', arguments: {} })).result.structuredContent.basket as string
t.equal((await modern('tools/call', { name: 'basket_add', arguments: { basket, item: 'pear' } })).result.structuredContent.count, 1)
const task = (await modern('tools/call', { name: 'long_job', arguments: { seconds: 0 } }, TASKS)).result.taskId as string
t.type(task, 'string', 'a task was created')

for (const [what, key] of [['a state handle\'s key', `~basket~${basket}`], ['a task\'s key', `~task~${task}`]]) {
  t.test(`${what} as Mcp-Session-Id: 404 on POST, GET and DELETE`, async t => {
    const session = { sid: key, version: LEGACY }
    for (const [method, params] of [['tools/list', undefined], ['logging/setLevel', { level: 'debug' }], ['tools/call', { name: 'counter_add', arguments: {} }]] as const) {
      const res = await app.inject({ method: 'POST', url: '/mcp', headers: headers(session), payload: { jsonrpc: '2.0', id: 1, method, params } })
      t.equal(res.statusCode, 404, `POST ${method}`)
      t.equal(res.json().error?.code, -32001, `POST ${method}: Session not found`)
    }
    const get = await app.inject({ method: 'GET', url: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': key, 'mcp-protocol-version': LEGACY } })
    t.equal(get.statusCode, 404, 'GET')
    const del = await app.inject({ method: 'DELETE', url: '/mcp', headers: { 'mcp-session-id': key, 'mcp-protocol-version': LEGACY } })
    t.equal(del.statusCode, 404, 'DELETE')
  })
}

t.test('the handle and the task are untouched', async t => {
  t.same((await modern('tools/call', { name: 'basket_get', arguments: { basket } })).result.structuredContent.items, ['pear'], 'the handle keeps its item')
  const got = await modern('tasks/get', { taskId: task }, TASKS)
  t.type(got.result?.status, 'string', 'the task is still there')
})
