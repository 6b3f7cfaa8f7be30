/**
 * One SSE connection, as the streams above it see it: write an event, a comment, end with `retry`.
 * The HTTP layer implements it (`http/sse-writer.ts`: headers, keep-alive, the slow-reader bound,
 * corking); the logical streams (`server-stream.ts`) and the stream hub write to it without knowing
 * the connection.
 */
export interface EventSink {
  /** Whether the connection is gone (closed by the client, ended, or dropped as a slow reader). */
  readonly closed: boolean
  /** Writes one event (`id` may be null: an event nobody can resume from). False once closed. */
  event (id: string | null, data: string): boolean
  /** Writes a comment line (ignored by clients; keeps proxies from timing the stream out). */
  comment (text: string): void
  /** Ends the connection, sending `retry` first when given (the client comes back after it). */
  end (retryMs?: number): void
  /** Calls `fn` once when the connection closes, whoever closed it. */
  onClose (fn: () => void): void
}
