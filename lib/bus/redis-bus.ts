/**
 * The Redis bus: pub/sub on a dedicated subscriber connection (a subscribed connection can do
 * nothing else), subscribed to a channel only while something in this process listens to it.
 * On Redis Cluster it uses sharded pub/sub (SPUBLISH/SSUBSCRIBE), so a session's channel lives on
 * the shard of the session's hash tag instead of being broadcast to every node.
 *
 * Pub/sub is a wake-up, never the only copy: what must not be lost is stored before it is
 * published (answers, events), and ioredis re-subscribes after a reconnect.
 *
 * Answers: `expect` sets `<prefix>{<sid>}:exp:<id>` (PX = how long the handler may wait) before
 * the request goes to the client; `keep` claims that key and stores the answer at
 * `<prefix>{<sid>}:ans:<id>` in one script, or stores nothing when the answer was not expected;
 * `forget` deletes both once the handler is done. So Redis holds an answer only while a handler
 * can still want it, whatever the client sends.
 */
import type { Bus, BusListener, BusMessage } from './bus.js'
import { settleWithin } from '../util/settle.js'

/**
 * Claims an expected answer and keeps it, atomically. Returns 0 when nobody expected it (nothing
 * stored); when kept, 1, or the tag the expectation was set with (the waiting side's trace
 * context). The answer is kept no longer than the expectation had left.
 *   KEYS[1] expectation             KEYS[2] kept answer
 *   ARGV[1] the answer (JSON)       ARGV[2] ttl (ms)
 */
const KEEP_EXPECTED = `
local tag = redis.call('GET', KEYS[1])
if not tag then return 0 end
local left = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
local ttl = tonumber(ARGV[2])
if left > 0 and left < ttl then ttl = left end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)
if tag == '1' then return 1 end
return tag
`

/**
 * What the bus calls on a Redis client (structural: an ioredis 5 or 6 client or Cluster, whichever
 * copy of ioredis made it). A Cluster is told apart by `isCluster`, not `instanceof`.
 */
export interface RedisPubSubClient {
  readonly isCluster: boolean
  set (key: string, value: string, px: 'PX', milliseconds: number): Promise<unknown>
  getdel (key: string): Promise<string | null>
  publish (channel: string, message: string): Promise<unknown>
  spublish (channel: string, message: string): Promise<unknown>
  subscribe (...channels: string[]): Promise<unknown>
  unsubscribe (...channels: string[]): Promise<unknown>
  ssubscribe (...channels: string[]): Promise<unknown>
  sunsubscribe (...channels: string[]): Promise<unknown>
  duplicate (...overrides: any[]): RedisPubSubClient
  on (event: string, listener: (...args: any[]) => void): unknown
  quit (): Promise<unknown>
  disconnect (): void
  del (...keys: string[]): Promise<number>
  defineCommand (name: string, definition: { lua: string, numberOfKeys?: number }): void
}

/** The script {@link RedisBus} defines on the publishing client. */
interface AnswerScript {
  mcpAnswerKeep (expected: string, kept: string, value: string, ttl: number): Promise<0 | 1 | string>
}

export interface RedisBusOptions {
  /** Publishing client (ioredis 5 or 6: standalone, Sentinel or Cluster). Never closed by the bus. */
  redis: RedisPubSubClient
  /** Channel prefix (default `'mcp:'`). */
  prefix?: string
  /** Logger for dropped or malformed messages. */
  log?: { warn (obj: object, msg: string): void }
}

/** How long close() waits for the subscriber's QUIT (ms). */
const CLOSE_TIMEOUT = 1000

/** Bus over Redis pub/sub (see module doc). */
export class RedisBus implements Bus {
  readonly prefix: string
  readonly #pub: RedisPubSubClient
  readonly #sub: RedisPubSubClient
  readonly #sharded: boolean
  readonly #listeners = new Map<string, Set<BusListener>>()
  /** Pending SUBSCRIBE/UNSUBSCRIBE per channel, so a quick unsubscribe+subscribe keeps order. */
  readonly #pending = new Map<string, Promise<unknown>>()
  readonly #log: RedisBusOptions['log']
  #closed = false

  constructor (options: RedisBusOptions) {
    this.#pub = options.redis
    this.prefix = options.prefix ?? 'mcp:'
    this.#log = options.log
    this.#sharded = options.redis.isCluster === true
    const scripted = options.redis as RedisPubSubClient & Partial<AnswerScript>
    if (typeof scripted.mcpAnswerKeep !== 'function') {
      scripted.defineCommand('mcpAnswerKeep', { numberOfKeys: 2, lua: KEEP_EXPECTED })
    }
    // The subscriber is ours: created here, closed in close(). It keeps an offline queue and has
    // no command timeout even when the publishing client is fail-fast (LOCK_CLIENT_OPTIONS): a
    // SUBSCRIBE sent before the new connection is up (at start-up, on a busy machine) must wait for
    // it, not fail. It still fails in a real outage, once the client gives up reconnecting
    // (after its maxRetriesPerRequest).
    this.#sub = this.#sharded
      ? options.redis.duplicate(undefined, { shardedSubscribers: true, enableOfflineQueue: true, redisOptions: { commandTimeout: undefined } })
      : options.redis.duplicate({ enableOfflineQueue: true, commandTimeout: undefined })
    const onMessage = (channel: string, text: string): void => { this.#dispatch(channel, text) }
    this.#sub.on(this.#sharded ? 'smessage' : 'message', onMessage)
    // Errors are reported through commands; an 'error' listener keeps ioredis from printing them.
    this.#sub.on('error', () => {})
  }

  #dispatch (channel: string, text: string): void {
    const set = this.#listeners.get(channel)
    if (set === undefined) return
    let message: BusMessage
    try {
      message = JSON.parse(text) as BusMessage
    } catch (err) {
      this.#log?.warn({ err, channel }, 'malformed bus message dropped')
      return
    }
    for (const l of set) {
      try { l(message) } catch (err) { this.#log?.warn({ err, channel }, 'bus listener failed') }
    }
  }

  /**
   * The Redis channel of a bus channel. A session channel (`s:<sid>`) carries the session's hash
   * tag so that it shares the session's Cluster slot.
   */
  channelName (channel: string): string {
    return channel.startsWith('s:') ? `${this.prefix}{${channel.slice(2)}}:c` : `${this.prefix}${channel}`
  }

  async publish (channel: string, message: BusMessage): Promise<void> {
    const name = this.channelName(channel)
    const text = JSON.stringify(message)
    if (this.#sharded) await this.#pub.spublish(name, text)
    else await this.#pub.publish(name, text)
  }

  async subscribe (channel: string, listener: BusListener): Promise<() => Promise<void>> {
    if (this.#closed) throw new Error('bus closed')
    const name = this.channelName(channel)
    let set = this.#listeners.get(name)
    const fresh = set === undefined
    if (set === undefined) {
      set = new Set()
      this.#listeners.set(name, set)
    }
    set.add(listener)
    try {
      if (fresh) await this.#queue(name, () => this.#sharded ? this.#sub.ssubscribe(name) : this.#sub.subscribe(name))
      else await this.#pending.get(name)
    } catch (err) {
      // Not subscribed (Redis down): forget the listener, so that the next subscribe to this
      // channel sends SUBSCRIBE again instead of trusting one that never happened.
      set.delete(listener)
      if (set.size === 0 && this.#listeners.get(name) === set) this.#listeners.delete(name)
      throw err
    }
    let done = false
    return async () => {
      if (done) return
      done = true
      const current = this.#listeners.get(name)
      if (current === undefined) return
      current.delete(listener)
      if (current.size > 0) return
      this.#listeners.delete(name)
      if (this.#closed) return
      await this.#queue(name, () => this.#sharded ? this.#sub.sunsubscribe(name) : this.#sub.unsubscribe(name))
        .catch(() => {})
    }
  }

  #queue (name: string, op: () => Promise<unknown>): Promise<unknown> {
    const prev = this.#pending.get(name) ?? Promise.resolve()
    const next = prev.catch(() => {}).then(op)
    this.#pending.set(name, next)
    const clear = (): void => { if (this.#pending.get(name) === next) this.#pending.delete(name) }
    next.then(clear, clear)
    return next
  }

  #expectedKey (sid: string, key: string): string { return `${this.prefix}{${sid}}:exp:${key}` }
  #keptKey (sid: string, key: string): string { return `${this.prefix}{${sid}}:ans:${key}` }

  async expect (sid: string, key: string, ttl: number, tag?: string): Promise<void> {
    // The value is the tag ('1' without one: what instances before tags set, read as no tag).
    await this.#pub.set(this.#expectedKey(sid, key), tag === undefined || tag === '' ? '1' : tag, 'PX', Math.max(1, Math.ceil(ttl)))
  }

  async keep (sid: string, key: string, value: string, ttl: number): Promise<boolean | string> {
    const kept = await (this.#pub as RedisPubSubClient & AnswerScript).mcpAnswerKeep(this.#expectedKey(sid, key), this.#keptKey(sid, key), value, Math.max(1, Math.floor(ttl)))
    return typeof kept === 'string' ? kept : kept === 1
  }

  async take (sid: string, key: string): Promise<string | null> {
    return await this.#pub.getdel(this.#keptKey(sid, key))
  }

  async forget (sid: string, key: string): Promise<void> {
    // Both keys share the session's hash tag: one slot, one command on Cluster too.
    await this.#pub.del(this.#expectedKey(sid, key), this.#keptKey(sid, key))
  }

  /** Channels subscribed by this process (tests check it returns to 0). */
  get channels (): number { return this.#listeners.size }

  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#listeners.clear()
    const sub = this.#sub
    await settleWithin(sub.quit(), CLOSE_TIMEOUT, { keepAlive: false })
    sub.disconnect()
  }
}
