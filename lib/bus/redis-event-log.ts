/**
 * The event log on Redis Streams, for resuming SSE streams on any instance. One stream key per
 * SSE stream, under the session's hash tag (`<prefix>{<sid>}:ev:<streamId>`), so a replay for one
 * session can only ever read that session's streams. Events are numbered by Redis itself
 * (`XADD … 0-*`: ms part 0, sequence auto-incremented), bounded by length (`MAXLEN`) and age
 * (the key's TTL, refreshed on every append). Needs Redis ≥ 7.0.
 *
 * An ended session leaves nothing behind, and a writer still running after the end (a handler
 * that had not heard of it, a GET stream ending on another instance) must not create its keys
 * again. Each write is therefore one script that checks, in the same step, that the session may
 * still write:
 * - with `sessionKey` (the plugin sets it when the sessions live in a `RedisSessionStore` with the
 *   same prefix): the session's hash must exist. No key is added for the end, and a stream never
 *   outlives the session: its TTL is capped by what the session's hash has left;
 * - without: `dropSession` leaves a mark `<prefix>{<sid>}:evx` for `ttl` ms that refuses writes.
 */
import { parseEventId, type EventLog, type EventLogOptions, type Replay } from './event-log.js'
import { LiveStreams } from './live-streams.js'

/** What the event log calls on a Redis client (structural: an ioredis 5 or 6 client or Cluster). */
export interface RedisStreamsClient {
  defineCommand (name: string, definition: { lua: string, numberOfKeys?: number }): void
  xrange (key: string, start: string, end: string): Promise<Array<[id: string, fields: string[]]>>
}

/** The client once the log's scripts are defined on it. */
interface ScriptedClient extends RedisStreamsClient {
  mcpEventWrite (stream: string, set: string, guard: string, field: string, data: string, maxLen: number, ttl: number, streamId: string, mode: GuardMode): Promise<string | null>
  mcpEventEnd (set: string, mark: string, streamPrefix: string, ttl: number, mode: GuardMode): Promise<number>
}

/** `s`: the guard key is the session's hash (must exist); `m`: it is the end mark (must not). */
type GuardMode = 's' | 'm'

// Writes an event unless the session ended (returns nil then, and writes nothing).
// KEYS[1] stream, KEYS[2] the session's set of stream ids, KEYS[3] the guard key (see GuardMode)
// ARGV[1] field ('start' marker, 'd' data, 'end' marker), ARGV[2] data, ARGV[3] max length,
// ARGV[4] ttl ms, ARGV[5] stream id, ARGV[6] guard mode
const WRITE = `
local ttl = tonumber(ARGV[4])
if ARGV[6] == 's' then
  local left = redis.call('PTTL', KEYS[3])
  if left == -2 then return false end
  if left > 0 and left < ttl then ttl = left end
elseif redis.call('EXISTS', KEYS[3]) == 1 then
  return false
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[3], '0-*', ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('SADD', KEYS[2], ARGV[5])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
return id
`

// The session ended: deletes its streams and their set; in mode 'm' leaves the end mark.
// KEYS[1] the session's set of stream ids, KEYS[2] the end mark
// ARGV[1] key prefix of the session's streams, ARGV[2] ttl ms, ARGV[3] guard mode
const END = `
local ids = redis.call('SMEMBERS', KEYS[1])
for _, id in ipairs(ids) do redis.call('DEL', ARGV[1] .. id) end
redis.call('DEL', KEYS[1])
if ARGV[3] == 'm' then redis.call('SET', KEYS[2], '1', 'PX', ARGV[2]) end
return #ids
`

export interface RedisEventLogOptions extends EventLogOptions {
  /** ioredis (5 or 6) client (standalone, Sentinel or Cluster); never closed by the log. */
  redis: RedisStreamsClient
  /** Key prefix (default `'mcp:'`). */
  prefix?: string
  /**
   * The key of a session's hash, whose existence means the session may still write (a
   * `RedisSessionStore` on the same Redis: `<prefix>{<sid>}:s`). It must carry the session's hash
   * tag. Without it, an ended session is remembered by a mark kept `ttl` ms (see the module doc).
   */
  sessionKey?: (sessionId: string) => string
}

/** Event log in Redis Streams (see module doc). */
export class RedisEventLog implements EventLog {
  readonly #redis: ScriptedClient
  readonly #prefix: string
  readonly #maxEvents: number
  readonly #ttl: number
  readonly #sessionKey: ((sessionId: string) => string) | undefined
  /** What a write is checked against: the session's hash (`s`) or an end mark (`m`). */
  readonly #mode: GuardMode
  readonly #live: LiveStreams

  constructor (options: RedisEventLogOptions) {
    this.#redis = options.redis as ScriptedClient
    this.#prefix = options.prefix ?? 'mcp:'
    if (this.#prefix.includes('{') || this.#prefix.includes('}')) throw new TypeError('prefix must not contain "{" or "}".')
    this.#maxEvents = options.maxEvents ?? 1000
    this.#ttl = options.ttl ?? 300_000
    this.#sessionKey = options.sessionKey
    this.#mode = options.sessionKey === undefined ? 'm' : 's'
    this.#live = new LiveStreams(this.#ttl)
    if (typeof this.#redis.mcpEventWrite !== 'function') {
      this.#redis.defineCommand('mcpEventWrite', { numberOfKeys: 3, lua: WRITE })
      this.#redis.defineCommand('mcpEventEnd', { numberOfKeys: 2, lua: END })
    }
  }

  /** Streams this instance wrote that still live in Redis, as far as it can tell ({@link LiveStreams}). */
  get size (): number { return this.#live.size() }

  #streamKey (sid: string, streamId: string): string { return `${this.#prefix}{${sid}}:ev:${streamId}` }
  #setKey (sid: string): string { return `${this.#prefix}{${sid}}:evs` }
  #markKey (sid: string): string { return `${this.#prefix}{${sid}}:evx` }

  async #add (sessionId: string, streamId: string, field: string, data: string): Promise<string | null> {
    const guard = this.#sessionKey?.(sessionId) ?? this.#markKey(sessionId)
    const id = await this.#redis.mcpEventWrite(this.#streamKey(sessionId, streamId), this.#setKey(sessionId), guard, field, data,
      this.#maxEvents, this.#ttl, streamId, this.#mode)
    if (id === null) return null
    this.#live.wrote(sessionId, streamId)
    return `${streamId}_${id.slice(id.indexOf('-') + 1)}`
  }

  async open (sessionId: string, streamId: string): Promise<string | null> {
    return await this.#add(sessionId, streamId, 'start', '')
  }

  async append (sessionId: string, streamId: string, data: string): Promise<string | null> {
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
    await this.#redis.mcpEventEnd(this.#setKey(sessionId), this.#markKey(sessionId), `${this.#prefix}{${sessionId}}:ev:`,
      this.#ttl, this.#mode)
    this.#live.dropped(sessionId)
  }
}
