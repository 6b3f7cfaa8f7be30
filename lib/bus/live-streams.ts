/**
 * The streams one instance wrote to a shared event log and that still live there, as far as this
 * instance can tell without asking the server: a stream counts from its last write until its TTL
 * runs out or its session is dropped. Summed over the instances, that is the shared log's size,
 * give or take the streams that went earlier with their session (their keys' TTL is capped by the
 * session's). It feeds the `fastify_mcp.event_log.streams` gauge; counting keys on the server
 * instead would cost a scan of the keyspace.
 *
 * Bounded: an entry lives at most one TTL (expired ones are pruned at most every quarter TTL, on
 * a write or a read), so it holds no more entries than the log has streams from this instance.
 */
export class LiveStreams {
  readonly #ttl: number
  /** Session → stream → when it expires (ms). */
  readonly #sessions = new Map<string, Map<string, number>>()
  #count = 0
  #lastPrune = 0

  constructor (ttlMs: number) {
    this.#ttl = ttlMs
  }

  /** A write to `streamId` was kept: it lives one TTL from now. */
  wrote (sessionId: string, streamId: string, now = Date.now()): void {
    let streams = this.#sessions.get(sessionId)
    if (streams === undefined) { streams = new Map(); this.#sessions.set(sessionId, streams) }
    if (!streams.has(streamId)) this.#count++
    streams.set(streamId, now + this.#ttl)
    this.#maybePrune(now)
  }

  /** The session ended: its streams are gone. */
  dropped (sessionId: string): void {
    const streams = this.#sessions.get(sessionId)
    if (streams === undefined) return
    this.#count -= streams.size
    this.#sessions.delete(sessionId)
  }

  /** Entries held, expired ones not yet pruned included (what this tally costs in memory). */
  get held (): number { return this.#count }

  /** The streams alive now. */
  size (now = Date.now()): number {
    this.#maybePrune(now)
    return this.#count
  }

  #maybePrune (now: number): void {
    if (now - this.#lastPrune < this.#ttl / 4) return
    this.#lastPrune = now
    for (const [sid, streams] of this.#sessions) {
      for (const [id, until] of streams) {
        if (until <= now) { streams.delete(id); this.#count-- }
      }
      if (streams.size === 0) this.#sessions.delete(sid)
    }
  }
}
