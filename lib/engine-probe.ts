/**
 * The shared engine (the `redis` or `postgres` option) as a start-up line names it, and the probe
 * the plugin runs once at `app.ready()`: an engine that does not answer then is logged once,
 * naming the backend and the host ("PostgreSQL at db:5432 not reachable at start-up"), instead of
 * surfacing later as a failed subscription or a run of 503s. The app starts either way (requests
 * that need the engine get 503 until it answers).
 */
import type { PgPoolLike } from './postgres/pool.js'
import type { RedisClientLike } from './redis/scripts.js'
import { isSentinelConnection } from './redis/sentinel.js'
import { settleWithin } from './util/settle.js'
import { urlHost } from './util/url-shape.js'

/** The engine a start-up line names, and its probe. */
export interface EngineProbe {
  backend: 'Redis' | 'PostgreSQL'
  /** Host and port (never a user or a password); `unknown host` when it cannot be told. */
  host: string
  /** Resolves once the engine answers; rejects after `timeoutMs` or with its error. */
  probe: (timeoutMs: number) => Promise<void>
}

const UNKNOWN = 'unknown host'

/** `host:port` of an ioredis client's options (a Cluster: its first start-up node). */
function redisHost (client: RedisClientLike): string {
  const o = client.options as { host?: unknown, port?: unknown }
  const nodes = (client as { startupNodes?: Array<{ host?: unknown, port?: unknown } | string> }).startupNodes
  const first = Array.isArray(nodes) ? nodes[0] : undefined
  const at = typeof first === 'object' ? first : o
  return typeof at.host === 'string' ? `${at.host}${at.port === undefined ? '' : `:${String(at.port)}`}` : UNKNOWN
}

/** The probe of the plugin's Redis client: connected within the time (a fail-fast client refuses commands until then). */
export function redisProbe (given: unknown, client: RedisClientLike): EngineProbe {
  let host: string
  if (typeof given === 'string') host = urlHost(given) ?? UNKNOWN
  else if (isSentinelConnection(given)) host = `sentinels ${given.sentinels.map(s => `${String(s.host)}:${String(s.port)}`).join(',')} (${given.name})`
  else host = redisHost(client)
  return {
    backend: 'Redis',
    host,
    probe: async (timeoutMs) => {
      // Connected, or lazy (`lazyConnect`: the app connects it when it wants to).
      if (client.status === 'ready' || client.status === 'wait') return
      await new Promise<void>((resolve, reject) => {
        let last: unknown
        const timer = setTimeout(() => { done(); reject(last ?? new Error(`no connection within ${timeoutMs} ms`)) }, timeoutMs)
        const onReady = (): void => { done(); resolve() }
        const onError = (err: unknown): void => { last = err }
        const done = (): void => { clearTimeout(timer); client.off('ready', onReady); client.off('error', onError) }
        client.on('ready', onReady)
        client.on('error', onError)
      })
    }
  }
}

/** The probe of the pool: one `SELECT 1` within the time. */
export function postgresProbe (given: unknown, pool: PgPoolLike): EngineProbe {
  const options = (pool as { options?: { host?: unknown, port?: unknown, connectionString?: unknown } }).options
  let host = typeof given === 'string' ? urlHost(given) : undefined
  if (host === undefined && typeof options?.connectionString === 'string') host = urlHost(options.connectionString)
  if (host === undefined && typeof options?.host === 'string') host = `${options.host}${options.port === undefined ? '' : `:${String(options.port)}`}`
  return {
    backend: 'PostgreSQL',
    host: host ?? UNKNOWN,
    probe: async (timeoutMs) => {
      let failure: unknown
      const query = pool.query('SELECT 1').then(() => {}, (err: unknown) => { failure = err })
      if (!await settleWithin(query, timeoutMs)) throw new Error(`no answer within ${timeoutMs} ms`)
      if (failure !== undefined) throw failure
    }
  }
}
