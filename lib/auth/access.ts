/**
 * Per-definition access: a tool, resource, resource template or prompt may require scopes
 * (`scopes: ['cart:write']`) and may be hidden from some principals (`visible: (p) => boolean`).
 *
 * - Hidden means absent: not listed, and a call answers exactly as for a name that does not exist
 *   (the era's "unknown tool" / "resource not found"), never 403 — a 403 would tell the caller it
 *   exists.
 * - A visible definition whose scopes the principal lacks stays listed (the client can learn it
 *   needs more and step up); calling it is refused for the whole HTTP request: 403
 *   `insufficient_scope` naming every scope it needs (401 with the same `scope` for an anonymous
 *   caller). That refusal is decided from the request body before any handler runs
 *   ({@link authorizeMessages}), so it can be an HTTP status even where the answer would be SSE.
 * - Lists that hide something depend on the principal: their 2026-07-28 `cacheScope` is `private`
 *   ({@link listCacheScope}).
 *
 * A `visible` predicate must be synchronous and return `true` to show; anything else (`false`, a
 * Promise, `undefined`) hides. A predicate that throws fails the request (logged as the server's
 * error), never shows.
 */
import type { McpPrincipal } from '../context.js'
import { insufficientScope, missingToken } from './bearer.js'

/** What a definition declares about access. */
export interface AccessRule {
  /** Scopes a principal needs to call / read / get it. */
  readonly scopes?: readonly string[]
  /** Whether `principal` (null: anonymous) may see it at all. */
  readonly visible?: (principal: McpPrincipal | null) => boolean
}

/** The access fields a definition may carry (`ToolDefinition & AccessFields`, …). */
export interface AccessFields {
  /** Scopes needed to call / read / get it (403 `insufficient_scope` without them). */
  scopes?: string[]
  /** Hides it (unlisted, "unknown" when called) from principals for which this is not `true`. */
  visible?: (principal: McpPrincipal | null) => boolean
}

/** What a request addresses, for the methods that address one definition. */
export type AccessTarget =
  | { kind: 'tool', name: string }
  | { kind: 'prompt', name: string }
  /** A URI to read or subscribe to: a fixed resource, else the first template that matches. */
  | { kind: 'resource', uri: string }
  /** A template by its `uriTemplate` (`completion/complete` with `ref/resource`). */
  | { kind: 'template', uriTemplate: string }

/** Looks up the rule of a target (the registry implements it); `undefined`: no rule or no such thing. */
export interface AccessRuleSource {
  accessRule: (target: AccessTarget) => AccessRule | undefined
}

/** The decision for one definition and one principal. */
export type AccessDecision =
  | { visible: false }
  | { visible: true, allowed: true }
  | { visible: true, allowed: false, required: string[], missing: string[] }

/** A scope token (RFC 6749 §3.3 `scope-token`: no space, `"` or `\`). */
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/

/**
 * Validates the access fields of a definition; returns the rule (`undefined` when it constrains
 * nothing, so `undefined` always means open to all). Throws an `Error` whose message says what is wrong (the registry wraps it in
 * `FST_ERR_MCP_INVALID_DEFINITION`).
 */
export function accessRuleOf (def: { scopes?: unknown, visible?: unknown }): AccessRule | undefined {
  const { scopes, visible } = def
  if (scopes === undefined && visible === undefined) return undefined
  if (scopes !== undefined && (!Array.isArray(scopes) || !scopes.every(s => typeof s === 'string' && SCOPE_TOKEN.test(s)))) {
    throw new Error('scopes must be an array of scope tokens (no spaces, quotes or backslashes)')
  }
  if (visible !== undefined && typeof visible !== 'function') throw new Error('visible must be a function (principal) => boolean')
  const rule: { scopes?: readonly string[], visible?: AccessRule['visible'] } = {}
  if (scopes !== undefined && scopes.length > 0) rule.scopes = Object.freeze([...new Set(scopes as string[])])
  if (visible !== undefined) rule.visible = visible as AccessRule['visible']
  // A rule that constrains nothing (`scopes: []`) is none: `undefined` always means "open to all".
  return rule.scopes === undefined && rule.visible === undefined ? undefined : Object.freeze(rule)
}

/** The scopes a principal holds: its `scopes` array (a principal from `auth`, or one a custom `auth.authenticate` gave scopes). */
export function principalScopes (principal: McpPrincipal | null): ReadonlySet<string> {
  const s = principal?.scopes
  return new Set(Array.isArray(s) ? s.filter((x): x is string => typeof x === 'string') : [])
}

/** Whether `principal` holds every one of `scopes`. */
export function hasScopes (principal: McpPrincipal | null, ...scopes: string[]): boolean {
  const held = principalScopes(principal)
  return scopes.every(s => held.has(s))
}

/** Whether `principal` may see a definition with `rule` (see the module doc). */
export function isVisible (rule: AccessRule | undefined, principal: McpPrincipal | null): boolean {
  return rule?.visible === undefined || rule.visible(principal) === true
}

/** The decision for a definition with `rule` and `principal`. */
export function decideAccess (rule: AccessRule | undefined, principal: McpPrincipal | null): AccessDecision {
  if (!isVisible(rule, principal)) return { visible: false }
  const required = rule?.scopes ?? []
  if (required.length === 0) return { visible: true, allowed: true }
  const held = principalScopes(principal)
  const missing = required.filter(s => !held.has(s))
  return missing.length === 0 ? { visible: true, allowed: true } : { visible: true, allowed: false, required: [...required], missing }
}

/** The items `principal` may see, in order (for the list methods). */
export function visibleTo<T> (items: Iterable<T>, principal: McpPrincipal | null, ruleOf: (item: T) => AccessRule | undefined): T[] {
  const out: T[] = []
  for (const item of items) if (isVisible(ruleOf(item), principal)) out.push(item)
  return out
}

/**
 * The 2026-07-28 `cacheScope` of a list: `private` when its content depends on the principal
 * (some entry has a `visible` predicate), else what was configured. A `public` list that hides
 * things would let a shared cache hand one principal's list to another.
 */
export function listCacheScope (configured: 'public' | 'private', dependsOnPrincipal: boolean): 'public' | 'private' {
  return dependsOnPrincipal ? 'private' : configured
}

/** Whether a rule makes what holds it depend on the principal. */
export function dependsOnPrincipal (rule: AccessRule | undefined): boolean {
  return rule?.visible !== undefined
}

function str (v: unknown): string | null {
  return typeof v === 'string' ? v : null
}

/**
 * The definition a request addresses, for the methods that address one: `tools/call`,
 * `prompts/get`, `resources/read`, `resources/subscribe` / `unsubscribe`, `completion/complete`
 * (the prompt or template completed). `null` for the others and for malformed params (the method
 * itself answers those).
 */
export function accessTarget (method: string, params: Record<string, unknown> | undefined): AccessTarget | null {
  const p = params ?? {}
  switch (method) {
    case 'tools/call': { const name = str(p.name); return name === null ? null : { kind: 'tool', name } }
    case 'prompts/get': { const name = str(p.name); return name === null ? null : { kind: 'prompt', name } }
    case 'resources/read':
    case 'resources/subscribe':
    case 'resources/unsubscribe': { const uri = str(p.uri); return uri === null ? null : { kind: 'resource', uri } }
    case 'completion/complete': {
      const ref = p.ref as Record<string, unknown> | undefined
      if (typeof ref !== 'object' || ref === null) return null
      if (ref.type === 'ref/prompt') { const name = str(ref.name); return name === null ? null : { kind: 'prompt', name } }
      if (ref.type === 'ref/resource') { const uriTemplate = str(ref.uri); return uriTemplate === null ? null : { kind: 'template', uriTemplate } }
      return null
    }
    default: return null
  }
}

/** A request of a body, as the gate needs it. */
export interface GateMessage {
  method: string
  params?: Record<string, unknown>
}

/**
 * The gate in front of the methods: for the requests of one HTTP POST, throws an `AuthError` when
 * a visible definition one of them addresses needs scopes `principal` lacks — 403
 * `insufficient_scope` (401 for an anonymous caller) whose `scope` names every scope the body's
 * requests need (held ones too), `alsoRequired` (scopes every request needs) included. Hidden and unknown targets
 * pass: the method answers them as unknown. `resourceMetadata`: the challenge's link, when the
 * `auth` option is on.
 */
export function authorizeMessages (messages: Iterable<GateMessage>, principal: McpPrincipal | null, source: AccessRuleSource,
  opts: { resourceMetadata?: string, alsoRequired?: readonly string[] } = {}): void {
  // Made only for a definition that needs scopes: most requests address none (no Set, no decision).
  let needed: Set<string> | null = null
  let refused = false
  for (const m of messages) {
    const target = accessTarget(m.method, m.params)
    if (target === null) continue
    const rule = source.accessRule(target)
    // No rule: visible to all and open to all.
    if (rule === undefined) continue
    const decision = decideAccess(rule, principal)
    if (!decision.visible) continue
    // Every scope of the batch, the allowed requests' too: a client that re-authorizes for only
    // the missing ones would lose those.
    if (rule.scopes !== undefined) {
      needed ??= new Set(opts.alsoRequired)
      for (const s of rule.scopes) needed.add(s)
    }
    if (!decision.allowed) refused = true
  }
  if (!refused) return
  // A refusal needs scopes, so `needed` was made (with `alsoRequired` first).
  const scopes = [...(needed as Set<string>)]
  throw principal === null ? missingToken(opts.resourceMetadata, scopes) : insufficientScope(scopes, opts.resourceMetadata)
}
