/**
 * What the server offers follows what is registered: `logging` and `completions` always, `tools`,
 * `resources` (with subscriptions) and `prompts` once one of each exists, all with `listChanged`;
 * with tools, `experimental["fastify-mcp-http/idempotency"]` where keys on calls are honoured.
 * Rebuilt only when the registry changed (the result is shared: it is only ever serialized).
 */
import { KEY_META, REPLAY_META } from '../state/idempotency.js'
import type { Registry } from './registry.js'

/**
 * What the server advertises of idempotency keys on `tools/call` (an experimental capability:
 * MCP has none for it): where a key may travel, and its bounds.
 */
export const IDEMPOTENCY_CAPABILITY = Object.freeze({
  param: 'idempotencyKey',
  meta: KEY_META,
  header: 'Idempotency-Key',
  replayMeta: REPLAY_META,
  maxKeyLength: 255
})

/** The server capabilities of `registry`, kept until it changes (`keyed`: keys on tool calls are honoured). */
export function serverCapabilities (registry: Registry, keyed = false): () => Record<string, unknown> {
  let caps: Record<string, unknown> = {}
  let revision = -1
  return () => {
    if (revision === registry.revision) return caps
    caps = { logging: {}, completions: {} }
    if (registry.tools.size > 0) caps.tools = { listChanged: true }
    if (registry.tools.size > 0 && keyed) caps.experimental = { 'fastify-mcp-http/idempotency': IDEMPOTENCY_CAPABILITY }
    if (registry.resources.size > 0 || registry.templates.size > 0) caps.resources = { subscribe: true, listChanged: true }
    if (registry.prompts.size > 0) caps.prompts = { listChanged: true }
    revision = registry.revision
    return caps
  }
}
