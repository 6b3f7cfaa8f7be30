/**
 * What `tool()`, `resource()`, `resourceTemplate()` and `prompt()` return: a handle with
 * `enable()`, `disable()`, `update()` and `remove()` (as the official SDK's registered tools). A
 * disabled entry is absent from its list and unknown to its method (tools/call → -32602 "unknown
 * tool", as an unregistered one); every change clients can see emits `changed` (→
 * `notifications/<kind>/list_changed`) once the server started, and only then.
 */
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { z } from 'zod'
import type { FastifyBaseLogger } from 'fastify'
import type { McpContext } from '../../lib/context.js'
import { FST_ERR_MCP_INVALID_DEFINITION } from '../../lib/errors.js'
import { getPrompt, listPrompts, listResources, listResourceTemplates, listTools, readResource } from '../../lib/features/methods.js'
import { callTool } from '../../lib/features/tool-call.js'
import { Registry, type ListKind, type ToolHandle } from '../../lib/features/registry.js'
import { McpError } from '../../lib/jsonrpc/errors.js'

const ctx = { signal: new AbortController().signal, state: {} } as unknown as McpContext
const log = { error: () => {} } as unknown as FastifyBaseLogger
const notFound = (uri: string): McpError => new McpError(-32002, `not found: ${uri}`)

function started (): { r: Registry, events: ListKind[] } {
  const r = new Registry()
  const events: ListKind[] = []
  r.on('changed', kind => { events.push(kind) })
  r.start()
  return { r, events }
}

const toolNames = (r: Registry): string[] => (listTools(r, {}, 100, null).tools as Array<{ name: string }>).map(x => x.name)

t.test('a tool handle: disable, enable, update, remove', async t => {
  const { r, events } = started()
  r.tool({ name: 'first', description: 'First' }, async () => 'first')
  const handle = r.tool({ name: 'echo', description: 'Echoes', input: Type.Object({ text: Type.String() }) }, async ({ text }) => text)
  r.tool({ name: 'last', description: 'Last' }, async () => 'last')
  t.equal(handle.name, 'echo')
  t.equal(handle.enabled, true)
  t.equal(handle.removed, false)
  t.same(events, ['tools', 'tools', 'tools'], 'each add announced')
  events.length = 0

  handle.disable()
  t.equal(handle.enabled, false)
  t.same(toolNames(r), ['first', 'last'], 'a disabled tool is not listed')
  await t.rejects(callTool(r, { name: 'echo', arguments: { text: 'x' } }, ctx, log),
    { code: -32602, message: 'Invalid params: unknown tool "echo"' }, 'and is unknown to tools/call, as an unregistered one')
  await t.rejects(callTool(r, { name: 'never', arguments: {} }, ctx, log), { code: -32602, message: 'Invalid params: unknown tool "never"' })
  t.same(events, ['tools'], 'disable announced')
  handle.disable()
  t.same(events, ['tools'], 'disabling a disabled tool changes nothing')
  t.throws(() => r.tool({ name: 'echo', description: 'Another' }, async () => 'x'), FST_ERR_MCP_INVALID_DEFINITION, 'a disabled tool keeps its name')

  handle.enable()
  t.same(toolNames(r), ['first', 'echo', 'last'], 'enabled again, in its registration place')
  t.same(await callTool(r, { name: 'echo', arguments: { text: 'back' } }, ctx, log), { content: [{ type: 'text', text: 'back' }] })
  t.same(events, ['tools', 'tools'])

  handle.update({ description: 'Echoes loudly', handler: async ({ text }) => text.toUpperCase() })
  t.equal((listTools(r, {}, 100, null).tools as Array<Record<string, unknown>>)[1].description, 'Echoes loudly')
  t.same(await callTool(r, { name: 'echo', arguments: { text: 'hi' } }, ctx, log), { content: [{ type: 'text', text: 'HI' }] })
  t.same(events, ['tools', 'tools', 'tools'], 'update announced')

  // A new schema is compiled and checked as in tool(); an invalid update changes nothing.
  t.throws(() => handle.update({ input: Type.String() }), /"echo" input must be an object schema/)
  t.throws(() => handle.update({ name: 'first' }), /"first" is already registered/)
  t.same(events.length, 3, 'a refused update announced nothing')
  handle.update({ name: 'shout', input: z.object({ text: z.string().min(2) }), handler: async ({ text }) => `${text}!` })
  t.equal(handle.name, 'shout')
  t.same(toolNames(r), ['first', 'shout', 'last'], 'renamed in place')
  t.match(await callTool(r, { name: 'shout', arguments: { text: 'a' } }, ctx, log), { isError: true }, 'the new schema validates')
  t.same(await callTool(r, { name: 'shout', arguments: { text: 'ab' } }, ctx, log), { content: [{ type: 'text', text: 'ab!' }] })
  await t.rejects(callTool(r, { name: 'echo', arguments: {} }, ctx, log), { code: -32602 }, 'the old name is gone')

  handle.update({ enabled: false, description: 'Hidden' })
  t.equal(handle.enabled, false)
  t.same(toolNames(r), ['first', 'last'])
  const before = events.length
  handle.update({ description: 'Still hidden' })
  t.equal(events.length, before, 'changing a disabled tool is not announced (its list did not change)')
  handle.update({ enabled: true })
  t.equal(events.length, before + 1)

  handle.remove()
  t.equal(handle.removed, true)
  t.equal(handle.enabled, false)
  t.same(toolNames(r), ['first', 'last'])
  t.equal(events.length, before + 2, 'remove announced')
  handle.remove()
  t.equal(events.length, before + 2, 'a second remove does nothing')
  t.throws(() => handle.enable(), /"shout" was removed; register it again/)
  t.throws(() => handle.update({ description: 'x' }), FST_ERR_MCP_INVALID_DEFINITION)

  // A new registration under the old name is not the removed handle's.
  const again = r.tool({ name: 'shout', description: 'New' }, async () => 'new')
  t.equal(again.enabled, true)
  t.throws(() => handle.disable(), /was removed/)
  t.equal(again.enabled, true, 'the old handle did not touch the new tool')
})

t.test('removeTool() of a disabled tool; disabled tools and the capabilities', async t => {
  const { r, events } = started()
  const h = r.tool({ name: 'only', description: 'x' }, async () => 'x')
  h.disable()
  t.equal(r.tools.size, 0, 'the public map holds what is enabled')
  events.length = 0
  t.equal(r.removeTool('only'), true, 'a disabled tool can be removed by name')
  t.same(events, [], 'its removal changes no list clients see')
  t.equal(h.removed, true, 'the handle knows')
  t.equal(r.removeTool('only'), false)
})

t.test('nothing is announced before start(), but the revision moves', async t => {
  const r = new Registry()
  const events: ListKind[] = []
  r.on('changed', kind => { events.push(kind) })
  const rev = r.revision
  const h = r.tool({ name: 'a', description: 'x' }, async () => 'x')
  h.disable()
  h.enable()
  h.update({ title: 'A' })
  t.same(events, [])
  t.ok(r.revision > rev + 3, 'cached derived data (capabilities) is rebuilt')
})

t.test('resources, templates and prompts have handles too', async t => {
  const { r, events } = started()
  const res = r.resource({ uri: 'test://a', name: 'a', description: 'A' }, async (uri) => ({ uri, text: 'a' }))
  const tpl = r.resourceTemplate({ uriTemplate: 'test://items/{id}', name: 'item', description: 'Item' }, async (uri, v) => ({ uri, text: `item ${v.id}` }))
  const prompt = r.prompt({ name: 'greet', description: 'Greets' }, async () => [{ role: 'user', content: { type: 'text', text: 'hello' } }])
  t.equal(res.uri, 'test://a')
  t.equal(tpl.uriTemplate, 'test://items/{id}')
  t.equal(prompt.name, 'greet')
  t.same(events, ['resources', 'resources', 'prompts'])
  events.length = 0

  res.disable()
  t.same(listResources(r, {}, 10, null).resources, [])
  await t.rejects(readResource(r, { uri: 'test://a' }, ctx, notFound), { code: -32002 }, 'a disabled resource is not found')
  tpl.disable()
  t.same(listResourceTemplates(r, {}, 10, null).resourceTemplates, [])
  await t.rejects(readResource(r, { uri: 'test://items/1' }, ctx, notFound), { code: -32002 }, 'nor read through a disabled template')
  prompt.disable()
  t.same(listPrompts(r, {}, 10, null).prompts, [])
  await t.rejects(getPrompt(r, { name: 'greet' }, ctx), { code: -32602, message: 'Invalid params: unknown prompt "greet"' })
  t.same(events, ['resources', 'resources', 'prompts'])

  res.update({ enabled: true, uri: 'test://b', description: 'B' })
  t.same(listResources(r, {}, 10, null).resources, [{ uri: 'test://b', name: 'a', description: 'B' }])
  t.same(await readResource(r, { uri: 'test://b' }, ctx, notFound), { contents: [{ uri: 'test://b', text: 'a' }] })
  t.throws(() => res.update({ uri: 'not a uri' }), /must be an absolute URI/)
  tpl.enable()
  tpl.update({ handler: async (uri, v) => ({ uri, text: `v2 ${v.id}` }) })
  t.same(await readResource(r, { uri: 'test://items/7' }, ctx, notFound), { contents: [{ uri: 'test://items/7', text: 'v2 7' }] })
  prompt.update({ enabled: true, arguments: [{ name: 'who', required: true }] })
  await t.rejects(getPrompt(r, { name: 'greet' }, ctx), { message: 'Invalid params: missing required arguments: who' })
  t.same(events.slice(3), ['resources', 'resources', 'resources', 'prompts'])

  res.remove()
  tpl.remove()
  prompt.remove()
  t.equal(r.resources.size + r.templates.size + r.prompts.size, 0)
  t.same(events.slice(7), ['resources', 'resources', 'prompts'])
})

t.test('types: handles are typed from the definition', async t => {
  const r = new Registry()
  const h: ToolHandle<ReturnType<typeof Type.Object<{ n: ReturnType<typeof Type.Number> }>>> =
    r.tool({ name: 'typed', description: 'x', input: Type.Object({ n: Type.Number() }) }, async ({ n }) => String(n))
  // An update that keeps the schema keeps the handler's types.
  h.update({ handler: async ({ n }) => String(n + 1) })
  // @ts-expect-error n is a number
  h.update({ handler: async ({ n }) => n.toUpperCase() })
  // A new input types the new handler.
  h.update({ input: Type.Object({ s: Type.String() }), handler: async ({ s }) => s.toUpperCase() })
  const chained = (): void => {
    // @ts-expect-error tool() returns a handle, not the registry: no chaining
    r.tool({ name: 'x', description: 'x' }, async () => 'x').tool({ name: 'y', description: 'y' }, async () => 'y')
  }
  t.throws(chained, TypeError, 'nor at run time')
  t.pass('type-checked by tsc -p tsconfig.test.json')
})
