/**
 * The demo server: `npm start` → http://127.0.0.1:3000/mcp (env PORT, HOST), sessions in memory.
 *
 * Tools: counter_add, counter_get (a per-session counter), ask_name (elicitation), slow_count
 * (progress and cancellation).
 */
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import mcp from '../lib/index.js'

const sleep = (ms: number, signal?: AbortSignal): Promise<void> => new Promise((resolve, reject) => {
  if (signal?.aborted === true) { reject(signal.reason); return }
  const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, ms)
  const onAbort = (): void => { clearTimeout(timer); reject(signal?.reason) }
  signal?.addEventListener('abort', onAbort, { once: true })
})

export async function buildDemo (opts: { logger?: boolean } = {}): Promise<ReturnType<typeof Fastify>> {
  const app = Fastify({ logger: opts.logger ?? true })
  await app.register(mcp, {
    path: '/mcp',
    serverInfo: { name: 'fastify-mcp-http-demo', version: '1.0.0' }
  })

  app.mcp.tool({
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

  app.mcp.tool({
    name: 'counter_get',
    description: 'Returns this session\'s counter.',
    output: Type.Object({ counter: Type.Integer() })
  }, async (_args, ctx) => {
    const counter = ctx.session?.get<number>('counter') ?? 0
    return { content: [{ type: 'text', text: String(counter) }], structuredContent: { counter } }
  })

  app.mcp.tool({
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

  app.mcp.tool({
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

  return app
}

// Started directly (npm start): listen.
if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildDemo()
  const port = Number(process.env.PORT ?? 3000)
  const host = process.env.HOST ?? '127.0.0.1'
  await app.listen({ port, host })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => { app.close().then(() => process.exit(0), () => process.exit(1)) })
  }
}
