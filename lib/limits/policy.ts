/**
 * Tool call limits as configured: the option types, their validation (every problem names the
 * option path, through the caller's `fail`), the per-tool policy (the default, then the tool
 * definition's own limits, then the `limits.tools` entry, field by field) and who a call is
 * counted against (the principal, or the caller's address when anonymous).
 */
import { createHash } from 'node:crypto'
import { isIPv4, isIPv6 } from 'node:net'
import type { LimitBackend, LimitSpec } from './backend.js'

/** A token bucket: `calls` tokens per `perMs`, refilled continuously, holding at most `burst`. */
export interface RateLimit {
  /** Calls allowed per `perMs` in the long run (integer ≥ 1). */
  calls: number
  /** The interval `calls` refers to, in ms (integer ≥ 1). */
  perMs: number
  /** Calls allowed at once after a quiet period (integer ≥ 1; default `calls`). */
  burst?: number
}

/** What happens to a limited call while the backend (Redis) fails. */
export type BackendFailurePolicy = 'open' | 'closed'

/** The limits of one tool (or the default of every tool). */
export interface ToolLimit {
  /** Token bucket per (tool, caller); `null` removes an inherited one. */
  rate?: RateLimit | null
  /** Calls of the tool one caller may have in flight (integer ≥ 1); `null` removes an inherited cap. */
  concurrency?: number | null
  /** Overrides `limits.onBackendError` for this tool. */
  onBackendError?: BackendFailurePolicy
}

/** The `limits` plugin option. */
export interface ToolLimitsOptions {
  /** Limits of every tool that does not say otherwise (default: none). */
  default?: ToolLimit
  /**
   * Per tool name, over `default` and over the tool definition's own `limits`, field by field;
   * `false` exempts the tool.
   */
  tools?: Record<string, ToolLimit | false>
  /**
   * While the backend fails: `'open'` (default) lets limited calls through unchecked, `'closed'`
   * refuses them with 503. Logged once per outage either way.
   */
  onBackendError?: BackendFailurePolicy
  /**
   * How long a concurrency slot is kept for a call whose instance stopped renewing it (crashed,
   * partitioned, frozen), in ms. Renewed every third of it while the call runs. Default 30,000.
   */
  leaseMs?: number
  /** Retry hint of a concurrency refusal and of a refusal while the backend fails, in ms. Default 1,000. */
  busyRetryMs?: number
  /** Anonymous IPv6 callers are counted per network of this prefix length (default 64: one site). */
  ipv6PrefixLength?: number
  /** Where the counters live. Default: Redis when the plugin has `redis`, else this process's memory. */
  backend?: LimitBackend
}

/** A tool's limits with everything resolved (what a check needs). */
export interface ToolPolicy {
  readonly rate: Readonly<Required<RateLimit>> | null
  readonly concurrency: number | null
  readonly onBackendError: BackendFailurePolicy
  /** What the backend is asked to check. */
  readonly spec: LimitSpec
}

/** The validated `limits` option. */
export interface ResolvedToolLimits {
  readonly default: ToolLimit | null
  readonly tools: ReadonlyMap<string, ToolLimit | false>
  readonly onBackendError: BackendFailurePolicy
  readonly leaseMs: number
  readonly busyRetryMs: number
  readonly ipv6PrefixLength: number
  readonly backend: LimitBackend | undefined
}

/** Reports an invalid option: `name` is its path (`limits.tools.search.rate.calls`). */
export type Fail = (name: string, why: string) => never

const typeError: Fail = (name, why) => { throw new TypeError(`${name} ${why}`) }

/** The smallest interval between two tokens the backends count (1 µs). */
const MIN_INTERVAL_US = 1

function isObject (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function int (v: unknown, name: string, min: number, fail: Fail, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    fail(name, `must be an integer ${max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`}, got ${JSON.stringify(v)}`)
  }
  return v
}

function failurePolicy (v: unknown, name: string, fail: Fail): BackendFailurePolicy | undefined {
  if (v === undefined) return undefined
  if (v !== 'open' && v !== 'closed') fail(name, 'must be "open" or "closed"')
  return v
}

/**
 * Validates one tool's limits (an entry of `limits.tools`, `limits.default`, or a tool
 * definition's `limits`); `name` is its path for the messages. Returns a normalized copy.
 */
export function checkToolLimit (value: unknown, name: string, fail: Fail = typeError): ToolLimit {
  if (!isObject(value)) fail(name, 'must be { rate?, concurrency?, onBackendError? }')
  for (const k of Object.keys(value)) {
    if (k !== 'rate' && k !== 'concurrency' && k !== 'onBackendError') fail(`${name}.${k}`, 'is not a limit (rate, concurrency, onBackendError)')
  }
  const out: ToolLimit = {}
  if (value.rate !== undefined) {
    if (value.rate === null) {
      out.rate = null
    } else {
      const r = value.rate
      if (!isObject(r)) fail(`${name}.rate`, 'must be { calls, perMs, burst? } or null')
      const calls = int(r.calls, `${name}.rate.calls`, 1, fail)
      const perMs = int(r.perMs, `${name}.rate.perMs`, 1, fail)
      if (perMs * 1000 / calls < MIN_INTERVAL_US) fail(`${name}.rate`, 'allows more than one call per microsecond')
      const burst = r.burst === undefined ? undefined : int(r.burst, `${name}.rate.burst`, 1, fail, 1_000_000)
      out.rate = burst === undefined ? { calls, perMs } : { calls, perMs, burst }
    }
  }
  if (value.concurrency !== undefined) {
    out.concurrency = value.concurrency === null ? null : int(value.concurrency, `${name}.concurrency`, 1, fail, 1_000_000)
  }
  const policy = failurePolicy(value.onBackendError, `${name}.onBackendError`, fail)
  if (policy !== undefined) out.onBackendError = policy
  return out
}

/**
 * Validates the `limits` option (see {@link ToolLimitsOptions}); `fail` reports a problem with the
 * option's path (the plugin passes the one that throws `FST_ERR_MCP_INVALID_OPTION`).
 */
export function resolveToolLimits (value: unknown, fail: Fail = typeError, name = 'limits'): ResolvedToolLimits {
  if (!isObject(value)) fail(name, 'must be an object')
  const known = ['default', 'tools', 'onBackendError', 'leaseMs', 'busyRetryMs', 'ipv6PrefixLength', 'backend']
  for (const k of Object.keys(value)) if (!known.includes(k)) fail(`${name}.${k}`, `is not an option (${known.join(', ')})`)
  const tools = new Map<string, ToolLimit | false>()
  if (value.tools !== undefined) {
    if (!isObject(value.tools)) fail(`${name}.tools`, 'must be an object of tool name → limits or false')
    for (const [tool, v] of Object.entries(value.tools)) {
      tools.set(tool, v === false ? false : checkToolLimit(v, `${name}.tools.${tool}`, fail))
    }
  }
  const backend = value.backend
  if (backend !== undefined && (!isObject(backend) || typeof backend.acquire !== 'function' ||
    typeof backend.renew !== 'function' || typeof backend.release !== 'function')) {
    fail(`${name}.backend`, 'must implement the LimitBackend contract (acquire, renew, release)')
  }
  return Object.freeze({
    default: value.default === undefined ? null : checkToolLimit(value.default, `${name}.default`, fail),
    tools,
    onBackendError: failurePolicy(value.onBackendError, `${name}.onBackendError`, fail) ?? 'open',
    leaseMs: value.leaseMs === undefined ? 30_000 : int(value.leaseMs, `${name}.leaseMs`, 30, fail, 86_400_000),
    busyRetryMs: value.busyRetryMs === undefined ? 1000 : int(value.busyRetryMs, `${name}.busyRetryMs`, 1, fail, 86_400_000),
    ipv6PrefixLength: value.ipv6PrefixLength === undefined ? 64 : int(value.ipv6PrefixLength, `${name}.ipv6PrefixLength`, 1, fail, 128),
    backend: backend as LimitBackend | undefined
  })
}

/**
 * The policy of one tool: `limits.default`, then the definition's own `limits`, then the
 * `limits.tools` entry, each field by field (`false` at either of the last two exempts the tool).
 * `null` when nothing limits the tool.
 */
export function toolPolicy (limits: ResolvedToolLimits, tool: string, own?: ToolLimit | false): ToolPolicy | null {
  const entry = limits.tools.get(tool)
  if (entry === false || own === false) return null
  const merged: ToolLimit = { ...limits.default, ...own, ...entry }
  const rate = merged.rate ?? null
  const concurrency = merged.concurrency ?? null
  if (rate === null && concurrency === null) return null
  const full = rate === null ? null : Object.freeze({ calls: rate.calls, perMs: rate.perMs, burst: rate.burst ?? rate.calls })
  return Object.freeze({
    rate: full,
    concurrency,
    onBackendError: merged.onBackendError ?? limits.onBackendError,
    spec: Object.freeze({
      intervalUs: full === null ? 0 : Math.max(MIN_INTERVAL_US, Math.round(full.perMs * 1000 / full.calls)),
      burst: full === null ? 0 : full.burst,
      concurrency: concurrency ?? 0,
      leaseMs: limits.leaseMs
    })
  })
}

/** Principal ids longer than this are counted under their SHA-256 (bounded key size). */
const MAX_SUBJECT_ID = 64

/**
 * Who a call is counted against: `p:<principal id>`, or for an anonymous caller `a:<address>`
 * (an IPv4-mapped IPv6 address as IPv4; IPv6 as its network of `ipv6PrefixLength` bits, since
 * one client usually holds a whole /64).
 */
export function limitSubject (principal: { id: string } | null, ip: string, ipv6PrefixLength = 64): string {
  if (principal !== null) {
    const id = principal.id
    return id.length <= MAX_SUBJECT_ID ? `p:${id}` : `p#${createHash('sha256').update(id).digest('base64url')}`
  }
  return `a:${addressKey(ip, ipv6PrefixLength)}`
}

/** The address an anonymous caller is counted under (see {@link limitSubject}). */
export function addressKey (ip: string, ipv6PrefixLength = 64): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)
  if (mapped !== null) return mapped[1] as string
  if (isIPv4(ip)) return ip
  const zone = ip.indexOf('%')
  const bare = zone === -1 ? ip : ip.slice(0, zone)
  if (!isIPv6(bare)) return ip.length <= MAX_SUBJECT_ID ? ip : createHash('sha256').update(ip).digest('base64url')
  const groups = ipv6Groups(bare)
  let value = 0n
  for (const g of groups) value = (value << 16n) | BigInt(g)
  const bits = BigInt(128 - ipv6PrefixLength)
  value = (value >> bits) << bits
  const out: string[] = []
  for (let i = 7; i >= 0; i--) out.push(((value >> BigInt(i * 16)) & 0xffffn).toString(16))
  return `${out.join(':')}/${ipv6PrefixLength}`
}

/** The eight 16-bit groups of a valid IPv6 address (`::` and a dotted IPv4 tail expanded). */
function ipv6Groups (ip: string): number[] {
  let text = ip
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text)
  if (dotted !== null) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number]
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const parse = (s: string): number[] => s === '' ? [] : s.split(':').map(h => parseInt(h, 16))
  const gap = text.indexOf('::')
  if (gap === -1) return parse(text)
  const left = parse(text.slice(0, gap))
  const right = parse(text.slice(gap + 2))
  return [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right]
}
