/**
 * The app's ioredis module. ioredis is an optional peer dependency: an app that does not use Redis
 * need not install it. It is loaded on first use (a client the plugin makes from a URL or options,
 * or a script runner asking whether a client came from it), and nowhere else.
 */
import { createRequire } from 'node:module'
/** The part of the ioredis module the plugin uses. */
export interface IoredisModule {
  Redis: new (...args: unknown[]) => unknown
  /** Its `Command` class (`eval.ts` builds EVALSHA commands of it for this module's clients). */
  Command: unknown
}

let ioredis: IoredisModule | undefined

/**
 * The app's ioredis (5 or 6), loaded once, on first use.
 * @throws {Error} naming the package when it is not installed.
 */
export function loadIoredis (): IoredisModule {
  if (ioredis !== undefined) return ioredis
  try {
    // CommonJS in both major versions, resolved from the app (a peer dependency). Early 5.x
    // releases export the class itself (and as `default`), later ones also as `Redis`.
    type Loaded = IoredisModule['Redis'] & { Redis?: IoredisModule['Redis'], default?: IoredisModule['Redis'], Command?: unknown }
    const loaded = createRequire(import.meta.url)('ioredis') as Loaded
    const Redis = loaded.Redis ?? loaded.default ?? loaded
    ioredis = { Redis, Command: loaded.Command ?? (Redis as { Command?: unknown }).Command }
  } catch (err) {
    const notInstalled = (err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' &&
      (err as Error).message.startsWith("Cannot find module 'ioredis'")
    throw new Error(notInstalled
      ? 'fastify-mcp-http: a Redis URL or Redis options need the "ioredis" package (version 5 or 6), which is not installed. ' +
        'Install it (npm install ioredis), or pass a client you made yourself.'
      : `fastify-mcp-http: the "ioredis" package failed to load: ${(err as Error).message}`, { cause: err })
  }
  return ioredis
}

/** The app's ioredis, or null when it cannot be loaded (for a use that has another way). */
export function ioredisIfInstalled (): IoredisModule | null {
  try {
    return loadIoredis()
  } catch {
    return null
  }
}
