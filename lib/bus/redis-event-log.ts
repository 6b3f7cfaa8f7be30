/**
 * The event log on Redis Streams, for resuming SSE streams on any instance. One stream key per
 * SSE stream, under the session's hash tag (`<prefix>{<sid>}:ev:<streamId>`), so a replay for one
 * session can only ever read that session's streams. Events are numbered by Redis itself
 * (`XADD … 0-*`: ms part 0, sequence auto-incremented), bounded by length (`MAXLEN`) and age
 * (the key's TTL, refreshed on every append). Needs Redis ≥ 7.0.
 */
import { parseEventId, type EventLog, type EventLogOptions, type Replay } from './event-log.js'

/** What the event log calls on a Redis client (structural: an ioredis 5 or 6 client or Cluster). */
export interface RedisStreamsClient {
  defineCommand (name: string, definition: { lua: string, numberOfKeys?: number }): void
  xrange (key: string, start: string, end: string): Promise<Array<[id: string, fields: string[]]>>
}

/** The client once the log's scripts are defined on it. */
interface ScriptedClient extends RedisStreamsClient {
  mcpEventAppend (stream: string, set: string, field: string, data: string, maxLen: number, ttl: number, streamId: string): Promise<string>
  mcpEventDrop (set: string, streamPrefix: string): Promise<number>
}

// KEYS[1] stream, KEYS[2] the session's set of stream ids
// ARGV[1] field ('start' marker, 'd' data, 'end' marker), ARGV[2] data, ARGV[3] max length,
// ARGV[4] ttl ms, ARGV[5] stream id
const APPEND = `
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[3], '0-*', ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SADD', KEYS[2], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return id
`

// KEYS[1] the session's set of stream ids; ARGV[1] key prefix of the session's streams
const DROP = `
local ids = redis.call('SMEMBERS', KEYS[1])
for _, id in ipairs(ids) do redis.call('DEL', ARGV[1] .. id) end
redis.call('DEL', KEYS[1])
return #ids
`

export interface RedisEventLogOptions extends EventLogOptions {
  /** ioredis (5 or 6) client (standalone, Sentinel or Cluster); never closed by the log. */
  redis: RedisStreamsClient
  /** Key prefix (default `'mcp:'`). */
  prefix?: string
}

/** Event log in Redis Streams (see module doc). */
export class RedisEventLog implements EventLog {
  readonly #redis: ScriptedClient
  readonly #prefix: string
  readonly #maxEvents: number
  readonly #ttl: number

  constructor (options: RedisEventLogOptions) {
    this.#redis = options.redis as ScriptedClient
    this.#prefix = options.prefix ?? 'mcp:'
    if (this.#prefix.includes('{') || this.#prefix.includes('}')) throw new TypeError('prefix must not contain "{" or "}".')
    this.#maxEvents = options.maxEvents ?? 1000
    this.#ttl = options.ttl ?? 300_000
    if (typeof this.#redis.mcpEventAppend !== 'function') {
      this.#redis.defineCommand('mcpEventAppend', { numberOfKeys: 2, lua: APPEND })
      this.#redis.defineCommand('mcpEventDrop', { numberOfKeys: 1, lua: DROP })
    }
  }

  #streamKey (sid: string, streamId: string): string { return `${this.#prefix}{${sid}}:ev:${streamId}` }
  #setKey (sid: string): string { return `${this.#prefix}{${sid}}:evs` }

  async #add (sessionId: string, streamId: string, field: string, data: string): Promise<string> {
    const id = await this.#redis.mcpEventAppend(this.#streamKey(sessionId, streamId), this.#setKey(sessionId), field, data,
      this.#maxEvents, this.#ttl, streamId)
    return `${streamId}_${id.slice(id.indexOf('-') + 1)}`
  }

  async open (sessionId: string, streamId: string): Promise<string> {
    return await this.#add(sessionId, streamId, 'start', '')
  }

  async append (sessionId: string, streamId: string, data: string): Promise<string> {
    return await this.#add(sessionId, streamId, 'd', data)
  }

  async finish (sessionId: string, streamId: string): Promise<void> {
    await this.#add(sessionId, streamId, 'end', '')
  }

  async replay (sessionId: string, lastEventId: string): Promise<Replay | null> {
    const parsed = parseEventId(lastEventId)
    if (parsed === null) return null
    const key = this.#streamKey(sessionId, parsed.streamId)
    // Exclusive start after the last seen event; the stream key is the session's own.
    // Inclusive of the last seen event: its presence proves the stream (and the id) exist.
    const entries = await this.#redis.xrange(key, `0-${parsed.seq}`, '+')
    if (entries.length === 0 || entries[0][0] !== `0-${parsed.seq}`) return null
    const events: Replay['events'] = []
    let finished = false
    for (const [id, fields] of entries.slice(1)) {
      if (fields[0] === 'end') { finished = true; continue }
      if (fields[0] !== 'd') continue
      events.push({ id: `${parsed.streamId}_${id.slice(id.indexOf('-') + 1)}`, data: fields[1] })
    }
    return { streamId: parsed.streamId, events, finished }
  }

  async dropSession (sessionId: string): Promise<void> {
    await this.#redis.mcpEventDrop(this.#setKey(sessionId), `${this.#prefix}{${sessionId}}:ev:`)
  }
}
