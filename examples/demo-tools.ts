/**
 * The demo's tools: basket_create/basket_add/basket_get/basket_end (shared state on a state handle,
 * on both wires), counter_add, counter_get (a per-session counter: handshake-era clients), ask_name
 * (elicitation on both wires), slow_count (progress and cancellation), long_job (a task on 2026-07-28
 * clients that take tasks: progress, a question midway, cancellation). No server here: importing
 * this module starts nothing.
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
  registerBasketTools(mcp)
  registerLongJob(mcp)

  mcp.tool({
    name: 'counter_add',
    session: 'required',
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
    session: 'required',
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

/** The most items a demo basket holds (the demo's own bound: its state stays small). */
const MAX_ITEMS = 1000

/**
 * A shopping basket on a state handle: `basket_create` mints one, the others take it as their
 * `basket` argument. `basket_add` reads the items, waits `delayMs`, and writes them back — a
 * read-modify-write that parallel calls on one basket would lose without the lock.
 */
export function registerBasketTools (mcp: McpDecorator): void {
  mcp.handleKind('basket', { ttl: 60 * 60_000 })
  const basket = Type.String({ description: 'The basket handle basket_create returned.' })
  const items = Type.Object({ items: Type.Array(Type.String()) })

  mcp.tool({
    name: 'basket_create',
    description: 'Creates an empty shopping basket and returns its handle; pass it as `basket` to the other basket tools.',
    output: Type.Object({ basket: Type.String() })
  }, async (_args, ctx) => {
    const id = await ctx.handles.create('basket', { items: [] })
    return { content: [{ type: 'text', text: id }], structuredContent: { basket: id } }
  })

  mcp.tool({
    name: 'basket_add',
    description: 'Adds an item to a basket (after waiting `delayMs`) and returns how many items it holds.',
    input: Type.Object({
      basket,
      item: Type.String({ minLength: 1, maxLength: 200 }),
      delayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000, default: 0 }))
    }),
    output: Type.Object({ count: Type.Integer() }),
    handle: { argument: 'basket', kind: 'basket' }
  }, async ({ item, delayMs = 0 }, ctx) => {
    const before = ctx.handle?.get<string[]>('items') ?? []
    if (before.length >= MAX_ITEMS) return { content: [{ type: 'text', text: `A basket holds at most ${MAX_ITEMS} items.` }], isError: true }
    if (delayMs > 0) await sleep(delayMs, ctx.signal)
    const after = [...before, item]
    ctx.handle?.set('items', after)
    return { content: [{ type: 'text', text: `${after.length} items` }], structuredContent: { count: after.length } }
  })

  // Read-only: parallel calls on one basket read its last saved state side by side, without
  // waiting for the lock (a basket_add running meanwhile is seen whole or not at all).
  mcp.tool({
    name: 'basket_get',
    description: 'Returns the items in a basket (after waiting `delayMs`).',
    input: Type.Object({
      basket,
      delayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000, default: 0 }))
    }),
    output: items,
    annotations: { readOnlyHint: true },
    handle: { argument: 'basket', kind: 'basket' }
  }, async ({ delayMs = 0 }, ctx) => {
    const list = ctx.handle?.get<string[]>('items') ?? []
    if (delayMs > 0) await sleep(delayMs, ctx.signal)
    return { content: [{ type: 'text', text: list.join(', ') }], structuredContent: { items: list } }
  })

  mcp.tool({
    name: 'basket_end',
    description: 'Throws a basket away; its handle is no longer valid.',
    input: Type.Object({ basket })
  }, async ({ basket: id }, ctx) => {
    return await ctx.handles.end('basket', id) ? 'Basket thrown away.' : { content: [{ type: 'text', text: 'Unknown or expired basket handle.' }], isError: true }
  })
}

/**
 * `long_job`: works `seconds` seconds, one step a second, reporting progress (a task's
 * `statusMessage`); `failAt` fails it (a tool error) at that second; `ask` asks for a confirmation
 * midway (a task turns `input_required` until `tasks/update` answers). A task for 2026-07-28
 * clients that declare the Tasks extension, an ordinary (long) call for the others.
 */
export function registerLongJob (mcp: McpDecorator): void {
  mcp.tool({
    name: 'long_job',
    description: 'Works `seconds` seconds with progress; `failAt` fails it at that second; `ask` asks for a confirmation midway. Runs as a task when the client takes tasks.',
    input: Type.Object({
      seconds: Type.Integer({ minimum: 0, maximum: 3600 }),
      failAt: Type.Optional(Type.Integer({ minimum: 0 })),
      ask: Type.Optional(Type.Boolean())
    }),
    taskSupport: 'optional'
  }, async ({ seconds, failAt, ask = false }, ctx) => {
    const midway = Math.floor(seconds / 2)
    for (let second = 0; second < seconds; second++) {
      if (failAt === second) return { content: [{ type: 'text', text: `long_job failed at second ${second}` }], isError: true }
      if (ask && second === midway) {
        const answer = await ctx.elicit('confirm', {
          message: `long_job is halfway (${second}/${seconds} s): go on?`,
          requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] }
        })
        if (answer.action !== 'accept' || answer.content?.confirm !== true) return `long_job stopped at second ${second}, as asked`
      }
      await ctx.progress({ progress: second, total: seconds, message: `second ${second} of ${seconds}` })
      await sleep(1000, ctx.signal)
    }
    if (failAt === seconds) return { content: [{ type: 'text', text: `long_job failed at second ${seconds}` }], isError: true }
    return `long_job done after ${seconds} s`
  })
}
