/**
 * The MCP methods that read the registry (the lists, resources, prompts, completion; `tools/call`
 * is `tool-call.ts`). They do not know which era or transport carries them: each takes the params
 * and a handler context and returns the result object, or throws an `McpError`.
 */
import { decideAccess, isVisible, visibleTo } from '../auth/access.js'
import { insufficientScope } from '../auth/bearer.js'
import type { McpContext, McpPrincipal } from '../context.js'
import { ErrorCode, MAX_ECHOED_URI, McpError, echoed } from '../jsonrpc/errors.js'
import { paginate } from './pagination.js'
import type { PromptMessage, Registry, ResourceContents, ResourceReturn } from './registry.js'

type Params = Record<string, unknown>

/** -32602 with the `Invalid params: ` prefix every method's refusal shares. */
export function invalid (message: string, data?: unknown): McpError {
  return new McpError(ErrorCode.InvalidParams, `Invalid params: ${message}`, data)
}

/*
 * The lists hold what `principal` may see (a definition's `visible`); a cursor is an offset into
 * that list, so a principal whose view changes between pages may skip or repeat an entry, as with
 * any change of the list between pages.
 */

export function listTools (registry: Registry, params: Params, pageSize: number, principal: McpPrincipal | null): Record<string, unknown> {
  const { page, nextCursor } = paginate('tools', visibleTo(registry.tools.values(), principal, t => t.access), params.cursor, pageSize)
  return withCursor({ tools: page.map(t => t.descriptor) }, nextCursor)
}

export function listResources (registry: Registry, params: Params, pageSize: number, principal: McpPrincipal | null): Record<string, unknown> {
  const { page, nextCursor } = paginate('resources', visibleTo(registry.resources.values(), principal, r => r.access), params.cursor, pageSize)
  return withCursor({ resources: page.map(r => r.descriptor) }, nextCursor)
}

export function listResourceTemplates (registry: Registry, params: Params, pageSize: number, principal: McpPrincipal | null): Record<string, unknown> {
  const { page, nextCursor } = paginate('templates', visibleTo(registry.templates.values(), principal, r => r.access), params.cursor, pageSize)
  return withCursor({ resourceTemplates: page.map(r => r.descriptor) }, nextCursor)
}

export function listPrompts (registry: Registry, params: Params, pageSize: number, principal: McpPrincipal | null): Record<string, unknown> {
  const { page, nextCursor } = paginate('prompts', visibleTo(registry.prompts.values(), principal, p => p.access), params.cursor, pageSize)
  return withCursor({ prompts: page.map(p => p.descriptor) }, nextCursor)
}

function withCursor (result: Record<string, unknown>, nextCursor: string | undefined): Record<string, unknown> {
  if (nextCursor !== undefined) result.nextCursor = nextCursor
  return result
}

function toContents (uri: string, value: ResourceReturn): ResourceContents[] {
  const list = Array.isArray(value) ? value : ('contents' in value ? value.contents : [value])
  return list.map(c => ({ ...c, uri: c.uri ?? uri }))
}

/** `resources/read`. Unknown URI, or one hidden from the principal → `notFound(uri)` (the URI cut to a bound); lacking its scopes → 403. */
export async function readResource (registry: Registry, params: Params, ctx: McpContext, notFound: (uri: string) => McpError): Promise<Record<string, unknown>> {
  if (typeof params.uri !== 'string') throw invalid('uri must be a string')
  const found = registry.findResource(params.uri)
  const decision = decideAccess(found?.access, ctx.principal)
  if (found === null || !decision.visible) throw notFound(echoed(params.uri, MAX_ECHOED_URI))
  if (!decision.allowed) throw insufficientScope(decision.required, undefined)
  return { contents: toContents(params.uri, await found.handler(ctx)) }
}

/** `prompts/get`. Unknown prompt (or hidden from the principal) or missing required arguments → -32602; lacking its scopes → 403. */
export async function getPrompt (registry: Registry, params: Params, ctx: McpContext): Promise<Record<string, unknown>> {
  if (typeof params.name !== 'string') throw invalid('name must be a string')
  const prompt = registry.prompts.get(params.name)
  const decision = decideAccess(prompt?.access, ctx.principal)
  if (prompt === undefined || !decision.visible) throw invalid(`unknown prompt "${echoed(params.name)}"`)
  if (!decision.allowed) throw insufficientScope(decision.required, undefined)
  const args = params.arguments ?? {}
  if (typeof args !== 'object' || args === null || Array.isArray(args)) throw invalid('arguments must be an object')
  const a = args as Record<string, unknown>
  for (const [k, v] of Object.entries(a)) if (typeof v !== 'string') throw invalid(`argument "${echoed(k)}" must be a string`)
  const missing = (prompt.def.arguments ?? []).filter(x => x.required === true && a[x.name] === undefined).map(x => x.name)
  if (missing.length > 0) throw invalid(`missing required arguments: ${missing.join(', ')}`)
  const value = await prompt.handler(a as Record<string, string>, ctx)
  // A copy: the wires complete the result object in place, and a handler may return a shared one.
  const result: { description?: string, messages: PromptMessage[] } = Array.isArray(value) ? { messages: value } : Object.assign({}, value)
  if (result.description === undefined && prompt.def.description !== '') result.description = prompt.def.description
  return result as unknown as Record<string, unknown>
}

/** `completion/complete` for prompt arguments and template variables; at most 100 values. A prompt or template hidden from the principal is unknown. */
export async function complete (registry: Registry, params: Params, principal: McpPrincipal | null): Promise<Record<string, unknown>> {
  const ref = params.ref as Record<string, unknown> | undefined
  const argument = params.argument as Record<string, unknown> | undefined
  if (typeof ref !== 'object' || ref === null) throw invalid('ref must be an object')
  if (typeof argument !== 'object' || argument === null || typeof argument.name !== 'string' || typeof argument.value !== 'string') {
    throw invalid('argument must be { name, value }')
  }
  let completer
  if (ref.type === 'ref/prompt') {
    const prompt = registry.prompts.get(String(ref.name))
    if (prompt === undefined || !isVisible(prompt.access, principal)) throw invalid(`unknown prompt "${echoed(String(ref.name))}"`)
    completer = prompt.def.complete?.[argument.name]
  } else if (ref.type === 'ref/resource') {
    const template = registry.templates.get(String(ref.uri))
    if (template === undefined || !isVisible(template.access, principal)) throw invalid(`unknown resource template "${echoed(String(ref.uri))}"`)
    completer = template.complete[argument.name]
  } else {
    throw invalid('ref.type must be "ref/prompt" or "ref/resource"')
  }
  const context = (params.context as { arguments?: Record<string, string> } | undefined)?.arguments ?? {}
  const values = completer === undefined ? [] : await completer(argument.value, { arguments: context })
  const all = values.filter(v => typeof v === 'string')
  return { completion: { values: all.slice(0, 100), total: all.length, hasMore: all.length > 100 } }
}
