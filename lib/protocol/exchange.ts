/**
 * What a wire may do with the HTTP exchange it serves. The wires decide what to answer; the HTTP
 * layer (`lib/http`) implements these and is the only code that writes to a connection, so nothing
 * in `protocol/` imports from `http/`.
 */
import type { ServerResponse } from 'node:http'
import type { FastifyRequest } from 'fastify'
import type { BusMessage } from '../bus/bus.js'
import type { EventLog } from '../bus/event-log.js'
import type { EventSink } from '../bus/event-sink.js'
import type { RequestAbort } from './request-abort.js'

/** The event log of an answer nobody resumes (2026-07-28 responses, an answer without a session). */
export const NULL_EVENT_LOG: EventLog = {
  open: async () => '',
  append: async () => '',
  replay: async () => null,
  finish: async () => {},
  dropSession: async () => {}
}

/** How a POST's answer is written (see {@link ResponseChannel}). */
export interface ChannelOptions {
  /** The session the response belongs to (handshake era), for resumable streams. */
  sessionId: string | null
  /** Send the priming event and `retry`, and log events for resumption (2025-11-25 and later). */
  polling: boolean
  /** Where a resumable stream's events are logged. */
  log: EventLog
  /** Publishes a resumable stream's events for followers on other connections or instances. */
  publish?: (message: BusMessage) => void
  /** Headers of the answer besides the standard ones (e.g. `Mcp-Session-Id` on `initialize`). */
  headers?: Record<string, string>
}

/**
 * The answer of one POST: `application/json` unless the handler sends a message first (progress, a
 * log message, a request to the client) or the client accepts only SSE; then `text/event-stream`.
 */
export interface ResponseChannel {
  /** Whether the answer was sent. */
  readonly done: boolean
  /** Whether a client that lost the connection can resume this answer (GET + `Last-Event-ID`). */
  readonly resumable: boolean
  /** Sends a message related to the request before its response (switches to SSE). */
  emit (message: unknown): void
  /** Closes the SSE connection (switching to SSE first) without ending the stream. */
  disconnect (retryMs: number): void
  /**
   * Sends the responses and ends the POST: one object when `single`, else an array (a batch);
   * with none (notifications only, or all cancelled) the answer is 202. `headers` (an error's
   * `Retry-After`, `WWW-Authenticate`) are sent only with a single response answered as JSON.
   */
  finish (responses: unknown[], single: boolean, status?: number, headers?: Record<string, string>): void
}

/** One HTTP exchange, as a wire sees it. */
export interface Exchange {
  readonly request: FastifyRequest
  /** The connection, watched for a client that goes away. */
  readonly connection: ServerResponse
  /** The POST's answer channel (made once per POST). */
  channel (options: ChannelOptions): ResponseChannel
  /** Starts an SSE response now (GET and listen streams): the headers are sent at once. */
  stream (options: { keepAlive: number, what?: Record<string, unknown> }): EventSink
  /** Answers with no body. */
  empty (status: number): void
  /**
   * @internal Aborted at the drain deadline of `app.close()` (`drain.ts`): the wire's request
   * aborts follow it. Absent when nothing drains (an exchange served outside the engine).
   */
  readonly shutdown?: RequestAbort
  /**
   * Adds fields to every later log line of this request, Fastify's "request completed" included
   * (e.g. how long it waited for its session's lock).
   */
  bindLog? (bindings: Record<string, unknown>): void
}
