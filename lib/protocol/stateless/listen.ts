/**
 * `subscriptions/listen` (2026-07-28): an SSE stream on which the server sends the list changes
 * and resource updates a client asked for, each tagged with the subscription id, after an
 * acknowledgement of the honoured subset; on shutdown, the request's final result.
 *
 * Bounded: streams per process (`listen.max`) and per client (`listen.maxPerClient`:
 * per principal, or per remote address without one — an IPv6 one by its /64, as the tool limits
 * count it), so one client cannot take every slot; the
 * resource URIs one stream keeps and echoes (count and length); and, as every SSE stream, a slow
 * reader is disconnected rather than buffered for (`http/sse-writer.ts`).
 *
 * A full process keeps room for the clients holding fewest: a client that opens a stream while
 * another holds at least two more than it does takes the place of that client's oldest stream
 * (which ends with its final result, as on shutdown); only once no client holds that many more
 * is it refused. So many clients with a few streams each (100 addresses × 10 fill the
 * default 1,000) cannot shut out one that holds none.
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
  /** Opened n-th in this process: the oldest stream of a client has the lowest. */
  seq: number
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
  /** Open streams per client (its `clientKey`), oldest first; a client with none has no entry. */
  readonly #perClient = new Map<string, Set<ListenStream>>()
  #opened = 0
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
    const client = this.#clientKey(principal, exchange.request.ip)
    const mine = this.#perClient.get(client)?.size ?? 0
    if (mine >= this.#maxPerClient) {
      throw new McpError(ErrorCode.ServerError, 'Too many listen streams for this client; close one or retry later', undefined, 429)
    }
    if (this.#streams.size >= this.#max) {
      const displaced = this.#displaceable(mine)
      if (displaced === null) throw new McpError(ErrorCode.ServerError, 'Too many listen streams on this server; retry later', undefined, 429)
      this.#end(displaced)
      exchange.request.log.debug({ held: mine }, 'listen stream of the client holding the most ended for a client holding fewer')
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
    const stream: ListenStream = { id: msg.id, sink: exchange.stream({ keepAlive: this.#keepAlive, what: { listen: msg.id } }), kinds, uris, client, seq: this.#opened++ }
    this.#streams.add(stream)
    let streams = this.#perClient.get(client)
    if (streams === undefined) this.#perClient.set(client, streams = new Set())
    streams.add(stream)
    this.#send(stream, 'notifications/subscriptions/acknowledged', { notifications: honored })
    stream.sink.onClose(() => { this.#forget(stream) })
    exchange.request.log.debug({ kinds: [...kinds], uris: uris.size }, 'listen stream opened')
  }

  /** A stream closed (by the client, as a slow reader, or on shutdown): its slots are free. */
  #forget (stream: ListenStream): void {
    if (!this.#streams.delete(stream)) return
    const streams = this.#perClient.get(stream.client)
    streams?.delete(stream)
    if (streams?.size === 0) this.#perClient.delete(stream.client)
  }

  /**
   * The stream a client holding `mine` may take the place of in a full process: the oldest of the
   * client holding the most (the oldest such stream among equals), if it holds at least two more
   * than `mine` (after the move it still holds no fewer); else `null`. A walk over the clients,
   * made only when the process is full (at most `listen.max` of them).
   */
  #displaceable (mine: number): ListenStream | null {
    let most: Set<ListenStream> | null = null
    let oldest: ListenStream | null = null
    for (const streams of this.#perClient.values()) {
      const first = streams.values().next().value as ListenStream
      if (most === null || streams.size > most.size || (streams.size === most.size && first.seq < (oldest as ListenStream).seq)) {
        most = streams
        oldest = first
      }
    }
    return most !== null && most.size >= mine + 2 ? oldest : null
  }

  /** Ends `stream` with its final result (`retry` when given), forgotten at once. */
  #end (stream: ListenStream, retryMs?: number): void {
    this.#forget(stream)
    stream.sink.event(null, JSON.stringify(resultResponse(stream.id, { resultType: 'complete', _meta: { [META_SUB]: stream.id } })))
    stream.sink.end(retryMs)
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
    for (const s of [...this.#streams]) this.#end(s, retryMs)
    this.#streams.clear()
    this.#perClient.clear()
  }
}
