/**
 * The demo server: `npm start` → http://127.0.0.1:3000/mcp (env PORT, HOST), sessions in memory.
 * `npm start` is `node --import tsx examples/server.ts`; run that command yourself where SIGTERM
 * must reach the server (npm does not pass on a SIGTERM sent to npm; a terminal's Ctrl-C works).
 *
 * Tools: basket_create, basket_add, basket_get, basket_end (a basket on a state handle, both wires),
 * counter_add, counter_get (a per-session counter, handshake-era clients), ask_name (elicitation on
 * both wires), slow_count (progress and cancellation), long_job (a task for 2026-07-28 clients that
 * take tasks).
 *
 * Switches (env): MCP_STORE = memory | file | redis | postgres; MCP_LOCK = none | memory | file |
 * redis | postgres (unset: the plugin's default, the lock matching the store; none: no lock at all,
 * `lock: false`); MCP_SESSION_DIR (file store/lock, default ./.mcp-sessions); REDIS_URL (default
 * redis://127.0.0.1:6379); DATABASE_URL (PostgreSQL, default postgres://postgres@127.0.0.1:5432/postgres);
 * MCP_LOCK_TIMEOUT_MS (acquire timeout); MCP_LOCK_TTL_MS (Redis or PostgreSQL lease TTL);
 * MCP_STATE_SECRET (seals 2026-07-28 requestState; the same on every instance); MCP_DEMO_TOKENS
 * (`token:principal,…`: bearer tokens and the principal each stands for; requests without a known
 * token then get 401, and baskets and tasks belong to their principal); MCP_TASK_TTL_MS (how long a
 * finished task stays readable; it also sets the suggested poll interval to 200 ms); MCP_DRAIN_TIMEOUT_MS
 * (how long SIGTERM lets running requests finish, default 10,000); MCP_REQUIRE_SESSION_ID=1 (a
 * handshake-era request without Mcp-Session-Id gets 400 instead of being served without a session). With REDIS_URL set,
 * the bus and the event log are in Redis too, so instances behind a load balancer need no sticky
 * sessions; with MCP_STORE=postgres they are in PostgreSQL (the `postgres` option), and so are the
 * tool limits. Redis behind Sentinel: MCP_REDIS_SENTINELS (`host:port,host:port,…`) and
 * MCP_REDIS_MASTER (the master name, default `mymaster`) instead of REDIS_URL; every client then
 * follows the primary the sentinels promote. MCP_REDIS_WAIT_REPLICAS (default 0) and
 * MCP_REDIS_WAIT_TIMEOUT_MS (default 200): replicas that must acknowledge each write of the store
 * and the lock before it is reported as kept (docs/failover.md). MCP_DEMO_ADMIN=1 adds
 * `demo_add_tool` (adds a tool to this instance at run time: a tools/list_changed to watch).
 * Every variable: docs/lock-internals.md#the-demo.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify'
import mcp, {
  createPgPool, createRedisClient, parseSentinels, FileSessionLock, FileSessionStore, MemorySessionLock, MemorySessionStore, PgSessionLock, PgSessionStore,
  RedisSessionLock, RedisSessionStore,
  type AuthenticateOptions, type McpPrincipal, type PgPoolLike, type RedisClientLike, type RedisSentinelConnection, type ReplicaAckOptions, type SessionLock, type SessionStore
} from '../lib/index.js'
import { registerDemoTools } from './demo-tools.js'

export { registerDemoTools }

export interface DemoOptions {
  logger?: boolean
  env?: Record<string, string | undefined>
}

/**
 * Where Redis is: the sentinels of MCP_REDIS_SENTINELS (and MCP_REDIS_MASTER), else REDIS_URL;
 * `undefined` when neither is set.
 */
export function redisFromEnv (env: Record<string, string | undefined>): string | RedisSentinelConnection | undefined {
  const sentinels = env.MCP_REDIS_SENTINELS
  if (sentinels !== undefined && sentinels.trim() !== '') return { sentinels: parseSentinels(sentinels), name: env.MCP_REDIS_MASTER ?? 'mymaster' }
  return env.REDIS_URL
}

/**
 * MCP_REDIS_WAIT_REPLICAS (default 0: off) and MCP_REDIS_WAIT_TIMEOUT_MS. The timeout alone leaves
 * acknowledgement off, as documented, rather than failing the start (the options refuse a
 * `waitTimeoutMs` without `waitReplicas`).
 */
function replicaAckFromEnv (env: Record<string, string | undefined>): ReplicaAckOptions {
  const waitReplicas = Number(env.MCP_REDIS_WAIT_REPLICAS ?? 0)
  if (waitReplicas === 0) return {}
  return {
    waitReplicas,
    waitTimeoutMs: env.MCP_REDIS_WAIT_TIMEOUT_MS === undefined ? undefined : Number(env.MCP_REDIS_WAIT_TIMEOUT_MS)
  }
}

/**
 * Builds the store and lock the env asks for; `close` closes the connections it opened. Every Redis
 * client fails fast and has an error listener: the store's (below) logs through `log`, the lock's
 * and the plugin's (made from the URL) have their own.
 */
function sessionsFromEnv (env: Record<string, string | undefined>, log: FastifyBaseLogger):
{ store: SessionStore, lock?: SessionLock | false, postgres?: PgPoolLike, close: () => Promise<void> } {
  const storeKind = env.MCP_STORE ?? 'memory'
  const lockKind = env.MCP_LOCK
  const dir = env.MCP_SESSION_DIR ?? '.mcp-sessions'
  const redisUrl = redisFromEnv(env) ?? 'redis://127.0.0.1:6379'
  const ack = replicaAckFromEnv(env)
  const timeout = env.MCP_LOCK_TIMEOUT_MS === undefined ? undefined : Number(env.MCP_LOCK_TIMEOUT_MS)
  const ttl = env.MCP_LOCK_TTL_MS === undefined ? undefined : Number(env.MCP_LOCK_TTL_MS)
  const clients: RedisClientLike[] = []
  // One pool for the store, the lock and the plugin's bus, event log and limits (a pool with
  // bounded waits: a database that is down answers 503 within seconds).
  let pool: PgPoolLike | undefined
  const pgPool = (): PgPoolLike => (pool ??= createPgPool(env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'))
  let store: SessionStore
  switch (storeKind) {
    case 'memory': store = new MemorySessionStore(); break
    case 'file': store = new FileSessionStore({ dir }); break
    case 'redis': {
      // Fail fast while Redis is down (503 at once) instead of queueing commands for minutes, and
      // log connection errors once per outage instead of ioredis printing each retry on stderr.
      const redis = createRedisClient(redisUrl, { log, ...ack })
      clients.push(redis)
      store = new RedisSessionStore({ redis })
      break
    }
    case 'postgres': store = new PgSessionStore({ pool: pgPool() }); break
    default: throw new Error(`MCP_STORE must be memory, file, redis or postgres (got ${storeKind})`)
  }
  let lock: SessionLock | false | undefined
  switch (lockKind) {
    case undefined: break
    case 'none': lock = false; break
    case 'memory': lock = new MemorySessionLock({ timeout }); break
    case 'file': lock = new FileSessionLock({ dir, timeout }); break
    // The lock makes its own fail-fast client from the URL (and closes it).
    case 'redis': lock = new RedisSessionLock({ redis: redisUrl, timeout, ttl, ...ack }); break
    // On the store's pool: the store then takes the lease and reads in one call.
    case 'postgres': lock = new PgSessionLock({ pool: pgPool(), timeout, ttl }); break
    default: throw new Error(`MCP_LOCK must be none, memory, file, redis or postgres (got ${lockKind})`)
  }
  return {
    store,
    lock,
    postgres: storeKind === 'postgres' ? pool : undefined,
    close: async () => {
      if (lock !== false) await lock?.close?.()
      await store.close?.()
      await Promise.all(clients.map(c => c.quit().catch(() => c.disconnect())))
      await pool?.end()
    }
  }
}

/**
 * The `auth` option from `MCP_DEMO_TOKENS` (`token:principal,…`), or `undefined` when it is unset.
 * A demo's bearer tokens, compared as they are: a real app verifies signed tokens (JWT) instead.
 */
export function tokensAuth (spec: string | undefined): AuthenticateOptions | undefined {
  if (spec === undefined || spec.trim() === '') return undefined
  const principals = new Map<string, string>()
  for (const pair of spec.split(',')) {
    const at = pair.indexOf(':')
    if (at <= 0 || at === pair.length - 1) throw new Error(`MCP_DEMO_TOKENS: expected token:principal, got ${JSON.stringify(pair)}`)
    principals.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim())
  }
  const authenticate = (request: FastifyRequest): McpPrincipal | null => {
    const header = request.headers.authorization
    const token = header?.startsWith('Bearer ') === true ? header.slice(7).trim() : undefined
    const id = token === undefined ? undefined : principals.get(token)
    return id === undefined ? null : { id }
  }
  return { authenticate }
}

export async function buildDemo (opts: DemoOptions = {}): Promise<FastifyInstance> {
  const env = opts.env ?? process.env
  // Requests arriving while the app closes reach the plugin, which answers them with a 503 that
  // carries Retry-After and a JSON-RPC error (Fastify's own 503 has neither).
  const app = Fastify({ logger: opts.logger ?? true, return503OnClosing: false })
  const sessions = sessionsFromEnv(env, app.log)
  app.addHook('onClose', sessions.close)
  await app.register(mcp, {
    path: '/mcp',
    serverInfo: { name: 'fastify-mcp-http-demo', version: '1.0.0' },
    sessions: { store: sessions.store, lock: sessions.lock, requireSessionId: env.MCP_REQUIRE_SESSION_ID === '1' },
    postgres: sessions.postgres,
    requestState: { secret: env.MCP_STATE_SECRET },
    auth: tokensAuth(env.MCP_DEMO_TOKENS),
    // The plugin makes its own client from the URL and closes it on app.close().
    redis: sessions.postgres === undefined ? redisFromEnv(env) : undefined,
    drainTimeoutMs: env.MCP_DRAIN_TIMEOUT_MS === undefined ? undefined : Number(env.MCP_DRAIN_TIMEOUT_MS),
    tasks: env.MCP_TASK_TTL_MS === undefined ? undefined : { ttlMs: Number(env.MCP_TASK_TTL_MS), pollIntervalMs: 200 }
  })

  registerDemoTools(app.mcp, { admin: env.MCP_DEMO_ADMIN === '1' })

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
