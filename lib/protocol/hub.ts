/**
 * What this process holds for live sessions: handlers in flight (to cancel them), handlers waiting
 * for the client's answer, the session's GET stream, followers of resumed streams. Everything that
 * can arrive from elsewhere (an answer, a cancellation, a notification for a GET stream, an event
 * of a stream running on another instance, the session's end) arrives through the bus, so the same
 * code serves one process (memory bus) and many (Redis bus). A process subscribes to a session's
 * channel only while it holds something of that session.
 */
import { randomBytes } from 'node:crypto'
import type { ServerResponse } from 'node:http'
import type { FastifyBaseLogger } from 'fastify'
import type { Bus, BusMessage } from '../bus/bus.js'
import { parseEventId } from '../bus/event-log.js'
import { frame, writeTo, type ServerStream } from '../http/sse.js'

interface Waiter {
  resolve: (msg: Record<string, unknown>) => void
  reject: (err: Error) => void
}

/** A connection following a stream that is written elsewhere (after a resume). */
interface Follower {
  streamId: string
  conn: ServerResponse
  /** Sequence number of the last event written to this connection. */
  seq: number
  /** Live events that arrived while the replay was being read. */
  buffer: Array<{ id: string, data: string }> | null
  ended: boolean
}

// An entry is made for every request of a session without one: besides `inflight`, its
// collections are made when first needed (most requests never wait for the client or follow).
interface SessionEntry {
  inflight: Map<string, Abortable>
  waiters: Map<string, Waiter> | null
  followers: Set<Follower> | null
  getStream: ServerStream | null
  /** Resource URIs the session subscribed to (known while it has a GET stream here). */
  subscriptions: ReadonlySet<string>
  /**
   * Resolves when the bus subscription is active; its value unsubscribes. `null` while only short
   * requests are in flight: subscribing per request would cost two bus round trips each.
   */
  subscription: Promise<() => Promise<void>> | null
  /** The subscription failed (bus down): the next `ready()` subscribes again. */
  failed: boolean
  /** Requests in flight at the last sweep (see `#subscribeLongRunning`), while unsubscribed. */
  seen: Set<Abortable> | null
}

/** What a cancellation aborts. */
interface Abortable { abort: (reason: unknown) => void }

/** Shared empty sets of entries that hold none (never added to: replaced when set). */
const NO_URIS: ReadonlySet<string> = new Set()
const NO_FOLLOWERS: ReadonlySet<Follower> = new Set()

export const sessionChannel = (sid: string): string => `s:${sid}`

/** Milliseconds a request runs (10–20) before this process subscribes to its session's channel. */
const SUBSCRIBE_AFTER = 10

/** @internal */
export class Hub {
  #bus: Bus
  #logger: FastifyBaseLogger
  #sessions = new Map<string, SessionEntry>()
  #prefix = randomBytes(4).toString('hex')
  #counter = 0
  #closed = false

  constructor (bus: Bus, logger: FastifyBaseLogger) {
    this.#bus = bus
    this.#logger = logger
  }

  /** A request id for a server→client request, unique across processes. */
  nextClientRequestId (): string {
    return `srv-${this.#prefix}-${++this.#counter}`
  }

  #entry (sid: string, subscribe = true): SessionEntry {
    let e = this.#sessions.get(sid)
    if (e === undefined) {
      e = {
        inflight: new Map(),
        waiters: null,
        followers: null,
        getStream: null,
        subscriptions: NO_URIS,
        subscription: null,
        failed: false,
        seen: null
      }
      this.#sessions.set(sid, e)
    }
    if (subscribe && e.subscription === null) this.#subscribe(sid, e)
    return e
  }

  /** Subscribes the entry to the session's channel (again, after a failed attempt). */
  #subscribe (sid: string, entry: SessionEntry): void {
    const subscription = this.#bus.subscribe(sessionChannel(sid), (m) => this.#onMessage(sid, m))
    entry.subscription = subscription
    entry.failed = false
    subscription.catch((err: unknown) => {
      this.#logger.error({ err, sessionId: sid }, 'bus subscription failed')
      // A failed subscription is not kept: the next ready() subscribes again.
      if (entry.subscription === subscription) entry.failed = true
    })
  }

  /** Waits until this process listens to the session's channel (so nothing sent after is missed). */
  async ready (sid: string): Promise<void> {
    await this.#subscribed(sid, this.#entry(sid))
  }

  /** Awaits the entry's subscription, re-subscribing after a failure; on failure drops what holds nothing. */
  async #subscribed (sid: string, e: SessionEntry): Promise<void> {
    if (e.failed || e.subscription === null) this.#subscribe(sid, e)
    try {
      await e.subscription
    } catch (err) {
      this.#release(sid)
      throw err
    }
  }

  #release (sid: string): void {
    const e = this.#sessions.get(sid)
    if (e === undefined) return
    if (e.inflight.size > 0 || (e.waiters?.size ?? 0) > 0 || (e.followers?.size ?? 0) > 0 || e.getStream !== null) return
    this.#sessions.delete(sid)
    if (e.failed || e.subscription === null) return
    e.subscription.then(unsub => unsub()).catch((err: unknown) => this.#logger.warn({ err, sessionId: sid }, 'bus unsubscribe failed'))
  }

  /** Registers a running request so a `notifications/cancelled` can abort it. */
  trackRequest (sid: string, requestId: string | number, controller: Abortable): () => void {
    const e = this.#entry(sid, false)
    const key = String(requestId)
    e.inflight.set(key, controller)
    // A cancel from another instance can only reach a request that runs long enough to be
    // cancelled: its session is subscribed once it has run for a moment (local cancels are
    // delivered directly). One timer checks them all, rather than a timer per request.
    if (e.subscription === null) {
      this.#unsubscribed.add(sid)
      if (this.#sweeper === null) {
        this.#sweeper = setInterval(() => { this.#subscribeLongRunning() }, SUBSCRIBE_AFTER)
        this.#sweeper.unref()
      }
    }
    return () => {
      if (e.inflight.get(key) === controller) e.inflight.delete(key)
      this.#release(sid)
    }
  }

  /** Sessions with requests in flight and no subscription, checked every SUBSCRIBE_AFTER ms. */
  #unsubscribed = new Set<string>()
  #sweeper: NodeJS.Timeout | null = null

  /** Subscribes the sessions of requests seen in flight at two sweeps in a row. */
  #subscribeLongRunning (): void {
    for (const sid of this.#unsubscribed) {
      const e = this.#sessions.get(sid)
      if (e === undefined || e.subscription !== null || e.inflight.size === 0) {
        this.#unsubscribed.delete(sid)
        if (e !== undefined) e.seen = null
        continue
      }
      const now = new Set(e.inflight.values())
      if (e.seen !== null && [...e.seen].some(c => now.has(c))) {
        this.#unsubscribed.delete(sid)
        e.seen = null
        this.#subscribe(sid, e)
      } else {
        e.seen = now
      }
    }
    if (this.#unsubscribed.size === 0 && this.#sweeper !== null) {
      clearInterval(this.#sweeper)
      this.#sweeper = null
    }
  }

  /** The session's standalone GET stream on this process. */
  getStream (sid: string): ServerStream | null {
    return this.#sessions.get(sid)?.getStream ?? null
  }

  /**
   * Registers a new GET stream of the session and tells the other instances, so that a GET stream
   * they hold for the session steps down: each message for the session reaches one stream.
   */
  async claimGetStream (sid: string, stream: ServerStream, subscriptions: string[], retryMs: number): Promise<void> {
    const old = this.getStream(sid)
    if (old !== null && old !== stream) old.disconnect(retryMs)
    this.setGetStream(sid, stream, subscriptions)
    this.#retryMs = retryMs
    // A claim names this registration (a resumed GET stream keeps its stream id, so the id alone
    // cannot tell the new holder from the old one).
    const claim = `${this.#prefix}-${++this.#counter}`
    this.#claims.set(sid, claim)
    await this.publish(sid, { t: 'getStream', sid, claim })
  }

  #retryMs = 1000
  /** The claim of each GET stream this process holds. */
  #claims = new Map<string, string>()

  /** Sets (or clears) the session's standalone GET stream, with the session's subscriptions. */
  setGetStream (sid: string, stream: ServerStream | null, subscriptions: string[] = []): void {
    const e = this.#entry(sid)
    if (stream === null) {
      e.getStream = null
      e.subscriptions = NO_URIS
      this.#claims.delete(sid)
      this.#release(sid)
    } else {
      e.getStream = stream
      e.subscriptions = new Set(subscriptions)
    }
  }

  /** Sends a broadcast to every GET stream of this process. */
  broadcast (msg: Record<string, unknown>): void {
    for (const e of this.#sessions.values()) e.getStream?.send(msg)
  }

  /** Sends `notifications/resources/updated` to this process's GET streams of subscribed sessions. */
  resourceUpdated (uri: string): void {
    const msg = { jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri } }
    for (const e of this.#sessions.values()) if (e.getStream !== null && e.subscriptions.has(uri)) e.getStream.send(msg)
  }

  /** Requests in flight plus open streams of a session on this process. */
  streams (sid: string): number {
    const e = this.#sessions.get(sid)
    return e === undefined ? 0 : e.inflight.size + (e.followers?.size ?? 0) + (e.getStream !== null ? 1 : 0)
  }

  /** Number of pending client requests of a session on this process. */
  pending (sid: string): number {
    return this.#sessions.get(sid)?.waiters?.size ?? 0
  }

  /**
   * Waits for the client's answer to request `id`. The answer arrives by the bus; where the bus
   * can keep it (Redis), the kept copy is checked too, so a missed publish (a reconnect) does not
   * lose it. The caller handles timeouts and aborts via `cancel`.
   */
  waitForAnswer (sid: string, id: string): { answer: Promise<Record<string, unknown>>, cancel: (err: Error) => void } {
    const e = this.#entry(sid)
    let waiter!: Waiter
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => { waiter = { resolve, reject } })
    ;(e.waiters ??= new Map()).set(id, waiter)
    let poll: NodeJS.Timeout | null = null
    const take = this.#bus.take?.bind(this.#bus)
    if (take !== undefined) {
      poll = setInterval(() => {
        take(sid, id).then((text) => {
          if (text !== null) waiter.resolve(JSON.parse(text) as Record<string, unknown>)
        }, () => {})
      }, 1000)
      poll.unref()
    }
    const done = (): void => {
      if (poll !== null) clearInterval(poll)
      if (e.waiters?.get(id) === waiter) e.waiters.delete(id)
      this.#release(sid)
    }
    answer.then(done, done)
    return { answer, cancel: (err) => waiter.reject(err) }
  }

  /** Delivers a client's answer: kept first (where the bus can), then published. */
  async deliverAnswer (sid: string, msg: Record<string, unknown>, ttl: number): Promise<void> {
    if (this.#bus.keep !== undefined && (typeof msg.id === 'string' || typeof msg.id === 'number')) {
      await this.#bus.keep(sid, String(msg.id), JSON.stringify(msg), ttl)
    }
    await this.#bus.publish(sessionChannel(sid), { t: 'answer', sid, msg })
  }

  /**
   * Follows a stream written elsewhere on `conn`, from event `lastEventId` on. Subscribes before
   * the caller reads the replay, and buffers live events meanwhile; `start` writes the replay,
   * then the buffer (skipping what the replay had), then live events until the stream ends.
   */
  async follow (sid: string, lastEventId: string, conn: ServerResponse): Promise<{ start: (events: Array<{ id: string, data: string }>, finished: boolean) => void, cancel: () => void }> {
    const parsed = parseEventId(lastEventId)
    const e = this.#entry(sid)
    const f: Follower = { streamId: parsed?.streamId ?? '', conn, seq: parsed?.seq ?? 0, buffer: [], ended: false }
    ;(e.followers ??= new Set()).add(f)
    try {
      await this.#subscribed(sid, e)
    } catch (err) {
      e.followers?.delete(f)
      this.#release(sid)
      throw err
    }
    const stop = (): void => {
      if (e.followers?.delete(f) !== true) return
      f.ended = true
      this.#release(sid)
    }
    conn.on('close', stop)
    return {
      start: (events, finished) => {
        const buffered = f.buffer ?? []
        f.buffer = null
        for (const ev of [...events, ...buffered]) this.#writeFollower(f, ev.id, ev.data)
        if (finished) { conn.end(); stop() }
      },
      cancel: stop
    }
  }

  #writeFollower (f: Follower, id: string, data: string): void {
    const seq = parseEventId(id)?.seq ?? 0
    if (seq <= f.seq || f.ended) return
    f.seq = seq
    if (!writeTo(f.conn, frame(id, data), this.#logger, { streamId: f.streamId })) f.ended = true
  }

  /** Publishes a message on a session's channel (reaches whichever process holds the waiter or stream). */
  async publish (sid: string, message: BusMessage): Promise<void> {
    await this.#bus.publish(sessionChannel(sid), message)
    // A session held here without a subscription (short requests only) gets it directly.
    if (this.#sessions.get(sid)?.subscription === null) this.#onMessage(sid, message)
  }

  #onMessage (sid: string, m: BusMessage): void {
    const e = this.#sessions.get(sid)
    if (e === undefined) return
    switch (m.t) {
      case 'answer': {
        const id = String(m.msg.id)
        const w = e.waiters?.get(id)
        if (w === undefined) {
          this.#logger.debug({ sessionId: sid, id }, 'answer for an unknown or expired request; dropped')
          return
        }
        w.resolve(m.msg)
        // The answer arrived: drop the kept copy (it would expire anyway).
        this.#bus.take?.(sid, id).catch(() => {})
        return
      }
      case 'cancel':
        e.inflight.get(String(m.requestId))?.abort(new Error('cancelled by the client'))
        return
      case 'notify':
        if (e.getStream !== null) e.getStream.send(m.msg)
        return
      case 'subs':
        if (e.getStream !== null) e.subscriptions = new Set(m.uris)
        return
      case 'getStream':
        // Another GET stream of this session opened (here or elsewhere): this one steps down.
        // (Claims of this process are settled in claimGetStream; only other processes' count here.)
        if (e.getStream !== null && !m.claim.startsWith(`${this.#prefix}-`) && this.#claims.get(sid) !== m.claim) {
          const old = e.getStream
          e.getStream = null
          e.subscriptions = NO_URIS
          this.#claims.delete(sid)
          old.disconnect(this.#retryMs)
          this.#release(sid)
        }
        return
      case 'event':
        for (const f of e.followers ?? NO_FOLLOWERS) {
          if (f.streamId !== m.streamId) continue
          if (f.buffer !== null) f.buffer.push({ id: m.id, data: m.data })
          else this.#writeFollower(f, m.id, m.data)
        }
        return
      case 'streamEnd':
        for (const f of [...e.followers ?? NO_FOLLOWERS]) {
          if (f.streamId !== m.streamId || f.buffer !== null) continue
          f.conn.end()
          e.followers?.delete(f)
        }
        this.#release(sid)
        return
      case 'ended': {
        for (const c of e.inflight.values()) c.abort(new Error('session ended'))
        for (const w of e.waiters?.values() ?? []) w.reject(new Error('session ended'))
        for (const f of e.followers ?? NO_FOLLOWERS) f.conn.end()
        e.followers?.clear()
        e.getStream?.end()
        e.getStream = null
        this.#release(sid)
      }
    }
  }

  /** Ends everything this process holds (server shutdown): streams end with `retry`, waiters are rejected. */
  async close (retryMs: number): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#sweeper !== null) clearInterval(this.#sweeper)
    this.#sweeper = null
    this.#unsubscribed.clear()
    const unsubs: Array<Promise<unknown>> = []
    for (const [sid, e] of this.#sessions) {
      for (const w of e.waiters?.values() ?? []) w.reject(new Error('server shutting down'))
      for (const c of e.inflight.values()) c.abort(new Error('server shutting down'))
      for (const f of e.followers ?? NO_FOLLOWERS) { writeTo(f.conn, `retry: ${retryMs}\n\n`, this.#logger, {}); f.conn.end() }
      e.getStream?.end(retryMs)
      if (e.subscription !== null) unsubs.push(e.subscription.then(u => u()).catch(() => {}))
      this.#sessions.delete(sid)
    }
    await Promise.all(unsubs)
  }

  /** Sessions this process holds something of (tests check it returns to 0). */
  get size (): number { return this.#sessions.size }
}
