/**
 * `subscriptions/listen` (2026-07-28): an SSE stream on which the server sends the list changes
 * and resource updates a client asked for, each tagged with the subscription id, after an
 * acknowledgement of the honoured subset; on shutdown, the request's final result.
 *
 * Bounded: streams per process (`maxListenStreams`) and per client (`maxListenStreamsPerClient`:
 * per principal, or per remote address without one — an IPv6 one by its /64, as the tool limits
 * count it), so one client cannot take every slot; the
 * resource URIs one stream keeps and echoes (count and length); and, as every SSE stream, a slow
 * reader is disconnected rather than buffered for (`http/sse-writer.ts`).
 */
import type { EventSink } from '../../bus/event-sink.js'
import type { McpPrincipal } from '../../context.js'
import type { ListKind } from '../../features/registry.js'
import { ErrorCode, McpError, type RequestId } from '../../jsonrpc/errors.js'
import { isPlainObject, resultResponse, type JsonRpcRequest } from '../../jsonrpc/messages.js'
import type { Exchange } from '../exchange.js'
import { META_SUB } from './meta.js'

/** Most URIs in `notifications.resourceSubscriptions` of one listen request. */
export const MAX_LISTEN_URIS = 100
/** Longest URI (in characters) in `notifications.resourceSubscriptions`. */
export const MAX_LISTEN_URI_LENGTH = 2048

interface ListenStream {
  id: RequestId
  sink: EventSink
  kinds: Set<ListKind>
  uris: Set<string>
  /** Whose slot it takes (the limiter's `clientKey`). */
  client: string
}

/**
 * Why a `subscriptions/listen` filter is malformed, or `null`: `notifications` is required, an
 * object whose flags are booleans and whose `resourceSubscriptions` is an array of strings
 * (unknown keys are ignored, as in the schema). A stream opened on a filter we misread would
 * stay silent without telling the client why.
 */
function filterProblem (filter: unknown): string | null {
  if (!isPlainObject(filter)) return 'notifications must be an object'
  for (const flag of ['toolsListChanged', 'promptsListChanged', 'resourcesListChanged']) {
    if (filter[flag] !== undefined && typeof filter[flag] !== 'boolean') return `notifications.${flag} must be a boolean`
  }
  const uris = filter.resourceSubscriptions
  if (uris !== undefined && !(Array.isArray(uris) && uris.every(u => typeof u === 'string'))) {
    return 'notifications.resourceSubscriptions must be an array of strings'
  }
  // What a stream keeps for its lifetime, and echoes in its acknowledgement, is bounded.
  if (uris !== undefined && uris.length > MAX_LISTEN_URIS) {
    return `notifications.resourceSubscriptions must have at most ${MAX_LISTEN_URIS} URIs`
  }
  if (uris !== undefined && (uris as string[]).some(u => u.length > MAX_LISTEN_URI_LENGTH)) {
    return `notifications.resourceSubscriptions URIs must be at most ${MAX_LISTEN_URI_LENGTH} characters long`
  }
  return null
}

/** The key a caller is counted under (the limiter's `clientKey`: principal, else address, IPv6 by network). */
export type ClientKey = (principal: McpPrincipal | null, ip: string | undefined) => string

/** The listen streams of this process. */
export class ListenStreams {
  readonly #streams = new Set<ListenStream>()
  /** Open streams per client (its `clientKey`); a client with none has no entry. */
  readonly #perClient = new Map<string, number>()
  readonly #max: number
  readonly #maxPerClient: number
  readonly #keepAlive: number
  readonly #clientKey: ClientKey

  constructor (options: { max: number, maxPerClient: number, keepAlive: number, clientKey: ClientKey }) {
    this.#max = options.max
    this.#maxPerClient = options.maxPerClient
    this.#keepAlive = options.keepAlive
    this.#clientKey = options.clientKey
  }

  /** Number of open listen streams (tests). */
  get size (): number { return this.#streams.size }

  /**
   * Opens a listen stream for `msg` with what the server offers (`caps`) honoured, counted against
   * `principal` (or, without one, the remote address).
   */
  open (exchange: Exchange, msg: JsonRpcRequest, caps: Record<string, unknown>, principal: McpPrincipal | null): void {
    const problem = filterProblem(msg.params?.notifications)
    if (problem !== null) throw new McpError(ErrorCode.InvalidParams, `Invalid params: ${problem}`, undefined, 400)
    if (this.#streams.size >= this.#max) {
      throw new McpError(ErrorCode.ServerError, 'Too many listen streams on this server; retry later', undefined, 429)
    }
    const client = this.#clientKey(principal, exchange.request.ip)
    const mine = this.#perClient.get(client) ?? 0
    if (mine >= this.#maxPerClient) {
      throw new McpError(ErrorCode.ServerError, 'Too many listen streams for this client; close one or retry later', undefined, 429)
    }
    const wanted = msg.params?.notifications as Record<string, unknown>
    const honored: Record<string, unknown> = {}
    const kinds = new Set<ListKind>()
    for (const kind of ['tools', 'prompts', 'resources'] as const) {
      if (wanted[`${kind}ListChanged`] === true && caps[kind] !== undefined) { honored[`${kind}ListChanged`] = true; kinds.add(kind) }
    }
    const uris = new Set<string>()
    if (Array.isArray(wanted.resourceSubscriptions) && caps.resources !== undefined) {
      for (const u of wanted.resourceSubscriptions) uris.add(u as string)
      honored.resourceSubscriptions = [...uris]
    }
    const stream: ListenStream = { id: msg.id, sink: exchange.stream({ keepAlive: this.#keepAlive, what: { listen: msg.id } }), kinds, uris, client }
    this.#streams.add(stream)
    this.#perClient.set(client, mine + 1)
    this.#send(stream, 'notifications/subscriptions/acknowledged', { notifications: honored })
    stream.sink.onClose(() => { this.#forget(stream) })
    exchange.request.log.debug({ kinds: [...kinds], uris: uris.size }, 'listen stream opened')
  }

  /** A stream closed (by the client, as a slow reader, or on shutdown): its slots are free. */
  #forget (stream: ListenStream): void {
    if (!this.#streams.delete(stream)) return
    const left = (this.#perClient.get(stream.client) ?? 1) - 1
    if (left > 0) this.#perClient.set(stream.client, left)
    else this.#perClient.delete(stream.client)
  }

  #send (stream: ListenStream, method: string, params: Record<string, unknown> = {}): void {
    const message = { jsonrpc: '2.0', method, params: { ...params, _meta: { [META_SUB]: stream.id } } }
    stream.sink.event(null, JSON.stringify(message))
  }

  /** A list changed: tell the listen streams that asked for that kind. */
  listChanged (kind: ListKind): void {
    for (const s of this.#streams) if (s.kinds.has(kind)) this.#send(s, `notifications/${kind}/list_changed`)
  }

  /** A resource changed: tell the listen streams subscribed to its URI. */
  resourceUpdated (uri: string): void {
    for (const s of this.#streams) if (s.uris.has(uri)) this.#send(s, 'notifications/resources/updated', { uri })
  }

  /** Server shutdown: each listen stream ends with its final result, and `retry` when given (the client listens elsewhere). */
  close (retryMs?: number): void {
    for (const s of this.#streams) {
      s.sink.event(null, JSON.stringify(resultResponse(s.id, { resultType: 'complete', _meta: { [META_SUB]: s.id } })))
      s.sink.end(retryMs)
    }
    this.#streams.clear()
    this.#perClient.clear()
  }
}
