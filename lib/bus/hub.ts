/**
 * What this process holds for live sessions, one job each: requests in flight (to cancel them),
 * handlers waiting for the client's answer, the sessions' GET streams, followers of resumed
 * streams; and the session channels they listen on. Everything that can arrive from elsewhere
 * arrives through the bus, so the same code serves one process (memory bus) and many (Redis bus).
 */
import { PendingAnswers, type PendingAnswersOptions } from './answers.js'
import type { Bus } from './bus.js'
import { StreamFollowers } from './followers.js'
import { GetStreams } from './get-streams.js'
import { InflightRequests } from './inflight.js'
import { SessionTopics, type TopicLogger } from './session-topics.js'

/** @internal The stream hub (see the module doc). */
export class Hub {
  readonly topics: SessionTopics
  readonly inflight: InflightRequests
  readonly answers: PendingAnswers
  readonly getStreams: GetStreams
  readonly followers: StreamFollowers
  #closed = false

  /** `options.clientRequestTimeoutMs`: how long handlers wait for the client's answers (ms; see `PendingAnswersOptions`). */
  constructor (bus: Bus, logger: TopicLogger, options: PendingAnswersOptions = {}) {
    this.topics = new SessionTopics(bus, logger)
    this.inflight = new InflightRequests(this.topics)
    this.answers = new PendingAnswers(bus, this.topics, logger, options)
    this.getStreams = new GetStreams(this.topics)
    this.followers = new StreamFollowers(this.topics)
  }

  /** Requests in flight plus open streams of a session on this process (what `maxStreamsPerSession` caps). */
  streams (sid: string): number {
    return this.inflight.count(sid) + this.followers.count(sid) + (this.getStreams.get(sid) !== null ? 1 : 0)
  }

  /** Sessions this process holds something of (0 when idle). */
  get size (): number { return this.topics.size }

  /** Ends everything (server shutdown): streams end with `retry`, waiters are rejected, requests aborted. */
  async close (retryMs: number): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.answers.close()
    this.inflight.close()
    this.followers.close(retryMs)
    this.getStreams.close(retryMs)
    await this.topics.close()
  }
}
