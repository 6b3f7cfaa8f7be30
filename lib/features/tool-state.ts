/**
 * What a tool declares about shared state beyond its arguments: that one argument carries a state
 * handle of a kind (`handle: { argument: 'basket', kind: 'basket' }`: the call then runs under that
 * handle's lock, with its state as `ctx.handle`), or that it needs a handshake-era session
 * (`session: 'required'`: on the stateless wire it answers so instead of running with
 * `ctx.session` null). Checked when the tool is defined; the lifetime of the handle kind is added
 * to the description the model reads, unless the description already states one.
 */
import { FST_ERR_MCP_INVALID_DEFINITION } from '../errors.js'
import type { HandleKind } from '../state/handles.js'

/** A tool's declaration of the state handle it works on. */
export interface ToolHandleOption<A extends string = string> {
  /** The argument that carries the handle id (a string property of `input`). */
  argument: A
  /** The kind of handle (registered with `app.mcp.handleKind`). */
  kind: string
  /** Add "expires after … without use" to the description (default: unless it mentions an expiry already). */
  describeLifetime?: boolean
}

/** The state facts of a registered tool. */
export interface ToolState {
  handle: { argument: string, kind: string } | null
  needsSession: boolean
  /** The description clients see. */
  description: string
}

/** "1 hour", "90 minutes", "45 seconds": the largest unit that divides the duration. */
export function formatLifetime (ms: number): string {
  const units: Array<[number, string]> = [[86_400_000, 'day'], [3_600_000, 'hour'], [60_000, 'minute'], [1000, 'second']]
  for (const [size, name] of units) {
    if (ms >= size && ms % size === 0) {
      const n = ms / size
      return `${n} ${name}${n === 1 ? '' : 's'}`
    }
  }
  return `${ms} milliseconds`
}

/**
 * Checks a tool's `handle` and `session` options against its input schema and the registered
 * kinds, and gives the description to advertise.
 * @throws {FST_ERR_MCP_INVALID_DEFINITION} naming what is wrong.
 */
export function toolState (name: string, def: { description: string, handle?: ToolHandleOption, session?: 'required' },
  inputSchema: Record<string, unknown>, kinds: ReadonlyMap<string, HandleKind>): ToolState {
  const fail = (why: string): never => { throw new FST_ERR_MCP_INVALID_DEFINITION('tool', `"${name}" ${why}`) }
  if (def.session !== undefined && def.session !== 'required') fail('session must be "required" when given')
  const option = def.handle
  if (option === undefined) return { handle: null, needsSession: def.session === 'required', description: def.description }
  if (typeof option !== 'object' || option === null || typeof option.argument !== 'string' || typeof option.kind !== 'string') {
    fail('handle must be { argument, kind }')
  }
  const kind = kinds.get(option.kind) ?? fail(`names handle kind "${option.kind}", which is not registered (app.mcp.handleKind first)`)
  const props = (inputSchema.properties ?? {}) as Record<string, Record<string, unknown> | undefined>
  const prop = props[option.argument]
  if (prop === undefined || (prop.type !== undefined && prop.type !== 'string')) {
    fail(`handle argument "${option.argument}" must be a string property of its input`)
  }
  const required = Array.isArray(inputSchema.required) && inputSchema.required.includes(option.argument)
  if (!required) fail(`handle argument "${option.argument}" must be required in its input`)
  const states = /expir|lifetime/i.test(def.description)
  const describe = option.describeLifetime ?? !states
  const description = describe
    ? `${def.description.trimEnd()}${def.description.trim() === '' ? '' : ' '}The ${kind.name} handle expires after ${formatLifetime(kind.ttl)} without use.`
    : def.description
  return { handle: { argument: option.argument, kind: kind.name }, needsSession: def.session === 'required', description }
}
