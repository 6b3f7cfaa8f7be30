/**
 * The 2026-07-28 wire's `_meta` keys: what every request carries about its client (version,
 * capabilities, info, log level) and what every result carries about the server.
 */

/** The revisions served statelessly. */
export const STATELESS_VERSIONS = ['2026-07-28'] as const

export const META_VERSION = 'io.modelcontextprotocol/protocolVersion'
export const META_CAPS = 'io.modelcontextprotocol/clientCapabilities'
export const META_CLIENT = 'io.modelcontextprotocol/clientInfo'
export const META_LOG = 'io.modelcontextprotocol/logLevel'
export const META_SERVER = 'io.modelcontextprotocol/serverInfo'
export const META_SUB = 'io.modelcontextprotocol/subscriptionId'
