/** Protocol revisions this server speaks, newest first. */

/** Handshake-era revisions, newest first. */
export const HANDSHAKE_VERSIONS = ['2025-11-25', '2025-06-18', '2025-03-26'] as const
export type HandshakeVersion = typeof HANDSHAKE_VERSIONS[number]
export const LATEST_LEGACY_VERSION: HandshakeVersion = HANDSHAKE_VERSIONS[0]

/** Picks the version to answer `initialize` with: the requested one when supported, else our latest. */
export function negotiateHandshakeVersion (requested: unknown): HandshakeVersion {
  return (HANDSHAKE_VERSIONS as readonly unknown[]).includes(requested) ? requested as HandshakeVersion : LATEST_LEGACY_VERSION
}

export function isHandshakeVersion (v: unknown): v is HandshakeVersion {
  return (HANDSHAKE_VERSIONS as readonly unknown[]).includes(v)
}

/** Revisions from 2025-11-25 on send the SSE priming event and `retry`. */
export function supportsSsePolling (v: string): boolean {
  return v >= '2025-11-25'
}

/** Only 2025-03-26 allows JSON-RPC batches. */
export function allowsBatches (v: string): boolean {
  return v === '2025-03-26'
}
