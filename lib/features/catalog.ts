/**
 * The registrations of one kind (tools, resources, templates or prompts) and the handles `add`
 * returns: enable, disable, update (validated as a new definition), remove, in registration order.
 */
import { FST_ERR_MCP_INVALID_DEFINITION } from '../errors.js'
import type {
  ListKind, PromptDefinition, PromptEntry, PromptHandle, PromptHandler, ResourceDefinition, ResourceEntry,
  ResourceHandle, ResourceHandler, ResourceTemplateDefinition, ResourceTemplateHandle, TemplateEntry,
  TemplateHandler, ToolDefinition, ToolEntry
} from './definitions.js'
import type { ToolSchema } from './schema.js'

/** One registration: its definition and handler (what `update()` merges into), and what readers see. */
export interface Slot<D, H, E> {
  key: string
  def: D
  handler: H
  entry: E
  enabled: boolean
  removed: boolean
}

/**
 * The registrations of one kind: all of them (enabled or not) in registration order, and the
 * public map of the enabled ones (kept in the same order).
 */
export class Catalog<D extends object, H, E> {
  readonly #all = new Map<string, Slot<D, H, E>>()

  constructor (
    readonly visible: Map<string, E>,
    readonly what: string,
    readonly list: ListKind,
    readonly keyOf: (def: D) => string,
    readonly build: (def: D, handler: H) => E,
    readonly changed: (kind: ListKind, visible: boolean) => void
  ) {}

  add (def: D, handler: H): Slot<D, H, E> {
    const entry = this.build(def, handler)
    const key = this.keyOf(def)
    if (this.#all.has(key)) throw new FST_ERR_MCP_INVALID_DEFINITION(this.what, `"${key}" is already registered`)
    const slot: Slot<D, H, E> = { key, def, handler, entry, enabled: true, removed: false }
    this.#all.set(key, slot)
    this.visible.set(key, entry)
    this.changed(this.list, true)
    return slot
  }

  /** Removes the registration under `key`; whether there was one. */
  remove (key: string): boolean {
    const slot = this.#all.get(key)
    if (slot === undefined) return false
    this.#all.delete(key)
    this.visible.delete(key)
    slot.removed = true
    this.changed(this.list, slot.enabled)
    return true
  }

  #live (slot: Slot<D, H, E>): void {
    if (slot.removed) throw new FST_ERR_MCP_INVALID_DEFINITION(this.what, `"${slot.key}" was removed; register it again`)
  }

  setEnabled (slot: Slot<D, H, E>, enabled: boolean): void {
    this.#live(slot)
    if (slot.enabled === enabled) return
    slot.enabled = enabled
    this.#refresh()
    this.changed(this.list, true)
  }

  /** Merges `changes` into the definition and rebuilds the entry (validated as a new one). */
  update (slot: Slot<D, H, E>, changes: Partial<D> & { handler?: H, enabled?: boolean }): void {
    this.#live(slot)
    if (typeof changes !== 'object' || changes === null) throw new FST_ERR_MCP_INVALID_DEFINITION(this.what, `"${slot.key}": update() takes an object`)
    const { handler, enabled, ...rest } = changes
    const def = { ...slot.def, ...rest } as D
    const nextHandler = handler ?? slot.handler
    const entry = this.build(def, nextHandler)
    const key = this.keyOf(def)
    if (key !== slot.key && this.#all.has(key)) throw new FST_ERR_MCP_INVALID_DEFINITION(this.what, `"${key}" is already registered`)
    const wasEnabled = slot.enabled
    if (key !== slot.key) {
      // A rename keeps the registration's place in the lists.
      const all = [...this.#all.values()]
      this.#all.clear()
      for (const s of all) this.#all.set(s === slot ? key : s.key, s)
      slot.key = key
    }
    slot.def = def
    slot.handler = nextHandler
    slot.entry = entry
    if (enabled !== undefined) slot.enabled = enabled
    this.#refresh()
    this.changed(this.list, wasEnabled || slot.enabled)
  }

  /** Rebuilds the public map from the registrations, in order. */
  #refresh (): void {
    this.visible.clear()
    for (const slot of this.#all.values()) if (slot.enabled) this.visible.set(slot.key, slot.entry)
  }
}

/** The methods every handle has, over a catalog's slot. */
class Handle<D extends object, H, E> {
  readonly #catalog: Catalog<D, H, E>
  readonly #slot: Slot<D, H, E>

  constructor (catalog: Catalog<D, H, E>, slot: Slot<D, H, E>) {
    this.#catalog = catalog
    this.#slot = slot
  }

  protected get key (): string { return this.#slot.key }
  get enabled (): boolean { return this.#slot.enabled && !this.#slot.removed }
  get removed (): boolean { return this.#slot.removed }
  enable (): void { this.#catalog.setEnabled(this.#slot, true) }
  disable (): void { this.#catalog.setEnabled(this.#slot, false) }
  update (changes: Partial<D> & { handler?: H, enabled?: boolean }): void { this.#catalog.update(this.#slot, changes) }
  remove (): void { if (!this.#slot.removed) this.#catalog.remove(this.#slot.key) }
}

export type AnyToolDefinition = ToolDefinition<ToolSchema | undefined, ToolSchema | undefined>
export type AnyToolHandler = ToolEntry['handler']

export class ToolHandleImpl extends Handle<AnyToolDefinition, AnyToolHandler, ToolEntry> {
  get name (): string { return this.key }
}
export class ResourceHandleImpl extends Handle<ResourceDefinition, ResourceHandler, ResourceEntry> implements ResourceHandle {
  get uri (): string { return this.key }
}
export class TemplateHandleImpl extends Handle<ResourceTemplateDefinition, TemplateHandler, TemplateEntry> implements ResourceTemplateHandle {
  get uriTemplate (): string { return this.key }
}
export class PromptHandleImpl extends Handle<PromptDefinition, PromptHandler, PromptEntry> implements PromptHandle {
  get name (): string { return this.key }
}
