/**
 * Turns a definition into the entry the methods read: every field checked (a mistake is
 * FST_ERR_MCP_INVALID_DEFINITION at registration, never a surprise at call time), schemas compiled,
 * and the descriptor clients see built field by field so that server-only fields (access rules,
 * limits, completers, cache hints) never reach it.
 */
import { accessRuleOf, type AccessFields, type AccessRule } from '../auth/access.js'
import { FST_ERR_MCP_INVALID_DEFINITION } from '../errors.js'
import { checkToolLimit } from '../limits/policy.js'
import type { HandleKind } from '../state/handles.js'
import type {
  PromptDefinition, PromptEntry, PromptHandler, ResourceDefinition, ResourceEntry, ResourceHandler,
  ResourceTemplateDefinition, TaskSupport, TemplateEntry, TemplateHandler, ToolDefinition, ToolEntry
} from './definitions.js'
import { compileSchema, type ToolSchema } from './schema.js'
import { toolState } from './tool-state.js'
import { compileTemplate } from './uri-template.js'

const TOOL_NAME = /^[A-Za-z0-9_./-]{1,64}$/

/** The access rule of a definition (`scopes`, `visible`), or FST_ERR_MCP_INVALID_DEFINITION. */
function accessOf (what: string, name: string, def: AccessFields): AccessRule | undefined {
  try { return accessRuleOf(def) } catch (err) { throw new FST_ERR_MCP_INVALID_DEFINITION(what, `"${name}": ${(err as Error).message}`) }
}

function strip<T extends Record<string, unknown>> (o: T): T {
  for (const k of Object.keys(o)) if (o[k] === undefined) delete o[k]
  return o
}

/**
 * `x-mcp-header` (2026-07-28): only on primitive string/integer/boolean properties reached through
 * `properties`, with a non-empty header-safe name, unique case-insensitively.
 */
function checkHeaderParams (tool: string, schema: Record<string, unknown>): void {
  const props = schema.properties as Record<string, Record<string, unknown>> | undefined
  const seen = new Set<string>()
  for (const [prop, s] of Object.entries(props ?? {})) {
    const name = s?.['x-mcp-header']
    if (name === undefined) continue
    if (typeof name !== 'string' || !/^[A-Za-z0-9-]+$/.test(name)) {
      throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}" property "${prop}": x-mcp-header must be a non-empty token of [A-Za-z0-9-]`)
    }
    if (!['string', 'integer', 'boolean'].includes(s.type as string)) {
      throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}" property "${prop}": x-mcp-header is only allowed on string, integer or boolean properties`)
    }
    if (seen.has(name.toLowerCase())) throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}": x-mcp-header "${name}" is used twice`)
    seen.add(name.toLowerCase())
  }
}

/** Validates a tool definition and compiles its schemas (`kinds`: the registered handle kinds). */
export function buildTool (def: ToolDefinition<ToolSchema | undefined, ToolSchema | undefined>, handler: unknown, kinds: ReadonlyMap<string, HandleKind>): ToolEntry {
  if (typeof def !== 'object' || def === null) throw new FST_ERR_MCP_INVALID_DEFINITION('tool', 'definition must be an object')
  if (typeof def.name !== 'string' || !TOOL_NAME.test(def.name)) {
    throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `name ${JSON.stringify(def.name)} must be 1–64 characters of [A-Za-z0-9_./-]`)
  }
  if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" needs a description`)
  if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" needs a handler function`)
  let input, output
  try {
    input = def.input === undefined ? compileSchema({ type: 'object', properties: {} }, 'input') : compileSchema(def.input, 'input')
    output = def.output === undefined ? undefined : compileSchema(def.output, 'output')
  } catch (err) {
    throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" has an invalid schema: ${(err as Error).message}`)
  }
  if (input.json.type !== 'object') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${def.name}" input must be an object schema`)
  checkHeaderParams(def.name, input.json)
  const state = toolState(def.name, def as Parameters<typeof toolState>[1], input.json, kinds)
  const access = accessOf('tool', def.name, def)
  const limits = def.limits === undefined || def.limits === false
    ? def.limits
    : checkToolLimit(def.limits, `"${def.name}" limits`, (name, why) => { throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `${name} ${why}`) })
  const taskSupport = checkTaskSupport(def.name, def.taskSupport, state.handle !== null || state.needsSession)
  // Field by field: access rules and limits are the server's, never sent.
  const descriptor = strip({
    name: def.name,
    title: def.title,
    description: state.description,
    inputSchema: input.json,
    outputSchema: output?.json,
    annotations: def.annotations,
    icons: def.icons,
    execution: taskSupport === 'forbidden' ? undefined : { taskSupport },
    _meta: def._meta
  })
  return {
    descriptor,
    validateInput: input.validate,
    validateOutput: output?.validate ?? null,
    handler: handler as ToolEntry['handler'],
    access,
    limits,
    handle: state.handle,
    needsSession: state.needsSession,
    readOnly: def.annotations?.readOnlyHint === true,
    taskSupport,
    beforeTask: checkBeforeTask(def.name, def.beforeTask, taskSupport)
  }
}

/** `beforeTask`: a function, on a tool that may run as a task. */
function checkBeforeTask (tool: string, value: unknown, support: TaskSupport): ToolEntry['beforeTask'] {
  if (value === undefined) return null
  if (typeof value !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}" beforeTask must be a function`)
  if (support === 'forbidden') throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}" has beforeTask but never runs as a task (set taskSupport)`)
  return value as ToolEntry['beforeTask']
}

const TASK_SUPPORT = new Set<unknown>(['forbidden', 'optional', 'required'])

/**
 * A tool's `taskSupport`. A task outlives its request, so it cannot hold a state handle's lock or
 * a session for its whole run: those combinations are refused at registration.
 */
function checkTaskSupport (tool: string, value: unknown, stateful: boolean): TaskSupport {
  if (value === undefined) return 'forbidden'
  if (!TASK_SUPPORT.has(value)) throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}" taskSupport must be 'forbidden', 'optional' or 'required'`)
  if (value !== 'forbidden' && stateful) throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${tool}" cannot run as a task and use a state handle or a session`)
  return value as TaskSupport
}

export function buildResource (def: ResourceDefinition, handler: ResourceHandler): ResourceEntry {
  if (typeof def?.uri !== 'string' || !URL.canParse(def.uri)) throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `uri ${JSON.stringify(def?.uri)} must be an absolute URI`)
  if (typeof def.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a name`)
  if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a description`)
  if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('resource', `"${def.uri}" needs a handler function`)
  const access = accessOf('resource', def.uri, def)
  // The descriptor is the rest of the definition: what is not for clients is taken out.
  const { cache, scopes: _s, visible: _v, ...rest } = def
  return { descriptor: strip({ ...rest }), cache, handler, access }
}

export function buildTemplate (def: ResourceTemplateDefinition, handler: TemplateHandler): TemplateEntry {
  if (typeof def?.uriTemplate !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', 'uriTemplate must be a string')
  if (typeof def.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a name`)
  if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a description`)
  if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}" needs a handler function`)
  let compiled
  try { compiled = compileTemplate(def.uriTemplate) } catch (err) {
    throw new FST_ERR_MCP_INVALID_DEFINITION('resource template', `"${def.uriTemplate}": ${(err as Error).message}`)
  }
  const access = accessOf('resource template', def.uriTemplate, def)
  const { complete, scopes: _s, visible: _v, ...rest } = def
  return { descriptor: strip({ ...rest }), compiled, complete: complete ?? {}, handler, access }
}

export function buildPrompt (def: PromptDefinition, handler: PromptHandler): PromptEntry {
  if (typeof def?.name !== 'string' || def.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', 'name must be a non-empty string')
  if (typeof def.description !== 'string') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" needs a description`)
  if (typeof handler !== 'function') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" needs a handler function`)
  for (const a of def.arguments ?? []) {
    if (typeof a?.name !== 'string' || a.name === '') throw new FST_ERR_MCP_INVALID_DEFINITION('prompt', `"${def.name}" has an argument without a name`)
  }
  const access = accessOf('prompt', def.name, def)
  const { complete: _c, scopes: _s, visible: _v, ...rest } = def
  return { descriptor: strip({ ...rest }), def, handler, access }
}
