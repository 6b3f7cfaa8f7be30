/**
 * The demo's tools: counter_add, counter_get (a per-session counter), ask_name (elicitation on
 * both wires), slow_count (progress and cancellation). No server here: importing this module
 * starts nothing.
 */
import { Type } from '@sinclair/typebox'
import type { McpDecorator } from '../lib/index.js'

const sleep = (ms: number, signal?: AbortSignal): Promise<void> => new Promise((resolve, reject) => {
  if (signal?.aborted === true) { reject(signal.reason); return }
  const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, ms)
  const onAbort = (): void => { clearTimeout(timer); reject(signal?.reason) }
  signal?.addEventListener('abort', onAbort, { once: true })
})

/**
 * The demo's tools, on any registry (the demo server and the tests' server fixtures use them).
 * `admin` adds `demo_add_tool`, which changes this instance's tool list at run time, so that the
 * resulting tools/list_changed can be watched arriving on streams held by other instances.
 */
export function registerDemoTools (mcp: McpDecorator, opts: { admin?: boolean } = {}): void {
  mcp.tool({
    name: 'counter_add',
    description: 'Adds `by` to this session\'s counter (after waiting `delayMs`) and returns the new value.',
    input: Type.Object({
      by: Type.Optional(Type.Integer({ default: 1 })),
      delayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000, default: 0 }))
    }),
    output: Type.Object({ counter: Type.Integer() })
  }, async ({ by = 1, delayMs = 0 }, ctx) => {
    const before = ctx.session?.get<number>('counter') ?? 0
    if (delayMs > 0) await sleep(delayMs, ctx.signal)
    const counter = before + by
    ctx.session?.set('counter', counter)
    return { content: [{ type: 'text', text: String(counter) }], structuredContent: { counter } }
  })

  mcp.tool({
    name: 'counter_get',
    description: 'Returns this session\'s counter.',
    output: Type.Object({ counter: Type.Integer() })
  }, async (_args, ctx) => {
    const counter = ctx.session?.get<number>('counter') ?? 0
    return { content: [{ type: 'text', text: String(counter) }], structuredContent: { counter } }
  })

  mcp.tool({
    name: 'ask_name',
    description: 'Asks the user for their name and greets them.'
  }, async (_args, ctx) => {
    const answer = await ctx.elicit('name', {
      message: 'What is your name?',
      requestedSchema: { type: 'object', properties: { name: { type: 'string', title: 'Name' } }, required: ['name'] }
    })
    if (answer.action !== 'accept' || typeof answer.content?.name !== 'string') return 'No name given.'
    return `Hello, ${answer.content.name}!`
  })

  mcp.tool({
    name: 'slow_count',
    description: 'Counts to `steps`, one step every `intervalMs`, reporting progress; stops when cancelled.',
    input: Type.Object({
      steps: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 5 })),
      intervalMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 10_000, default: 100 }))
    })
  }, async ({ steps = 5, intervalMs = 100 }, ctx) => {
    for (let i = 1; i <= steps; i++) {
      await sleep(intervalMs, ctx.signal)
      await ctx.progress({ progress: i, total: steps, message: `step ${i}` })
    }
    return `Counted to ${steps}.`
  })

  if (opts.admin === true) {
    mcp.tool({
      name: 'demo_add_tool',
      description: 'Registers an echo tool with the given name on this instance.',
      input: Type.Object({ name: Type.String({ pattern: '^[A-Za-z0-9_]{1,64}$' }) })
    }, async ({ name }) => {
      if (!mcp.tools.has(name)) mcp.tool({ name, description: 'Echoes its text.' }, async (args) => JSON.stringify(args))
      return `added ${name}`
    })
  }
}
