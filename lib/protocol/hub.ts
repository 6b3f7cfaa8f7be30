/**
 * What this process holds for live sessions: handlers in flight (to cancel them), handlers waiting
 * for the client's answer, open SSE streams. Everything that can arrive from elsewhere (an answer,
 * a cancellation, a notification for a GET stream, a session's end) arrives through the bus, so the
 * same code serves one process (memory bus) and many (Redis bus). A process subscribes to a
 * session's channel only while it holds something of that session.
 */
import { randomBytes } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Bus, BusMessage } from '../bus/bus.js'
import type { ServerStream } from '../http/sse.js'

interface Waiter {
  resolve: (msg: Record<string, unknown>) => void
  reject: (err: Error) => void
}

interface SessionEntry {
  inflight: Map<string, AbortController>
  waiters: Map<string, Waiter>
  streams: Map<string, ServerStream>
  getStream: ServerStream | null
  /** Resolves when the bus subscription is active; its value unsubscribes. */
  subscription: Promise<() => Promise<void>>
}

export const sessionChannel = (sid: string): string => `s:${sid}`

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

  #entry (sid: string): SessionEntry {
    let e = this.#sessions.get(sid)
    if (e === undefined) {
      const entry: SessionEntry = {
        inflight: new Map(),
        waiters: new Map(),
        streams: new Map(),
        getStream: null,
        subscription: this.#bus.subscribe(sessionChannel(sid), (m) => this.#onMessage(sid, m))
      }
      entry.subscription.catch((err: unknown) => this.#logger.error({ err, sessionId: sid }, 'bus subscription failed'))
      this.#sessions.set(sid, entry)
      e = entry
    }
    return e
  }

  /** Waits until this process listens to the session's channel (so nothing sent after is missed). */
  async ready (sid: string): Promise<void> {
    await this.#entry(sid).subscription
  }

  #release (sid: string): void {
    const e = this.#sessions.get(sid)
    if (e === undefined) return
    if (e.inflight.size > 0 || e.waiters.size > 0 || e.streams.size > 0 || e.getStream !== null) return
    this.#sessions.delete(sid)
    e.subscription.then(unsub => unsub()).catch((err: unknown) => this.#logger.warn({ err, sessionId: sid }, 'bus unsubscribe failed'))
  }

  /** Registers a running request so a `notifications/cancelled` can abort it. */
  trackRequest (sid: string, requestId: string | number, controller: AbortController): () => void {
    const e = this.#entry(sid)
    const key = String(requestId)
    e.inflight.set(key, controller)
    return () => {
      if (e.inflight.get(key) === controller) e.inflight.delete(key)
      this.#release(sid)
    }
  }

  /** Registers a live POST stream (so a GET + Last-Event-ID can re-attach to it). */
  trackStream (stream: ServerStream): () => void {
    const e = this.#entry(stream.sessionId)
    e.streams.set(stream.id, stream)
    return () => {
      e.streams.delete(stream.id)
      this.#release(stream.sessionId)
    }
  }

  /** A live stream of this process, if any. */
  stream (sid: string, streamId: string): ServerStream | undefined {
    return this.#sessions.get(sid)?.streams.get(streamId)
  }

  /** The session's standalone GET stream on this process. */
  getStream (sid: string): ServerStream | null {
    return this.#sessions.get(sid)?.getStream ?? null
  }

  /** Sets (or clears) the session's standalone GET stream. */
  setGetStream (sid: string, stream: ServerStream | null): void {
    const e = this.#entry(sid)
    if (stream === null) {
      e.getStream = null
      this.#release(sid)
    } else {
      e.getStream = stream
    }
  }

  /** Every session that has a GET stream on this process. */
  * getStreams (): Iterable<ServerStream> {
    for (const e of this.#sessions.values()) if (e.getStream !== null) yield e.getStream
  }

  /** Number of pending client requests of a session on this process. */
  pending (sid: string): number {
    return this.#sessions.get(sid)?.waiters.size ?? 0
  }

  /** Waits for the client's answer to request `id`. The caller handles timeouts and aborts via `cancel`. */
  waitForAnswer (sid: string, id: string): { answer: Promise<Record<string, unknown>>, cancel: (err: Error) => void } {
    const e = this.#entry(sid)
    let waiter!: Waiter
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => { waiter = { resolve, reject } })
    e.waiters.set(id, waiter)
    const done = (): void => {
      if (e.waiters.get(id) === waiter) e.waiters.delete(id)
      this.#release(sid)
    }
    answer.then(done, done)
    return { answer, cancel: (err) => waiter.reject(err) }
  }

  /** Publishes a message on a session's channel (reaches whichever process holds the waiter or stream). */
  async publish (sid: string, message: BusMessage): Promise<void> {
    await this.#bus.publish(sessionChannel(sid), message)
  }

  #onMessage (sid: string, m: BusMessage): void {
    const e = this.#sessions.get(sid)
    if (e === undefined) return
    switch (m.t) {
      case 'answer': {
        const id = String(m.msg.id)
        const w = e.waiters.get(id)
        if (w === undefined) {
          this.#logger.debug({ sessionId: sid, id }, 'answer for an unknown or expired request; dropped')
          return
        }
        w.resolve(m.msg)
        return
      }
      case 'cancel': {
        e.inflight.get(String(m.requestId))?.abort(new Error('cancelled by the client'))
        return
      }
      case 'notify': {
        if (e.getStream !== null) e.getStream.send(m.msg)
        else this.#logger.debug({ sessionId: sid, method: m.msg.method }, 'no GET stream for a session notification; dropped')
        return
      }
      case 'ended': {
        for (const c of e.inflight.values()) c.abort(new Error('session ended'))
        for (const w of e.waiters.values()) w.reject(new Error('session ended'))
        for (const s of e.streams.values()) s.end()
        e.getStream?.end()
        e.getStream = null
        e.streams.clear()
        this.#release(sid)
      }
    }
  }

  /** Ends everything this process holds (server shutdown): streams end with `retry`, waiters are rejected. */
  async close (retryMs: number): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    const unsubs: Array<Promise<unknown>> = []
    for (const [sid, e] of this.#sessions) {
      for (const w of e.waiters.values()) w.reject(new Error('server shutting down'))
      for (const c of e.inflight.values()) c.abort(new Error('server shutting down'))
      for (const s of e.streams.values()) s.end(retryMs)
      e.getStream?.end(retryMs)
      unsubs.push(e.subscription.then(u => u()).catch(() => {}))
      this.#sessions.delete(sid)
    }
    await Promise.all(unsubs)
  }

  /** Sessions this process holds something of (tests check it returns to 0). */
  get size (): number { return this.#sessions.size }
}
