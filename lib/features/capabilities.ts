/**
 * What the server offers follows what is registered: `logging` and `completions` always, `tools`,
 * `resources` (with subscriptions) and `prompts` once one of each exists, all with `listChanged`.
 * Rebuilt only when the registry changed (the result is shared: it is only ever serialized).
 */
import type { Registry } from './registry.js'

/** The server capabilities of `registry`, kept until it changes. */
export function serverCapabilities (registry: Registry): () => Record<string, unknown> {
  let caps: Record<string, unknown> = {}
  let revision = -1
  return () => {
    if (revision === registry.revision) return caps
    caps = { logging: {}, completions: {} }
    if (registry.tools.size > 0) caps.tools = { listChanged: true }
    if (registry.resources.size > 0 || registry.templates.size > 0) caps.resources = { subscribe: true, listChanged: true }
    if (registry.prompts.size > 0) caps.prompts = { listChanged: true }
    revision = registry.revision
    return caps
  }
}
