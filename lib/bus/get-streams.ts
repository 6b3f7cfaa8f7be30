/**
 * The sessions' standalone GET streams held by this process. One GET stream per session across
 * instances: a new one claims the session on its channel and any other one, here or elsewhere,
 * steps down (its connection is told to `retry`), so each message for the session reaches one
 * stream. Notifications for a session, its resource subscriptions and broadcasts reach the stream
 * wherever it is.
 */
import { randomBytes } from 'node:crypto'
import type { BusMessage } from './bus.js'
import type { ServerStream } from './server-stream.js'
import type { SessionJob, SessionTopics } from './session-topics.js'

interface Held {
  stream: ServerStream
  /** Resource URIs the session subscribed to. */
  subscriptions: ReadonlySet<string>
  /** The claim this registration published (names it among the session's GET streams). */
  claim: string | null
}

/** The GET streams of this process (see the module doc). */
export class GetStreams implements SessionJob {
  readonly #topics: SessionTopics
  readonly #held = new Map<string, Held>()
  readonly #prefix = randomBytes(4).toString('hex')
  #counter = 0
  #retryMs = 1000

  constructor (topics: SessionTopics) {
    this.#topics = topics
    topics.add(this)
  }

  holds (sid: string): boolean { return this.#held.has(sid) }

  /** GET streams held by this process. */
  get size (): number { return this.#held.size }

  /** The session's GET stream on this process. */
  get (sid: string): ServerStream | null {
    return this.#held.get(sid)?.stream ?? null
  }

  /**
   * Registers a new GET stream of the session and tells the other instances, so that a GET stream
   * they hold for the session steps down. The caller has awaited `topics.ready(sid)`.
   */
  async claim (sid: string, stream: ServerStream, subscriptions: string[], retryMs: number): Promise<void> {
    const old = this.get(sid)
    if (old !== null && old !== stream) old.disconnect(retryMs)
    this.#retryMs = retryMs
    // A claim names this registration (a resumed GET stream keeps its stream id, so the id alone
    // cannot tell the new holder from the old one).
    const claim = `${this.#prefix}-${++this.#counter}`
    this.#held.set(sid, { stream, subscriptions: new Set(subscriptions), claim })
    this.#topics.hold(sid)
    await this.#topics.publish(sid, { t: 'getStream', sid, claim })
  }

  /** Forgets the stream when it is still the session's (its connection went away). */
  drop (sid: string, stream: ServerStream): void {
    if (this.#held.get(sid)?.stream !== stream) return
    this.#held.delete(sid)
    this.#topics.release(sid)
  }

  /** Sends a broadcast to every GET stream of this process. */
  broadcast (msg: Record<string, unknown>): void {
    for (const h of this.#held.values()) h.stream.send(msg)
  }

  /** Sends `notifications/resources/updated` to the GET streams of subscribed sessions. */
  resourceUpdated (uri: string): void {
    const msg = { jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri } }
    for (const h of this.#held.values()) if (h.subscriptions.has(uri)) h.stream.send(msg)
  }

  onMessage (sid: string, m: BusMessage): void {
    const held = this.#held.get(sid)
    if (held === undefined) return
    switch (m.t) {
      case 'notify':
        held.stream.send(m.msg)
        return
      case 'subs':
        held.subscriptions = new Set(m.uris)
        return
      case 'getStream':
        // Another GET stream of this session opened elsewhere: this one steps down. (This
        // process's own claims are settled in claim().)
        if (!m.claim.startsWith(`${this.#prefix}-`) && held.claim !== m.claim) {
          this.#held.delete(sid)
          held.stream.disconnect(this.#retryMs)
        }
        return
      case 'ended':
        this.#held.delete(sid)
        held.stream.end()
    }
  }

  /** Ends every GET stream with `retry` (server shutdown): the clients come back elsewhere. */
  close (retryMs: number): void {
    for (const h of this.#held.values()) h.stream.end(retryMs)
    this.#held.clear()
  }
}
