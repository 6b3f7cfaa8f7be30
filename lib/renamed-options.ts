/**
 * The register options that were renamed (issue 46, item 6: every duration ends in `Ms`; the
 * options of one subject are grouped under that subject's name), old → new. An old name fails
 * `app.ready()` with `FST_ERR_MCP_INVALID_OPTION` naming the new one, before the unknown-key check
 * would call it misspelt: whoever upgrades is told what to write. The CHANGELOG's "Breaking" lists
 * the same renames.
 */
import { fail } from './option-checks.js'

export interface RenamedOption {
  /** The old option, a dotted path for a nested one (`sessions.cancelGrace`). */
  readonly old: string
  /** What to write instead (`sessions.cancelGraceMs`). */
  readonly now: string
  /** How the new form looks, when the move is more than a name (`redis: { client, prefix }`). */
  readonly shape?: string
  /**
   * Refused only when the old path holds such a value: for a name that lives on in another form
   * (`eventLog` took an `EventLog`; it now takes `{ store, maxEvents?, ttlMs? }`).
   */
  readonly when?: (value: unknown) => boolean
}

/** An `EventLog` itself (what `eventLog` took before it took an object of options). */
function isEventLog (value: unknown): boolean {
  return typeof value === 'object' && value !== null && typeof (value as { append?: unknown }).append === 'function'
}

/** Every renamed register option, old → new. */
export const RENAMED_OPTIONS: readonly RenamedOption[] = Object.freeze([
  { old: 'drainTimeout', now: 'drainTimeoutMs' },
  { old: 'clientRequestTimeout', now: 'clientRequestTimeoutMs' },
  { old: 'keepAliveInterval', now: 'keepAliveIntervalMs' },
  { old: 'retryInterval', now: 'retryIntervalMs' },
  { old: 'sessions.cancelGrace', now: 'sessions.cancelGraceMs' },
  { old: 'sessions.unusedTtl', now: 'sessions.unusedTtlMs' },
  { old: 'tasks.ttl', now: 'tasks.ttlMs' },
  { old: 'tasks.pollInterval', now: 'tasks.pollIntervalMs' },
  { old: 'requestStateSecret', now: 'requestState.secret', shape: 'requestState: { secret, ttlMs }' },
  { old: 'requestStateTtl', now: 'requestState.ttlMs', shape: 'requestState: { secret, ttlMs }' },
  { old: 'maxListenStreams', now: 'listen.max', shape: 'listen: { max, maxPerClient }' },
  { old: 'maxListenStreamsPerClient', now: 'listen.maxPerClient', shape: 'listen: { max, maxPerClient }' },
  { old: 'redisPrefix', now: 'redis.prefix', shape: 'redis: { client, prefix }' },
  { old: 'postgresPrefix', now: 'postgres.prefix', shape: 'postgres: { pool, prefix }' },
  { old: 'eventLogOptions', now: 'eventLog', shape: 'eventLog: { maxEvents, ttlMs }; its ttl is ttlMs' },
  { old: 'eventLog', now: 'eventLog.store', shape: 'eventLog: { store, maxEvents, ttlMs }', when: isEventLog },
  { old: 'authenticate', now: 'auth.authenticate', shape: 'auth: { authenticate, required, wwwAuthenticate }' },
  { old: 'requireAuth', now: 'auth.required', shape: 'auth: { authenticate, required } or auth: { resource, …, required }' },
  { old: 'wwwAuthenticate', now: 'auth.wwwAuthenticate', shape: 'auth: { authenticate, required, wwwAuthenticate }' },
  { old: 'auth.jwt.clockToleranceSec', now: 'auth.jwt.clockToleranceMs', shape: 'in milliseconds: 30 s is 30000' }
])

/** Whether `opts` holds the dotted `path` (its last key present, whatever its value), and what. */
function lookUp (opts: Record<string, unknown>, path: string): { found: boolean, value?: unknown } {
  let at: unknown = opts
  const keys = path.split('.')
  for (const [i, key] of keys.entries()) {
    if (typeof at !== 'object' || at === null || !Object.hasOwn(at, key)) return { found: false }
    at = (at as Record<string, unknown>)[key]
    if (i === keys.length - 1) return { found: true, value: at }
  }
  return { found: false }
}

/** `use <now>`, with the new form's shape when it says more. */
function instead (r: RenamedOption): string {
  return `use ${r.now}${r.shape === undefined ? '' : ` (${r.shape})`}`
}

/**
 * Fails with `FST_ERR_MCP_INVALID_OPTION` when `opts` holds an option by its old name, naming
 * every one found and what to write instead.
 */
export function refuseRenamed (opts: Record<string, unknown>): void {
  const found = RENAMED_OPTIONS.filter(r => {
    const { found, value } = lookUp(opts, r.old)
    return found && (r.when === undefined || r.when(value))
  })
  if (found.length === 0) return
  const changelog = '(CHANGELOG "Breaking")'
  if (found.length === 1) fail(found[0]!.old, `was renamed: ${instead(found[0]!)} ${changelog}`)
  fail(found.map(r => r.old).join('", "'), `were renamed: ${found.map(r => `${r.old}: ${instead(r)}`).join('; ')} ${changelog}`)
}
