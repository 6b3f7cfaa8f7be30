/**
 * Whether a Redis or PostgreSQL connection URL has the shape its client needs, checked when it is
 * given (at registration, or when a client is made of it) rather than found out at start-up as a
 * wait and 503s: `redis:/host:6379` (one slash) parses as a URL with no host, and ioredis then
 * connects to 127.0.0.1 instead of `host`. A problem is said without the URL itself (it may hold
 * a password).
 */

/** What is wrong with a `redis://` / `rediss://` URL, or `null` when it has a scheme and a host. */
export function redisUrlProblem (url: string): string | null {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return 'is not a valid URL (redis://host:port or rediss://…)'
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') return `must be a redis:// or rediss:// URL, got ${parsed.protocol}`
  if (!url.slice(parsed.protocol.length).startsWith('//') || parsed.hostname === '') {
    return `has no host: write ${parsed.protocol}//host:port (two slashes after "${parsed.protocol}")`
  }
  return null
}

/**
 * What is wrong with a PostgreSQL connection string, or `null`: a `postgres://` or
 * `postgresql://` URL with its two slashes (`postgres:///db?host=/run/postgresql` names a socket
 * and is fine), or a socket directory (`/run/postgresql db`), as pg takes them.
 */
export function postgresUrlProblem (url: string): string | null {
  if (url.startsWith('/')) return null
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return 'is not a valid connection string (postgres://user@host:5432/db)'
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') return `must be a postgres:// or postgresql:// URL, got ${parsed.protocol}`
  if (!url.slice(parsed.protocol.length).startsWith('//')) return `has no host: write ${parsed.protocol}//user@host:5432/db (two slashes after "${parsed.protocol}")`
  return null
}

/** The host and port of a connection URL for a log line (never its user or password), or `undefined`. */
export function urlHost (url: string): string | undefined {
  try {
    const parsed = new URL(url)
    return parsed.host === '' ? undefined : parsed.host
  } catch {
    return undefined
  }
}
