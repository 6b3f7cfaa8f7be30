/**
 * The option checks that need nothing of the plugin's own types: numbers within bounds, origins and
 * hosts, the request-state secret, cache hints, tasks, the status route. Each fails with
 * `FST_ERR_MCP_INVALID_OPTION` naming the option (`options.ts` assembles them).
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { FST_ERR_MCP_INVALID_OPTION } from './errors.js'
import type { CacheOptions } from './features/cache-hints.js'
import type { ResolvedIdempotency } from './state/idempotency.js'
import { postgresUrlProblem, redisUrlProblem } from './util/url-shape.js'

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]', '::1'])

/** Host name of a `Host` header value or an origin, without port; lowercased. */
export function hostName (value: string): string {
  const v = value.trim().toLowerCase()
  if (v.startsWith('[')) return v.slice(0, v.indexOf(']') + 1)
  const colon = v.indexOf(':')
  return colon === -1 ? v : v.slice(0, colon)
}

function isLoopbackOrigin (origin: string): boolean {
  try {
    const u = new URL(origin)
    return (u.protocol === 'http:' || u.protocol === 'https:') && LOOPBACK_HOSTS.has(u.hostname)
  } catch {
    return false
  }
}

export function fail (name: string, why: string): never {
  throw new FST_ERR_MCP_INVALID_OPTION(name, why)
}

export function nonNegativeInt (opts: Record<string, unknown>, name: string, def: number, min = 0, label = name): number {
  const v = opts[name]
  if (v === undefined) return def
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) fail(label, `must be an integer ≥ ${min}, got ${JSON.stringify(v)}`)
  return v
}

/** An integer option within [min, max]. */
export function boundedInt (opts: Record<string, unknown>, name: string, def: number, min: number, max: number, label: string): number {
  const v = nonNegativeInt(opts, name, def, min, label)
  if (v > max) fail(label, `must be at most ${max}, got ${v}`)
  return v
}

/**
 * Fails on a key of the nested option `label` that is not in `known` (a misspelt key would
 * otherwise be ignored in silence, its default taken), naming it as `label.key`.
 */
export function checkNestedKeys (o: object, known: readonly string[], label: string): void {
  for (const k of Object.keys(o)) if (!known.includes(k)) fail(`${label}.${k.slice(0, 64)}`, `unknown option (misspelt?); known: ${known.join(', ')}`)
}

/**
 * An option that is an object of optional keys (`{}` when absent), its keys checked: fails for a
 * value that is not an object (`why`, default: the keys it takes) or for an unknown key.
 */
export function optionObject (value: unknown, name: string, keys: readonly string[], why = `must be { ${keys.map(k => `${k}?`).join(', ')} }`): Record<string, unknown> {
  if (value !== undefined && (typeof value !== 'object' || value === null)) fail(name, why)
  const o = (value ?? {}) as Record<string, unknown>
  checkNestedKeys(o, keys, name)
  return o
}

export function checkTasks (t: unknown): { ttlMs: number, pollIntervalMs: number, maxPerPrincipal: number } {
  const o = optionObject(t, 'tasks', ['ttlMs', 'pollIntervalMs', 'maxPerPrincipal'], 'must be an object')
  return Object.freeze({
    ttlMs: boundedInt(o, 'ttlMs', 3_600_000, 1000, 86_400_000, 'tasks.ttlMs'),
    pollIntervalMs: boundedInt(o, 'pollIntervalMs', 1000, 100, 60_000, 'tasks.pollIntervalMs'),
    maxPerPrincipal: nonNegativeInt(o, 'maxPerPrincipal', 100, 1, 'tasks.maxPerPrincipal')
  })
}

/** Secrets a `requestState.secret` list may hold: each is tried on a state that fails the first. */
const MAX_SECRETS = 3

/** `requestState.secret`: one secret, or a list whose first seals and every one opens (a rotation). */
function checkSecret (secret: unknown): string | readonly string[] | undefined {
  if (secret === undefined) return undefined
  const why = `must be a string of at least 16 characters, or a list of 1 to ${MAX_SECRETS} of them (the first seals)`
  if (Array.isArray(secret)) {
    if (secret.length < 1 || secret.length > MAX_SECRETS || !secret.every(s => typeof s === 'string' && s.length >= 16)) fail('requestState.secret', why)
    return Object.freeze([...secret as string[]])
  }
  if (typeof secret !== 'string' || secret.length < 16) fail('requestState.secret', why)
  return secret
}

/** `requestState`: its secret (`undefined`: a random one per process) and how long a sealed state is valid. */
export function checkRequestState (r: unknown): { secret: string | readonly string[] | undefined, ttlMs: number } {
  const o = optionObject(r, 'requestState', ['secret', 'ttlMs'])
  return Object.freeze({ secret: checkSecret(o.secret), ttlMs: nonNegativeInt(o, 'ttlMs', 600_000, 1, 'requestState.ttlMs') })
}

/** `listen`: open `subscriptions/listen` streams per process and per client. */
export function checkListen (l: unknown): { max: number, maxPerClient: number } {
  const o = optionObject(l, 'listen', ['max', 'maxPerClient'])
  return Object.freeze({ max: nonNegativeInt(o, 'max', 1000, 1, 'listen.max'), maxPerClient: nonNegativeInt(o, 'maxPerClient', 10, 1, 'listen.maxPerClient') })
}

export function checkCache (cache: unknown): CacheOptions {
  if (cache === undefined) return {}
  if (typeof cache !== 'object' || cache === null) fail('cache', 'must be an object')
  for (const [k, v] of Object.entries(cache)) {
    if (!['discover', 'tools', 'resources', 'templates', 'prompts', 'read'].includes(k)) fail(`cache.${k}`, 'is not a cacheable result')
    const h = v as Record<string, unknown>
    if (typeof h !== 'object' || h === null) fail(`cache.${k}`, 'must be { ttlMs?, cacheScope? }')
    if (h.ttlMs !== undefined && (typeof h.ttlMs !== 'number' || !Number.isInteger(h.ttlMs) || h.ttlMs < 0)) fail(`cache.${k}.ttlMs`, 'must be an integer ≥ 0')
    if (h.cacheScope !== undefined && h.cacheScope !== 'public' && h.cacheScope !== 'private') fail(`cache.${k}.cacheScope`, 'must be "public" or "private"')
  }
  return cache as CacheOptions
}

export function checkOrigins (allowed: string[] | ((origin: string) => boolean) | undefined): (origin: string) => boolean {
  if (allowed === undefined) return isLoopbackOrigin
  if (typeof allowed === 'function') return allowed
  if (!Array.isArray(allowed) || !allowed.every(x => typeof x === 'string')) fail('allowedOrigins', 'must be an array of origins or a function')
  const set = new Set(allowed.map(x => x.toLowerCase().replace(/\/$/, '')))
  return (origin) => set.has('*') || set.has(origin.toLowerCase())
}

export function checkHosts (allowed: string[] | undefined): (host: string) => boolean {
  if (allowed === undefined) return rememberLastPass((h) => LOOPBACK_HOSTS.has(hostName(h)))
  if (!Array.isArray(allowed) || !allowed.every(x => typeof x === 'string')) fail('allowedHosts', 'must be an array of host names')
  const set = new Set(allowed.map(x => hostName(x)))
  return rememberLastPass((h) => set.has(hostName(h)) || LOOPBACK_HOSTS.has(hostName(h)))
}

/**
 * A client sends the same Host on every request, and a host check (trim, lower case, port cut
 * off, set lookups) is a pure function of it: the last value that passed passes again without the
 * work. One string per check, so per plugin instance; a refused value is never remembered.
 */
function rememberLastPass (check: (host: string) => boolean): (host: string) => boolean {
  let passed: string | undefined
  return (host) => {
    if (host === passed) return true
    if (!check(host)) return false
    passed = host
    return true
  }
}

export function checkStatusRoute (route: unknown, name = 'statusRoute'): string | null {
  if (route === undefined || route === false) return null
  if (typeof route !== 'string' || !route.startsWith('/')) fail(name, 'must be false or a path starting with "/"')
  return route
}

/** The keys of `register(mcp, opts)` (Fastify's own register options included: they reach the plugin too). */
const KNOWN_OPTIONS = new Set([
  'path', 'prefix', 'serverInfo', 'instructions', 'sessions', 'allowedOrigins', 'allowedHosts', 'auth', 'bodyLimit', 'clientRequestTimeoutMs',
  'keepAliveIntervalMs', 'retryIntervalMs', 'drainTimeoutMs', 'pageSize', 'maxPendingClientRequests', 'maxBatchSize', 'maxStreamsPerSession',
  'requestState', 'cache', 'idempotency', 'listen', 'redis', 'bus', 'eventLog', 'limits', 'tasks', 'telemetry', 'statusRoute', 'readinessRoute',
  'logLevel', 'logSerializers', 'postgres'
])
const KNOWN_SESSION_OPTIONS = new Set(['store', 'lock', 'gcProbability', 'gcDivisor', 'requireSessionId', 'unusedTtlMs', 'cancelGraceMs'])

/**
 * Fails on a key the plugin does not know (a misspelt option would otherwise be ignored in
 * silence, its default taken): all of them are named.
 */
export function checkKnownKeys (opts: Record<string, unknown>): void {
  const unknown = Object.keys(opts).filter(k => !KNOWN_OPTIONS.has(k))
  const s = opts.sessions
  if (typeof s === 'object' && s !== null) unknown.push(...Object.keys(s).filter(k => !KNOWN_SESSION_OPTIONS.has(k)).map(k => `sessions.${k}`))
  if (unknown.length > 0) fail(unknown.map(k => k.slice(0, 64)).join('", "'), `unknown option${unknown.length === 1 ? '' : 's'} (misspelt?)`)
}

/** A `redis` URL: `redis://` or `rediss://` with a host (`util/url-shape.ts`). */
export function checkRedisUrl (url: string, name = 'redis'): void {
  const problem = redisUrlProblem(url)
  if (problem !== null) fail(name, problem)
}

/** A `postgres` connection string of the shape pg takes (`util/url-shape.ts`). */
export function checkPostgresUrl (url: string, name = 'postgres'): void {
  const problem = postgresUrlProblem(url)
  if (problem !== null) fail(name, problem)
}

/**
 * The default `serverInfo`: the app's `package.json` (in the working directory) name and version
 * when it has both, else the plugin's own.
 */
export function appIdentity (fallback: { name: string, version: string }): { name: string, version: string } {
  try {
    const pkg = JSON.parse(readFileSync(join(process.cwd(), 'package.json'), 'utf8')) as { name?: unknown, version?: unknown }
    if (typeof pkg.name === 'string' && pkg.name !== '' && typeof pkg.version === 'string' && pkg.version !== '') {
      return { name: pkg.name.slice(0, 214), version: pkg.version.slice(0, 64) }
    }
  } catch {}
  return fallback
}

/** `idempotency`: how keyed calls are recorded (`false`: keys ignored, nothing recorded). */
export function checkIdempotency (v: unknown): ResolvedIdempotency | null {
  if (v === false) return null
  if (v !== undefined && (typeof v !== 'object' || v === null)) fail('idempotency', 'must be an object or false')
  const o = (v ?? {}) as Record<string, unknown>
  checkNestedKeys(o, ['maxPerState', 'maxResultBytes', 'ttlMs', 'dedupe'], 'idempotency')
  return Object.freeze({
    maxPerState: boundedInt(o, 'maxPerState', 16, 1, 1000, 'idempotency.maxPerState'),
    maxResultBytes: boundedInt(o, 'maxResultBytes', 16_384, 0, 1_048_576, 'idempotency.maxResultBytes'),
    ttlMs: boundedInt(o, 'ttlMs', 86_400_000, 1000, 2_592_000_000, 'idempotency.ttlMs'),
    dedupe: checkDedupe(o.dedupe)
  })
}

/** `idempotency.dedupe`: off unless given. */
function checkDedupe (d: unknown): ResolvedIdempotency['dedupe'] {
  if (d === undefined || d === false) return null
  if (typeof d !== 'object' || d === null) fail('idempotency.dedupe', 'must be an object ({ windowMs, tools? }) or false')
  const o = d as Record<string, unknown>
  checkNestedKeys(o, ['windowMs', 'tools'], 'idempotency.dedupe')
  if (o.windowMs === undefined) fail('idempotency.dedupe.windowMs', 'is required')
  const windowMs = boundedInt(o, 'windowMs', 0, 1, 3_600_000, 'idempotency.dedupe.windowMs')
  const tools = o.tools
  if (tools !== undefined && (!Array.isArray(tools) || !tools.every(t => typeof t === 'string'))) fail('idempotency.dedupe.tools', 'must be an array of tool names')
  return Object.freeze({ windowMs, tools: tools === undefined ? null : new Set(tools as string[]) })
}
