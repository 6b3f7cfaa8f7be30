/**
 * Cache hints (`ttlMs`, `cacheScope`) of the 2026-07-28 results that may carry them: the plugin's
 * `cache` option per result kind, a resource's own `cache`, and the defaults (lists and discover
 * 60 s, reads 0; scope `private` when results may depend on the caller, else `public`).
 *
 * Whatever was configured, a result that depends on who asks is `private`: a list with an entry
 * some principals do not see (`visible`), and a read of a resource with any access rule (scopes
 * or `visible`). A shared cache would otherwise hand one principal's answer to another. Scopes
 * alone do not change what a list holds (a scoped tool stays listed, so the client can step up).
 */
import { listCacheScope } from '../auth/access.js'
import type { CacheKind } from './method-table.js'
import type { Registry } from './registry.js'

/** Cache hints of a cacheable result. */
export interface CacheHint { ttlMs: number, cacheScope: 'public' | 'private' }

/** The `cache` option: hints per result kind. */
export type CacheOptions = Partial<Record<CacheKind, { ttlMs?: number, cacheScope?: 'public' | 'private' }>>

/**
 * The hint of a result kind (for `read`, of the resource at `uri`). `defaultScope`: `private`
 * when the `auth` option makes results depend on the caller.
 */
export function cacheHints (registry: Registry, configured: CacheOptions, defaultScope: 'public' | 'private'): (what: CacheKind, uri?: string) => CacheHint {
  return (what, uri) => {
    const own = what === 'read' && uri !== undefined ? registry.resources.get(uri)?.cache : undefined
    const option = configured[what]
    const scope = own?.cacheScope ?? option?.cacheScope ?? defaultScope
    const depends = what === 'read'
      ? uri !== undefined && registry.accessRule({ kind: 'resource', uri }) !== undefined
      : what !== 'discover' && registry.listDependsOnPrincipal(what)
    return {
      ttlMs: own?.ttlMs ?? option?.ttlMs ?? (what === 'read' ? 0 : 60_000),
      cacheScope: listCacheScope(scope, depends)
    }
  }
}
