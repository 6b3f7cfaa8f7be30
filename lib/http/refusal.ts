/**
 * A refusal of the whole HTTP request by the transport (before any MCP processing, or for a
 * method/route the endpoint does not serve): an HTTP status, a JSON-RPC error body answered under
 * a given id (often `null`), and headers such as `WWW-Authenticate` or `Allow`. The protocol layer
 * below raises `McpError`s with a status instead; the routes map both with `errorReply`.
 */
import { McpError, type RequestId } from '../jsonrpc/errors.js'

/** @internal See the module doc. */
export class HttpRefusal extends McpError {
  /** The id the error is answered under. */
  readonly id: RequestId | null
  readonly headers: Record<string, string> | undefined
  declare readonly status: number

  constructor (status: number, id: RequestId | null, code: number, message: string, headers?: Record<string, string>) {
    super(code, message, undefined, status)
    this.name = 'HttpRefusal'
    this.id = id
    this.headers = headers
  }
}
