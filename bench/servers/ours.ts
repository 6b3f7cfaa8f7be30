/**
 * fastify-mcp-http with the store and lock the driver asks for (`BENCH_SERVER` JSON: store
 * memory | file | redis | postgres, lock none | default | memory | file | redis | postgres, dir, redisUrl,
 * pgUrl (store and lock then share one pool, so a locked request is 2 round trips), tracing off | api |
 * sdk-off | sdk-noop: telemetry off, on with no SDK registered, off and on with an SDK registered
 * whose span processor does nothing). Tools: `echo` (the
 * tool every server has), `progress` (`steps` progress notifications, then the result: the SSE
 * scenario) and `counter_add` (read-modify-write of a session counter around `delayMs` of work:
 * the parallel-calls scenario), and `basket_create` / `basket_add` / `basket_count` on a state
 * handle (the handles scenario).
 */
import { readdir, utimes } from 'node:fs/promises'
import { join } from 'node:path'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import { Type } from '@sinclair/typebox'
import mcp, {
  FileSessionLock, FileSessionStore, MemorySessionLock, createLockClient, MemorySessionStore, RedisSessionLock, RedisSessionStore,
  PgSessionLock, PgSessionStore, createPgPool, type PgPoolLike,
  type SessionLock, type SessionStore
} from '../../lib/index.js'
import { config, serve } from './child.js'

interface OursConfig {
  store?: 'memory' | 'file' | 'redis' | 'postgres'
  lock?: 'none' | 'default' | 'memory' | 'file' | 'redis' | 'postgres'
  dir?: string
  redisUrl?: string
  pgUrl?: string
  /** Session idle TTL (ms). */
  ttl?: number
  /** The Redis lock client's command timeout (ms), instead of the fail-fast 500 (valgrind runs). */
  commandTimeout?: number
  /** MemorySessionStore `max`. */
  max?: number
  /** The plugin's `maxStreamsPerSession` (its default when absent). */
  maxStreamsPerSession?: number
  /** Telemetry: off, on without an SDK (default), on with an SDK and a no-op span processor. */
  tracing?: 'off' | 'api' | 'sdk-off' | 'sdk-noop'
}

const cfg = config<OursConfig>()
const dir = cfg.dir ?? '.bench-sessions'
const ttl = cfg.ttl ?? 3_600_000
const redisUrl = cfg.redisUrl ?? 'redis://127.0.0.1:6379'

let redis: Redis | undefined
let pool: PgPoolLike | undefined
const pgPool = (): PgPoolLike => (pool ??= createPgPool(cfg.pgUrl ?? 'postgres://postgres@127.0.0.1:5432/postgres', { max: 20 }))
let store: SessionStore
switch (cfg.store ?? 'memory') {
  case 'memory': store = new MemorySessionStore({ ttl, max: cfg.max }); break
  case 'file': store = new FileSessionStore({ dir, ttl }); break
  case 'redis':
    redis = new Redis(redisUrl)
    store = new RedisSessionStore({ redis, ttl })
    break
  case 'postgres': store = new PgSessionStore({ pool: pgPool(), ttl }); break
  default: throw new Error(`unknown store ${String(cfg.store)}`)
}
// 'none': no lock (`lock: false`; the plugin's default is the lock matching the store, 'default').
let lock: SessionLock | false | undefined
switch (cfg.lock ?? 'none') {
  case 'none': lock = false; break
  case 'default': break
  case 'memory': lock = new MemorySessionLock({}); break
  case 'file': lock = new FileSessionLock({ dir }); break
  case 'redis': {
    // Under valgrind (bench/instructions.ts) everything runs ~50× slower: the lock's own client
    // then gets a longer command timeout than the fail-fast 500 ms, or requests would fail.
    const client = cfg.commandTimeout === undefined ? undefined : createLockClient(redisUrl)
    if (client !== undefined) (client.options as { commandTimeout?: number }).commandTimeout = cfg.commandTimeout
    const l = new RedisSessionLock({ redis: client ?? redisUrl })
    await l.ready()
    lock = l
    break
  }
  case 'postgres': {
    const l = new PgSessionLock({ pool: pgPool() })
    await l.ready()
    lock = l
    break
  }
  default: throw new Error(`unknown lock ${String(cfg.lock)}`)
}

if (cfg.tracing === 'sdk-noop' || cfg.tracing === 'sdk-off') {
  // What an app with an SDK pays before its exporter: spans sampled and recorded (AlwaysOn), the
  // async-hooks context manager, a meter provider (no reader), then a processor that drops them.
  const { context, metrics, trace } = await import('@opentelemetry/api')
  const { AsyncLocalStorageContextManager } = await import('@opentelemetry/context-async-hooks')
  const { BasicTracerProvider, NoopSpanProcessor } = await import('@opentelemetry/sdk-trace-base')
  const { MeterProvider } = await import('@opentelemetry/sdk-metrics')
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new NoopSpanProcessor()] }))
  metrics.setGlobalMeterProvider(new MeterProvider())
  // Node 20's AsyncLocalStorage installs its async hook on its first run(), not when the context
  // manager is enabled: an app whose HTTP instrumentation enters a context per request pays for it
  // in any case. Enter one now, so that telemetry off and on compare under the same SDK.
  context.with(context.active(), () => {})
}

const app = Fastify({ logger: false })
await app.register(mcp, {
  serverInfo: { name: 'bench', version: '1.0.0' },
  sessions: { store, lock },
  requestState: { secret: 'bench-request-state-secret-0123456789' },
  maxStreamsPerSession: cfg.maxStreamsPerSession,
  telemetry: cfg.tracing !== 'off' && cfg.tracing !== 'sdk-off'
})
app.addHook('onClose', async () => {
  if (lock !== false) await lock?.close?.()
  await store.close?.()
  await redis?.quit().catch(() => redis?.disconnect())
  await pool?.end()
})

app.mcp.tool({
  name: 'echo',
  description: 'Echoes its text.',
  input: Type.Object({ text: Type.String() })
}, async ({ text }) => ({ content: [{ type: 'text', text }] }))

app.mcp.tool({
  name: 'progress',
  description: 'Reports `steps` progress notifications, then answers.',
  input: Type.Object({ steps: Type.Integer({ minimum: 1, maximum: 1000 }) })
}, async ({ steps }, ctx) => {
  for (let i = 1; i <= steps; i++) await ctx.progress({ progress: i, total: steps })
  return { content: [{ type: 'text', text: `counted to ${steps}` }] }
})

const sleep = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))

app.mcp.tool({
  name: 'counter_add',
  description: 'Adds 1 to the session counter after `delayMs` of work; returns the new value.',
  input: Type.Object({ delayMs: Type.Integer({ minimum: 0 }) })
}, async ({ delayMs }, ctx) => {
  const before = ctx.session?.get<number>('counter') ?? 0
  if (delayMs > 0) await sleep(delayMs)
  ctx.session?.set('counter', before + 1)
  return { content: [{ type: 'text', text: String(before + 1) }] }
})

app.mcp.tool({
  name: 'counter_get',
  description: 'Returns the session counter.'
}, async (_args, ctx) => ({ content: [{ type: 'text', text: String(ctx.session?.get<number>('counter') ?? 0) }] }))

// Record size (bench/capacity.ts): `blob_fill` gives the session `keys` keys of `bytes` characters
// each; `blob_touch` then changes one small key, so a save writes that key only.
app.mcp.tool({
  name: 'blob_fill',
  description: 'Sets `keys` session keys of `bytes` characters each.',
  input: Type.Object({ keys: Type.Integer({ minimum: 1, maximum: 1000 }), bytes: Type.Integer({ minimum: 0, maximum: 1_048_576 }) })
}, async ({ keys, bytes }, ctx) => {
  for (let i = 0; i < keys; i++) ctx.session?.set(`b${i}`, 'x'.repeat(bytes))
  return { content: [{ type: 'text', text: 'filled' }] }
})

app.mcp.tool({
  name: 'blob_touch',
  description: 'Adds 1 to the session key `touch`.'
}, async (_args, ctx) => {
  ctx.session?.set('touch', (ctx.session?.get<number>('touch') ?? 0) + 1)
  return { content: [{ type: 'text', text: 'touched' }] }
})

// State handles (issue 13's bench block): a basket holds a count, so its state stays the same size
// over a run of thousands of calls; `basket_count` lets the driver check no update was lost.
app.mcp.handleKind('basket', { ttl })
const basket = Type.String()

app.mcp.tool({
  name: 'basket_create',
  description: 'Creates an empty basket; returns its handle.'
}, async (_args, ctx) => {
  const id = await ctx.handles.create('basket', { count: 0 })
  return { content: [{ type: 'text', text: id }], structuredContent: { basket: id } }
})

app.mcp.tool({
  name: 'basket_add',
  description: 'Adds an item to the basket (read, add one, write back).',
  input: Type.Object({ basket, item: Type.String() }),
  handle: { argument: 'basket', kind: 'basket' }
}, async (_args, ctx) => {
  const count = (ctx.handle?.get<number>('count') ?? 0) + 1
  ctx.handle?.set('count', count)
  return { content: [{ type: 'text', text: 'added' }], structuredContent: { count } }
})

app.mcp.tool({
  name: 'basket_count',
  description: 'Returns how many items the basket holds.',
  input: Type.Object({ basket }),
  handle: { argument: 'basket', kind: 'basket' }
}, async (_args, ctx) => ({ content: [{ type: 'text', text: 'count' }], structuredContent: { count: ctx.handle?.get<number>('count') ?? 0 } }))

await serve(app, {
  /** Times `store.gc()`. */
  'store-gc': async () => {
    const t0 = performance.now()
    const removed = await store.gc()
    return { ms: performance.now() - t0, removed: removed.length }
  },
  /** Makes every session file of the file store look idle for longer than the TTL. */
  'age-files': async () => {
    const past = new Date(Date.now() - ttl - 60_000)
    let n = 0
    for (const name of await readdir(dir)) {
      if (!name.endsWith('.json')) continue
      await utimes(join(dir, name), past, past)
      n++
    }
    return n
  },
  sessions: () => store instanceof MemorySessionStore ? store.size : null
})
