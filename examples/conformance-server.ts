/**
 * The fixtures the official conformance suite (`@modelcontextprotocol/conformance`) expects.
 * `npm run conformance:server` (env PORT, HOST); `npm run conformance` starts it and runs the suite.
 */
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp, { ErrorCode, McpError } from '../lib/index.js'

// 1×1 PNG and a tiny WAV, base64.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=='
const WAV = 'UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA='

const sleep = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))

/** A sleep that ends early, rejecting, when `signal` aborts (a cancelled task). */
function abortableSleep (ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) { reject(signal.reason); return }
    const timer = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve() }, ms)
    const onAbort = (): void => { clearTimeout(timer); reject(signal.reason) }
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

export async function buildConformanceServer (): Promise<ReturnType<typeof Fastify>> {
  const app = Fastify({ logger: { level: process.env.LOG_LEVEL ?? 'warn' } })
  await app.register(mcp, {
    path: '/mcp',
    serverInfo: { name: 'fastify-mcp-http-conformance', version: '1.0.0' },
    requestState: { secret: process.env.MCP_STATE_SECRET ?? 'conformance-fixture-secret-0123456789' }
  })
  const m = app.mcp

  m.tool({ name: 'test_simple_text', description: 'Returns simple text' },
    async () => 'This is a simple text response for testing.')
  m.tool({ name: 'test_image_content', description: 'Returns an image' },
    async () => [{ type: 'image', data: PNG, mimeType: 'image/png' }])
  m.tool({ name: 'test_audio_content', description: 'Returns audio' },
    async () => [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }])
  m.tool({ name: 'test_embedded_resource', description: 'Returns an embedded resource' },
    async () => [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }])
  m.tool({ name: 'test_multiple_content_types', description: 'Returns mixed content' }, async () => [
    { type: 'text', text: 'Multiple content types test:' },
    { type: 'image', data: PNG, mimeType: 'image/png' },
    { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: JSON.stringify({ test: 'data', value: 123 }) } }
  ])
  m.tool({ name: 'test_error_handling', description: 'Always fails' },
    async () => ({ content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }], isError: true }))
  m.tool({ name: 'test_tool_with_progress', description: 'Reports progress' }, async (_a, ctx) => {
    for (const progress of [0, 50, 100]) {
      await ctx.progress({ progress, total: 100, message: `Progress ${progress}%` })
      if (progress < 100) await sleep(50)
    }
    return 'Progress complete'
  })
  m.tool({ name: 'test_tool_with_logging', description: 'Logs three messages' }, async (_a, ctx) => {
    await ctx.log('info', 'Tool execution started')
    await sleep(50)
    await ctx.log('info', 'Tool processing data')
    await sleep(50)
    await ctx.log('info', 'Tool execution completed')
    return 'Logging complete'
  })
  m.tool({ name: 'test_sampling', description: 'Asks the client LLM', input: Type.Object({ prompt: Type.String() }) }, async ({ prompt }, ctx) => {
    const r = await ctx.sample('sample', { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 })
    const content = r.content as { type?: string, text?: string }
    return `LLM response: ${content?.type === 'text' ? content.text ?? '' : JSON.stringify(r.content)}`
  })
  m.tool({ name: 'test_elicitation', description: 'Asks the user', input: Type.Object({ message: Type.String() }) }, async ({ message }, ctx) => {
    const r = await ctx.elicit('user', {
      message,
      requestedSchema: {
        type: 'object',
        properties: { username: { type: 'string', description: 'User name' }, email: { type: 'string', description: 'Email address' } },
        required: ['username', 'email']
      }
    })
    return `User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`
  })
  m.tool({ name: 'test_elicitation_sep1034_defaults', description: 'Elicitation with defaults' }, async (_a, ctx) => {
    const r = await ctx.elicit('defaults', {
      message: 'Please review and update the form fields with defaults',
      requestedSchema: {
        type: 'object',
        properties: {
          name: { type: 'string', description: 'User name', default: 'John Doe' },
          age: { type: 'integer', description: 'User age', default: 30 },
          score: { type: 'number', description: 'User score', default: 95.5 },
          status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
          verified: { type: 'boolean', description: 'Verification status', default: true }
        }
      }
    })
    return `Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`
  })
  m.tool({ name: 'test_elicitation_sep1330_enums', description: 'Elicitation with enums' }, async (_a, ctx) => {
    const r = await ctx.elicit('enums', {
      message: 'Please select options from the enum fields',
      requestedSchema: {
        type: 'object',
        properties: {
          untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
          titledSingle: {
            type: 'string',
            description: 'Select one option with titles',
            oneOf: [{ const: 'value1', title: 'First Option' }, { const: 'value2', title: 'Second Option' }, { const: 'value3', title: 'Third Option' }]
          },
          legacyEnum: { type: 'string', description: 'Select one option (legacy)', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
          untitledMulti: { type: 'array', description: 'Select multiple options', minItems: 1, maxItems: 3, items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
          titledMulti: {
            type: 'array',
            description: 'Select multiple options with titles',
            minItems: 1,
            maxItems: 3,
            items: { anyOf: [{ const: 'value1', title: 'First Choice' }, { const: 'value2', title: 'Second Choice' }, { const: 'value3', title: 'Third Choice' }] }
          }
        },
        required: []
      }
    })
    return `Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`
  })
  m.tool({ name: 'test_reconnection', description: 'Closes the SSE stream mid-call; the result arrives after the client reconnects' }, async (_a, ctx) => {
    await sleep(100)
    ctx.closeSSEStream(500)
    await sleep(1000)
    return 'Reconnection test completed successfully'
  })
  m.tool({
    name: 'json_schema_2020_12_tool',
    description: 'Keeps JSON Schema 2020-12 keywords',
    input: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: { address: { $anchor: 'addressDef', type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
      properties: {
        name: { type: 'string' },
        address: { $ref: '#/$defs/address' },
        contactMethod: { type: 'string', enum: ['phone', 'email'] },
        phone: { type: 'string' },
        email: { type: 'string' }
      },
      allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
      if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
      then: { required: ['phone'] },
      else: { required: ['email'] },
      additionalProperties: false
    }
  }, async () => 'ok')
  m.tool({
    name: 'test_custom_headers',
    description: 'Mirrors its region argument into the Mcp-Param-Region header (x-mcp-header)',
    input: Type.Object({
      region: Type.String({ 'x-mcp-header': 'Region', description: 'Deployment region' }),
      query: Type.Optional(Type.String())
    })
  }, async ({ region }) => `region=${region}`)

  // ─── 2026-07-28 fixtures: multi-round-trip requests (input_required), listen streams ───
  const nameSchema = { type: 'object', properties: { name: { type: 'string', description: 'Your name' } }, required: ['name'] }
  const textOf = (r: { content?: unknown }): string => {
    const c = r.content as { type?: string, text?: string } | undefined
    return c?.type === 'text' ? c.text ?? '' : JSON.stringify(r.content)
  }
  m.tool({ name: 'test_missing_capability', description: 'Needs the sampling capability' }, async (_a, ctx) => {
    const r = await ctx.sample('question', { messages: [{ role: 'user', content: { type: 'text', text: 'Hello?' } }], maxTokens: 50 })
    return `Sampled: ${textOf(r)}`
  })
  m.tool({ name: 'test_streaming_elicitation', description: 'Elicits while streaming progress' }, async (_a, ctx) => {
    await ctx.progress({ progress: 1, total: 2 })
    const r = await ctx.elicit('user_name', { message: 'What is your name?', requestedSchema: nameSchema })
    return `Hello, ${String(r.content?.name ?? 'unknown')}!`
  })
  m.tool({ name: 'test_logging_tool', description: 'Logs when the request asks for it' }, async (_a, ctx) => {
    await ctx.log('info', 'Tool execution started')
    await ctx.log('debug', 'Tool debug details')
    await ctx.log('info', 'Tool execution completed')
    return 'Logging complete'
  })
  m.tool({ name: 'test_trigger_tool_change', description: 'Announces a tools list change' }, async () => {
    m.listChanged('tools')
    return 'tools/list_changed sent'
  })
  m.tool({ name: 'test_trigger_prompt_change', description: 'Announces a prompts list change' }, async () => {
    m.listChanged('prompts')
    return 'prompts/list_changed sent'
  })
  m.tool({ name: 'test_input_required_result_elicitation', description: 'Asks for the user name (input_required)' }, async (_a, ctx) => {
    const r = await ctx.elicit('user_name', { message: 'What is your name?', requestedSchema: nameSchema })
    return `Hello, ${String(r.content?.name ?? 'unknown')}!`
  })
  m.tool({ name: 'test_input_required_result_sampling', description: 'Asks the client LLM (input_required)' }, async (_a, ctx) => {
    const r = await ctx.sample('capital_question', { messages: [{ role: 'user', content: { type: 'text', text: 'What is the capital of France?' } }], maxTokens: 100 })
    return `LLM said: ${textOf(r)}`
  })
  m.tool({ name: 'test_input_required_result_list_roots', description: 'Lists the client roots (input_required)' }, async (_a, ctx) => {
    const roots = await ctx.roots('client_roots')
    return `Roots: ${roots.map(r => r.uri).join(', ')}`
  })
  m.tool({ name: 'test_input_required_result_request_state', description: 'Carries state across rounds' }, async (_a, ctx) => {
    const state = (ctx as typeof ctx & { state: Record<string, unknown> }).state
    state.phase = 'confirm'
    const r = await ctx.elicit('confirm', {
      message: 'Confirm?',
      requestedSchema: { type: 'object', properties: { confirmed: { type: 'boolean' } }, required: ['confirmed'] }
    })
    return state.phase === 'confirm' ? `state-ok: ${r.action}` : 'state-missing'
  })
  m.tool({ name: 'test_input_required_result_multiple_inputs', description: 'Asks for several inputs at once' }, async (_a, ctx) => {
    const state = (ctx as typeof ctx & { state: Record<string, unknown> }).state
    state.started = true
    const [name, greeting, roots] = await Promise.all([
      ctx.elicit('user_name', { message: 'What is your name?', requestedSchema: nameSchema }),
      ctx.sample('greeting', { messages: [{ role: 'user', content: { type: 'text', text: 'Say hello' } }], maxTokens: 50 }),
      ctx.roots('client_roots')
    ])
    return `Hello ${String(name.content?.name ?? '')}: ${textOf(greeting)} (${roots.length} roots)`
  })
  m.tool({ name: 'test_input_required_result_multi_round', description: 'Two rounds of input' }, async (_a, ctx) => {
    const state = (ctx as typeof ctx & { state: Record<string, unknown> }).state
    const step1 = state.step1 ?? (await ctx.elicit('step1', { message: 'Step 1', requestedSchema: nameSchema })).content
    state.step1 = step1
    const step2 = await ctx.elicit('step2', { message: 'Step 2', requestedSchema: nameSchema })
    return `Done: ${JSON.stringify(step1)} then ${JSON.stringify(step2.content)}`
  })
  m.tool({ name: 'test_input_required_result_tampered_state', description: 'Refuses a tampered requestState' }, async (_a, ctx) => {
    const state = (ctx as typeof ctx & { state: Record<string, unknown> }).state
    state.secret = 'server-only'
    const r = await ctx.elicit('user_name', { message: 'What is your name?', requestedSchema: nameSchema })
    return `Hello, ${String(r.content?.name ?? 'unknown')}! (${String(state.secret)})`
  })
  m.tool({ name: 'test_input_required_result_capabilities', description: 'Asks only for what the client declared' }, async (_a, ctx) => {
    const caps = ctx.clientCapabilities
    const asks: Array<Promise<unknown>> = []
    if (caps.elicitation !== undefined) asks.push(ctx.elicit('user_name', { message: 'What is your name?', requestedSchema: nameSchema }))
    if (caps.sampling !== undefined) asks.push(ctx.sample('capital_question', { messages: [{ role: 'user', content: { type: 'text', text: 'Capital of France?' } }], maxTokens: 50 }))
    if (caps.roots !== undefined) asks.push(ctx.roots('client_roots'))
    await Promise.all(asks)
    return `Got ${asks.length} answers`
  })
  m.prompt({ name: 'test_input_required_result_prompt', description: 'A prompt that asks for context (input_required)' }, async (_args, ctx) => {
    const r = await ctx.elicit('user_context', {
      message: 'What context should the prompt use?',
      requestedSchema: { type: 'object', properties: { context: { type: 'string' } }, required: ['context'] }
    })
    return [{ role: 'user', content: { type: 'text', text: `Context: ${String(r.content?.context ?? '')}` } }]
  })

  // The Tasks extension's fixtures (the tasks-* scenarios).
  m.tool({ name: 'greet', description: 'Greets (never a task)', input: Type.Object({ name: Type.String() }) },
    async ({ name }) => `Hello, ${name}!`)
  m.tool({
    name: 'slow_compute',
    description: 'Sleeps `seconds` then answers; a task when the client takes tasks',
    input: Type.Object({ seconds: Type.Number({ minimum: 0, maximum: 600 }), label: Type.Optional(Type.String()) }),
    taskSupport: 'optional'
  }, async ({ seconds, label }, ctx) => {
    await abortableSleep(seconds * 1000, ctx.signal)
    return `Computed ${label ?? 'result'} after ${seconds}s`
  })
  m.tool({ name: 'failing_job', description: 'Fails as a tool after about a second (a task only)', taskSupport: 'required' }, async (_a, ctx) => {
    await abortableSleep(1000, ctx.signal)
    return { content: [{ type: 'text', text: 'The job failed' }], isError: true }
  })
  m.tool({ name: 'protocol_error_job', description: 'Fails with a protocol error (a task)', taskSupport: 'optional' }, async () => {
    throw new McpError(ErrorCode.InternalError, 'The job hit an internal error')
  })
  m.tool({ name: 'confirm_delete', description: 'Asks before deleting (a task)', input: Type.Object({ filename: Type.String() }), taskSupport: 'optional' },
    async ({ filename }, ctx) => {
      const r = await ctx.elicit('confirm', {
        message: `Delete ${filename}?`,
        requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] }
      })
      return r.action === 'accept' && r.content?.confirm === true ? `Deleted ${filename}` : `Kept ${filename}`
    })
  m.tool({
    name: 'test_tool_with_task',
    description: 'Asks for a name (input_required rounds), then runs as a task',
    taskSupport: 'required',
    beforeTask: async (_a, ctx) => {
      const r = await ctx.elicit('user_name', { message: 'What is your name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } })
      ctx.state.name = String(r.content?.name ?? 'nobody')
    }
  }, async (_a, ctx) => `Hello, ${String(ctx.state.name)}! (from the task)`)
  m.tool({ name: 'multi_input', description: 'Asks two questions at once (a task)', taskSupport: 'optional' }, async (_a, ctx) => {
    const schema = { type: 'object', properties: { name: { type: 'string' }, confirm: { type: 'boolean' } } }
    const [a, b] = await Promise.all([
      ctx.elicit('first', { message: 'First?', requestedSchema: schema }),
      ctx.elicit('second', { message: 'Second?', requestedSchema: schema })
    ])
    return `Got ${String(a.content?.name)} and ${String(b.content?.name)}`
  })

  m.resource({ uri: 'test://static-text', name: 'static-text', description: 'A static text resource', mimeType: 'text/plain' },
    async (uri) => ({ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }))
  m.resource({ uri: 'test://static-binary', name: 'static-binary', description: 'A static binary resource', mimeType: 'image/png' },
    async (uri) => ({ uri, mimeType: 'image/png', blob: PNG }))
  m.resource({ uri: 'test://watched-resource', name: 'watched-resource', description: 'A resource that changes', mimeType: 'text/plain' },
    async (uri) => ({ uri, mimeType: 'text/plain', text: `Watched resource content at ${new Date().toISOString()}` }))
  m.resourceTemplate({ uriTemplate: 'test://template/{id}/data', name: 'template', description: 'A resource template', mimeType: 'application/json' },
    async (uri, { id }) => ({ uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }))
  const watched = setInterval(() => m.resourceUpdated('test://watched-resource'), 3000)
  watched.unref()
  app.addHook('onClose', async () => clearInterval(watched))

  m.prompt({ name: 'test_simple_prompt', description: 'A simple prompt' },
    async () => [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }])
  m.prompt({
    name: 'test_prompt_with_arguments',
    description: 'A prompt with arguments',
    arguments: [{ name: 'arg1', description: 'First argument', required: true }, { name: 'arg2', description: 'Second argument', required: true }],
    complete: { arg1: (value) => ['paris', 'park', 'party'].filter(v => v.startsWith(value)) }
  }, async ({ arg1, arg2 }) => [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }])
  m.prompt({
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt with an embedded resource',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource', required: true }]
  }, async ({ resourceUri }) => [
    { role: 'user', content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
    { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } }
  ])
  m.prompt({ name: 'test_prompt_with_image', description: 'A prompt with an image' }, async () => [
    { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
    { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } }
  ])
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildConformanceServer()
  const port = Number(process.env.PORT ?? 3000)
  const host = process.env.HOST ?? '127.0.0.1'
  await app.listen({ port, host })
  console.log(`conformance server listening on http://${host}:${port}/mcp`)
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => { app.close().then(() => process.exit(0), () => process.exit(1)) })
  }
}
