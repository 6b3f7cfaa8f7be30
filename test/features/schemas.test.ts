/**
 * Tool schemas beyond TypeBox (lib/features/schema.ts): zod v4 and any Standard Schema with a
 * JSON Schema converter are advertised as JSON Schema and validated by the schema's own validator
 * (input before the handler, output after it); what cannot be advertised or checked is refused at
 * definition time with FST_ERR_MCP_INVALID_DEFINITION, never listed unchecked. The types: the
 * handler's arguments and `structuredContent` follow `input` / `output`, and a tool without
 * `input` gets a record. The `@ts-expect-error` lines are checked by `tsc -p tsconfig.test.json`
 * (an `any` or `unknown` would make them fail there).
 */
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { z } from 'zod'
import type { FastifyBaseLogger } from 'fastify'
import type { McpContext } from '../../lib/context.js'
import { FST_ERR_MCP_INVALID_DEFINITION } from '../../lib/errors.js'
import { listTools } from '../../lib/features/methods.js'
import { callTool } from '../../lib/features/tool-call.js'
import { Registry, type StandardSchemaV1 } from '../../lib/features/registry.js'

const ctx = { signal: new AbortController().signal, state: {} } as unknown as McpContext
const logged: unknown[] = []
const log = { error: (obj: unknown) => { logged.push(obj) } } as unknown as FastifyBaseLogger

async function callIt (r: Registry, name: string, args: unknown): Promise<Record<string, any>> {
  return await callTool(r, { name, arguments: args }, ctx, log)
}

function text (result: Record<string, any>): string {
  return result.content?.[0]?.text as string
}

t.test('zod input: advertised as its JSON Schema, validated, parsed value handed to the handler', async t => {
  const r = new Registry()
  const seen: unknown[] = []
  r.tool({
    name: 'book',
    description: 'Books seats',
    input: z.object({
      title: z.string().min(1),
      seats: z.number().int().positive().default(1),
      when: z.string().transform(s => new Date(s))
    })
  }, async (args) => {
    seen.push(args)
    const when: Date = args.when // the output type: after the transform
    const seats: number = args.seats // the default applied
    // @ts-expect-error title is a string
    const notANumber: number = args.title
    void notANumber
    return `${args.title} x${seats} on ${when.toISOString().slice(0, 10)}`
  })
  const schema = listTools(r, {}, 10, null).tools as Array<Record<string, any>>
  t.match(schema[0].inputSchema, {
    type: 'object',
    properties: { title: { type: 'string', minLength: 1 }, seats: { type: 'integer', default: 1 }, when: { type: 'string' } }
  }, 'the JSON Schema of the input side, not the zod object\'s JSON text')
  t.notOk('def' in schema[0].inputSchema, 'no zod internals on the wire')
  t.same(schema[0].inputSchema.required, ['title', 'when'])

  const ok = await callIt(r, 'book', { title: 'Opera', when: '2026-07-28T20:00:00Z' })
  t.equal(text(ok), 'Opera x1 on 2026-07-28')
  t.notOk(ok.isError)
  t.ok(seen[0] instanceof Object && (seen[0] as { when: unknown }).when instanceof Date, 'the handler got zod\'s parsed value')

  const bad = await callIt(r, 'book', { title: '', seats: -2, when: 'x' })
  t.equal(bad.isError, true, 'invalid arguments are a tool error')
  t.match(text(bad), /^Invalid arguments for tool "book": /)
  t.match(text(bad), /\/title /, 'names the path')
  t.match(text(bad), /\/seats /)
  t.equal(seen.length, 1, 'the handler did not run')

  const missing = await callIt(r, 'book', {})
  t.equal(missing.isError, true)
  t.match(text(missing), /\/title/)
})

t.test('zod output: structuredContent checked and typed; what zod parsed is sent', async t => {
  const r = new Registry()
  let answer: unknown = { total: 3, extra: 'stripped by zod' }
  r.tool({
    name: 'sum',
    description: 'Sums',
    input: z.object({ xs: z.array(z.number()) }),
    output: z.object({ total: z.number() })
  }, async ({ xs }) => {
    if (xs.length === 0) return { content: [{ type: 'text', text: 'nothing to sum' }], isError: true }
    return { structuredContent: answer as { total: number } }
  })
  r.tool({ name: 'typed', description: 'Types only', output: z.object({ total: z.number() }) },
    // @ts-expect-error structuredContent must match the output schema
    async () => ({ structuredContent: { total: 'three' } }))
  r.tool({ name: 'typed_missing', description: 'Types only', output: z.object({ total: z.number() }) },
    // @ts-expect-error a tool with output returns structuredContent (or an isError result)
    async () => 'just text')
  const listed = listTools(r, {}, 10, null).tools as Array<Record<string, any>>
  t.same(listed[0].outputSchema, {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    properties: { total: { type: 'number' } },
    required: ['total'],
    additionalProperties: false
  }, 'the JSON Schema of the output side')

  const ok = await callIt(r, 'sum', { xs: [1, 2] })
  t.same(ok.structuredContent, { total: 3 }, 'zod\'s parsed value (unknown keys stripped)')
  t.same(ok.content, [{ type: 'text', text: '{"total":3}' }], 'and its text')

  answer = { total: 'three' }
  const wrong = await callIt(r, 'sum', { xs: [1] })
  t.equal(wrong.isError, true, 'a wrong structuredContent is an error')
  t.equal(text(wrong), 'Tool returned structured content that does not match its output schema')

  const toolError = await callIt(r, 'sum', { xs: [] })
  t.same(toolError, { content: [{ type: 'text', text: 'nothing to sum' }], isError: true }, 'an isError result is not checked')
})

t.test('any Standard Schema with a JSON Schema converter; async validators are awaited', async t => {
  const calls: unknown[] = []
  const even: StandardSchemaV1<{ n: number }> = {
    '~standard': {
      version: 1,
      vendor: 'hand-made',
      validate: async (value) => {
        calls.push(value)
        const n = (value as { n?: unknown } | null)?.n
        return typeof n === 'number' && n % 2 === 0 ? { value: { n } } : { issues: [{ message: 'must be even', path: [{ key: 'n' }] }] }
      },
      jsonSchema: {
        input: () => ({ type: 'object', properties: { n: { type: 'integer', multipleOf: 2 } }, required: ['n'] }),
        output: () => ({ type: 'object', properties: { n: { type: 'integer' } } })
      }
    }
  }
  const r = new Registry()
  r.tool({ name: 'half', description: 'Halves an even number', input: even }, async ({ n }) => String(n / 2))
  t.same((listTools(r, {}, 10, null).tools as Array<Record<string, any>>)[0].inputSchema,
    { type: 'object', properties: { n: { type: 'integer', multipleOf: 2 } }, required: ['n'] })
  t.equal(text(await callIt(r, 'half', { n: 8 })), '4')
  const odd = await callIt(r, 'half', { n: 7 })
  t.equal(odd.isError, true)
  t.equal(text(odd), 'Invalid arguments for tool "half": /n must be even')
  t.same(calls, [{ n: 8 }, { n: 7 }], 'the schema\'s own validator ran')

  // A callable schema (ArkType's types are functions) is a Standard Schema too.
  const callable = Object.assign((v: unknown) => v, { '~standard': even['~standard'] })
  r.tool({ name: 'half_too', description: 'Same, callable schema', input: callable }, async ({ n }) => String(n / 2))
  t.equal(text(await callIt(r, 'half_too', { n: 4 })), '2')
  t.equal((await callIt(r, 'half_too', { n: 3 })).isError, true)
})

t.test('refused at definition time, never listed unchecked', async t => {
  const r = new Registry()
  const noConverter = { '~standard': { version: 1, vendor: 'old-lib', validate: (v: unknown) => ({ value: v }) } }
  t.throws(() => r.tool({ name: 'a', description: 'x', input: noConverter }, async () => 'x'), FST_ERR_MCP_INVALID_DEFINITION)
  t.throws(() => r.tool({ name: 'a', description: 'x', input: noConverter }, async () => 'x'),
    /"a" has an invalid schema: input is a Standard Schema \(vendor "old-lib"\) without a JSON Schema converter/)
  t.throws(() => r.tool({ name: 'b', description: 'x', output: noConverter }, async () => ({ structuredContent: {} })),
    /output is a Standard Schema \(vendor "old-lib"\) without a JSON Schema converter/)

  // A zod schema whose output side JSON Schema cannot express (a transform): zod's converter throws.
  t.throws(() => r.tool({ name: 'c', description: 'x', output: z.object({ at: z.string().transform(s => s.length) }) }, async () => ({ structuredContent: { at: '' } })),
    /output: the zod schema cannot be converted to JSON Schema: .*Transforms cannot be represented/)

  // Objects of another library without ~standard (a zod 3 schema, a class instance): not JSON Schema.
  class Schemaish { _def = { typeName: 'ZodObject' } }
  t.throws(() => r.tool({ name: 'd', description: 'x', input: new Schemaish() }, async () => 'x'),
    /input must be a JSON Schema \(plain JSON data\), a TypeBox schema or a Standard Schema with a JSON Schema converter: \(root\) is an instance of Schemaish/)
  t.throws(() => r.tool({ name: 'e', description: 'x', input: { type: 'object', properties: { a: { type: 'string', check: () => true } } } }, async () => 'x'),
    /\(root\)\/properties\/a\/check is a function/)
  t.throws(() => r.tool({ name: 'f', description: 'x', input: { type: 'object', toJSON: () => ({}) } }, async () => 'x'), /has a toJSON method/)
  t.throws(() => r.tool({ name: 'g', description: 'x', input: z.string() }, async () => 'x'), /"g" input must be an object schema/)
  t.equal(r.tools.size, 0, 'nothing was registered')
})

t.test('TypeBox and plain JSON Schema still go through Ajv', async t => {
  const r = new Registry()
  r.tool({ name: 'tb', description: 'x', input: Type.Object({ a: Type.Integer({ default: 5 }) }) }, async ({ a }) => String(a))
  t.equal(text(await callIt(r, 'tb', {})), '5', 'Ajv defaults')
  t.match(text(await callIt(r, 'tb', { a: 'x' })), /\/a must be integer/)
  r.tool({ name: 'plain', description: 'x', input: { type: 'object', properties: { a: { type: 'string' } }, required: ['a'] } },
    async (args) => typeof args.a) // a record: any key reads as unknown
  t.match(text(await callIt(r, 'plain', {})), /must have required property 'a'/)
})

t.test('types: a tool without input gets a record; as-const JSON Schema is inferred', async t => {
  const r = new Registry()
  r.tool({ name: 'none', description: 'No input' }, async (args, c) => {
    const x: unknown = args.x // a record, not unknown
    c.state.seen = x
    return JSON.stringify(args)
  })
  t.equal(text(await callIt(r, 'none', { x: 1 })), '{"x":1}')
  r.tool({
    name: 'literal',
    description: 'x',
    input: { type: 'object', properties: { a: { type: 'string' }, b: { type: 'array', items: { type: 'integer' } } }, required: ['a'] } as const
  }, async ({ a, b }) => {
    const s: string = a
    const list: number[] | undefined = b
    // @ts-expect-error a is a string
    const n: number = a
    void n
    return `${s}${list?.length ?? 0}`
  })
  t.equal(text(await callIt(r, 'literal', { a: 'x', b: [1, 2] })), 'x2')
})
