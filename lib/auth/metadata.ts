/**
 * OAuth 2.0 Protected Resource Metadata (RFC 9728): the document, its well-known URIs, and the
 * Fastify routes that serve it. For a resource `https://host/mcp` the document is served at the
 * path-inserted URI `/.well-known/oauth-protected-resource/mcp` (RFC 9728 §3.1; the one MCP
 * clients try first and the one the 401 challenge names) and, unless turned off, at the root
 * `/.well-known/oauth-protected-resource` (MCP clients fall back to it).
 */
import type { FastifyInstance } from 'fastify'

export const WELL_KNOWN_PRM = '/.well-known/oauth-protected-resource'

/** The metadata document (RFC 9728 §2). */
export interface ProtectedResourceMetadata {
  resource: string
  authorization_servers: string[]
  scopes_supported?: string[]
  bearer_methods_supported?: string[]
  resource_name?: string
  resource_documentation?: string
  resource_policy_uri?: string
  resource_tos_uri?: string
  [field: string]: unknown
}

/** Fields a user may add to the document (`resource` and `authorization_servers` are the plugin's). */
export type ExtraMetadata = Omit<Partial<ProtectedResourceMetadata>, 'resource' | 'authorization_servers' | 'scopes_supported'>

/** Where the document is served, on this server and as an absolute URL. */
export interface MetadataLocation {
  /** The path-inserted absolute URL: the `resource_metadata` of every challenge. */
  url: string
  /** Route paths on this server: the path-inserted one first, then the root one (if served). */
  paths: string[]
}

/**
 * The well-known location of `resource` (an absolute URL without query or fragment). A resource
 * without a path (or `/`) has only the root form.
 */
export function metadataLocation (resource: string, atRoot: boolean): MetadataLocation {
  const u = new URL(resource)
  const path = u.pathname === '/' ? '' : u.pathname
  const inserted = WELL_KNOWN_PRM + path
  const paths = [inserted]
  if (path !== '' && atRoot) paths.push(WELL_KNOWN_PRM)
  return { url: u.origin + inserted, paths }
}

/** What the metadata routes serve. */
export interface MetadataSource {
  /** The paths to serve at (see {@link metadataLocation}). */
  paths: readonly string[]
  /** The document; called per request, so scopes declared later (a tool added) appear. */
  document: () => ProtectedResourceMetadata
}

/**
 * Registers GET (and HEAD, by Fastify) plus an OPTIONS preflight on each path. The document is
 * public: any origin may read it (browser-based clients discover the authorization server through
 * it, and some send `MCP-Protocol-Version`, which needs the preflight). Register on the instance
 * whose routes sit at the host's root (the app, not a prefixed child): the well-known URIs are
 * absolute paths.
 */
export function registerProtectedResourceMetadata (app: FastifyInstance, source: MetadataSource): void {
  const cors = {
    'access-control-allow-origin': '*',
    'access-control-allow-methods': 'GET, HEAD, OPTIONS',
    'access-control-allow-headers': 'mcp-protocol-version, authorization'
  }
  for (const url of source.paths) {
    app.get(url, async (_request, reply) => {
      reply.headers({ ...cors, 'cache-control': 'public, max-age=300' })
      reply.type('application/json')
      return JSON.stringify(source.document())
    })
    app.options(url, async (_request, reply) => {
      reply.code(204).headers({ ...cors, 'access-control-max-age': '86400' })
      return reply.send()
    })
  }
}
