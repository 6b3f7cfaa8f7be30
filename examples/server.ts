/**
 * The demo server: `npm start` → http://127.0.0.1:3000/mcp (env PORT, HOST), sessions in memory.
 *
 * Tools: counter_add, counter_get (a per-session counter), ask_name (elicitation on both wires),
 * slow_count (progress and cancellation).
 *
 * Switches (env): MCP_STORE = memory | file | redis; MCP_LOCK = none | memory | file | redis;
 * MCP_SESSION_DIR (file store/lock, default ./.mcp-sessions); REDIS_URL (default
 * redis://127.0.0.1:6379); MCP_LOCK_TIMEOUT_MS (acquire timeout); MCP_LOCK_TTL_MS (Redis lease TTL);
 * MCP_STATE_SECRET (seals 2026-07-28 requestState; the same on every instance). With REDIS_URL set,
 * the bus and the event log are in Redis too, so instances behind a load balancer need no sticky
 * sessions.
 */
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import { Type } from '@sinclair/typebox'
import mcp, {
  createLockClient, FileSessionLock, FileSessionStore, MemorySessionLock, MemorySessionStore, RedisSessionLock, RedisSessionStore,
  type McpDecorator, type SessionLock, type SessionStore
} from '../lib/index.js'

export interface DemoOptions {
  logger?: boolean
  env?: Record<string, string | undefined>
}

/** Builds the store and lock the env asks for; `close` closes the connections it opened. */
function sessionsFromEnv (env: Record<string, string | undefined>): { store: SessionStore, lock?: SessionLock, close: () => Promise<void> } {
  const storeKind = env.MCP_STORE ?? 'memory'
  const lockKind = env.MCP_LOCK ?? 'none'
  const dir = env.MCP_SESSION_DIR ?? '.mcp-sessions'
  const redisUrl = env.REDIS_URL ?? 'redis://127.0.0.1:6379'
  const timeout = env.MCP_LOCK_TIMEOUT_MS === undefined ? undefined : Number(env.MCP_LOCK_TIMEOUT_MS)
  const ttl = env.MCP_LOCK_TTL_MS === undefined ? undefined : Number(env.MCP_LOCK_TTL_MS)
  const clients: Redis[] = []
  let store: SessionStore
  switch (storeKind) {
    case 'memory': store = new MemorySessionStore(); break
    case 'file': store = new FileSessionStore({ dir }); break
    case 'redis': {
      // Fail fast while Redis is down (503 at once) instead of queueing commands for minutes.
      const redis = createLockClient(redisUrl)
      clients.push(redis)
      store = new RedisSessionStore({ redis })
      break
    }
    default: throw new Error(`MCP_STORE must be memory, file or redis (got ${storeKind})`)
  }
  let lock: SessionLock | undefined
  switch (lockKind) {
    case 'none': break
    case 'memory': lock = new MemorySessionLock({ timeout }); break
    case 'file': lock = new FileSessionLock({ dir, timeout }); break
    // The lock makes its own fail-fast client from the URL (and closes it).
    case 'redis': lock = new RedisSessionLock({ redis: redisUrl, timeout, ttl }); break
    default: throw new Error(`MCP_LOCK must be none, memory, file or redis (got ${lockKind})`)
  }
  return {
    store,
    lock,
    close: async () => {
      await lock?.close?.()
      await store.close?.()
      await Promise.all(clients.map(c => c.quit().catch(() => c.disconnect())))
    }
  }
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> => new Promise((resolve, reject) => {
  if (signal?.aborted === true) { reject(signal.reason); return }
  const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, ms)
  const onAbort = (): void => { clearTimeout(timer); reject(signal?.reason) }
  signal?.addEventListener('abort', onAbort, { once: true })
})

/** The demo's tools, on any registry (the tests reuse them). */
export function registerDemoTools (mcp: McpDecorator): void {
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
}

export async function buildDemo (opts: DemoOptions = {}): Promise<FastifyInstance> {
  const env = opts.env ?? process.env
  const app = Fastify({ logger: opts.logger ?? true })
  const sessions = sessionsFromEnv(env)
  app.addHook('onClose', sessions.close)
  await app.register(mcp, {
    path: '/mcp',
    serverInfo: { name: 'fastify-mcp-http-demo', version: '1.0.0' },
    sessions: { store: sessions.store, lock: sessions.lock },
    requestStateSecret: env.MCP_STATE_SECRET,
    // The plugin makes its own client from the URL and closes it on app.close().
    redis: env.REDIS_URL
  })

  registerDemoTools(app.mcp)

  if (env.MCP_DEMO_ADMIN === '1') {
    // For the many-instances tests: change this instance's tool list at run time, so that the
    // resulting tools/list_changed can be watched arriving on streams held by other instances.
    app.mcp.tool({
      name: 'demo_add_tool',
      description: 'Registers an echo tool with the given name on this instance.',
      input: Type.Object({ name: Type.String({ pattern: '^[A-Za-z0-9_]{1,64}$' }) })
    }, async ({ name }) => {
      if (!app.mcp.tools.has(name)) app.mcp.tool({ name, description: 'Echoes its text.' }, async (args) => JSON.stringify(args))
      return `added ${name}`
    })
  }

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
