/**
 * Fastify-level errors (misuse at register time or through the registry API). Wire errors are
 * JSON-RPC errors (lib/jsonrpc) and never use these.
 */
import createError from '@fastify/error'

/** An option passed to `register(mcp, opts)` is invalid; the message names it. */
export const FST_ERR_MCP_INVALID_OPTION = createError<[string, string]>(
  'FST_ERR_MCP_INVALID_OPTION', 'Invalid option "%s": %s', 500, TypeError)

/** A tool, resource or prompt definition is invalid (bad name, bad schema, duplicate). */
export const FST_ERR_MCP_INVALID_DEFINITION = createError<[string, string]>(
  'FST_ERR_MCP_INVALID_DEFINITION', 'Invalid %s definition: %s', 500, TypeError)

/** A handler asked the client for something its declared capabilities do not allow. */
export const FST_ERR_MCP_CAPABILITY = createError<[string]>(
  'FST_ERR_MCP_CAPABILITY', 'The client did not declare the "%s" capability', 500)

/** A request to the client was not answered in time. */
export const FST_ERR_MCP_CLIENT_TIMEOUT = createError<[string, number]>(
  'FST_ERR_MCP_CLIENT_TIMEOUT', 'The client did not answer %s within %d ms', 504)

/** A request to the client could not be sent or was answered with an error. */
export const FST_ERR_MCP_CLIENT_REQUEST = createError<[string, string]>(
  'FST_ERR_MCP_CLIENT_REQUEST', 'Request %s to the client failed: %s', 502)

/**
 * `ctx.elicit`/`sample`/`roots` on a handshake-era request that carries no `Mcp-Session-Id`: the
 * client cannot answer requests from the server without its session (docs/clients.md).
 */
export const FST_ERR_MCP_NO_SESSION = createError<[string]>(
  'FST_ERR_MCP_NO_SESSION', 'Cannot send %s to the client: the request carries no Mcp-Session-Id (the client must send back the one initialize returned)', 400)

/** The session lock was lost or could not be taken back after waiting for the client. */
export const FST_ERR_MCP_SESSION_BUSY = createError<[string]>(
  'FST_ERR_MCP_SESSION_BUSY', 'Session lock unavailable: %s', 503)

/**
 * The server is shutting down (`app.close()`) and the request was still running at the drain
 * deadline (`drainTimeoutMs`): what a handler's `ctx.signal` aborts with, and what a handler waiting
 * for the client's answer (`elicit`, `sample`, `roots`) gets. Its client gets a JSON-RPC `-32000`.
 */
export const FST_ERR_MCP_SERVER_CLOSING = createError<[number]>(
  'FST_ERR_MCP_SERVER_CLOSING', 'The server is shutting down: the request did not finish within the drain timeout (%d ms)', 503)

/**
 * A write was sent and no answer came (a timeout, a connection cut after the command or statement
 * left): the store may or may not have applied it. A store of the app's own throws it (with the
 * driver's error as `cause`) for a save whose fate it cannot know; the plugin then tells the client
 * exactly that — never "not saved" — and a retry with the same idempotency key answers which.
 * Any other error of a save means the store refused it: nothing was written.
 */
export class OutcomeUnknownError extends Error {
  constructor (message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'OutcomeUnknownError'
  }
}
