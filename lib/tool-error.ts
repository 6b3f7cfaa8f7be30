/**
 * Errors a tool handler throws to fail the call. By default a tool handler's thrown message
 * reaches the model verbatim (as an `isError: true` result): useful for "that SKU does not exist",
 * harmful for "connection to db-7.internal:5432 refused". An error whose `expose` is `false` — an
 * {@link InternalToolError}, or an http-errors 5xx — is answered "Tool execution failed"; its
 * message and stack go only to the request's log.
 */

/** A tool failure whose message is for the log, not the model (`expose: false`). */
export class InternalToolError extends Error {
  /** The model sees "Tool execution failed" instead of the message. */
  readonly expose = false
  constructor (message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'InternalToolError'
  }
}
