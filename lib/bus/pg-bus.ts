/**
 * The PostgreSQL bus: LISTEN/NOTIFY on one connection of the pool held for listening, LISTENing
 * to a channel only while something in this process listens to it. After the connection is lost
 * (the database restarted) it connects again with backoff and LISTENs again to every channel.
 *
 * NOTIFY is a wake-up, never the only copy: what must not be lost is stored before it is
 * published (answers in `<prefix>answers`, events in the event log). A message too large for a
 * NOTIFY payload (8,000 bytes) is stored in `<prefix>bus_messages` and the notification carries
 * its id; messages of one channel are delivered in publish order all the same.
 *
 * Channel names: a bus channel (`s:<sid>`, `broadcast`, …) is hashed into an identifier of the
 * prefix (`<prefix>c<20 hex digits>`; PostgreSQL cuts identifiers at 63 bytes), and the payload
 * names the channel, so that a hash collision cannot deliver a message to the wrong listener.
 *
 * Answers: `expect` inserts a row `(sid, key)` with the tag and an expiry; `keep` sets its value
 * only where none is set and the row has not expired (one statement: the first answer claims it);
 * `take` deletes a kept row and returns its value; `forget` deletes the row.
 */
import { createHash } from 'node:crypto'
import type { PgClientLike, PgPoolLike } from '../postgres/pool.js'
import { DEFAULT_PG_PREFIX, checkPgPrefix, ensureSchema } from '../postgres/schema.js'
import { settleWithin } from '../util/settle.js'
import type { Bus, BusListener, BusMessage } from './bus.js'

/** Options of {@link PgBus}. */
export interface PgBusOptions {
  /** A pg Pool: one of its connections is held for LISTEN while the bus is open. Never ended by the bus. */
  pool: PgPoolLike
  /** Table-name and channel prefix (default `'mcp_'`). */
  prefix?: string
  /** Logger for dropped or malformed messages and a lost listening connection. */
  log?: { warn (obj: object, msg: string): void }
}

/** Largest payload sent inline (bytes); PostgreSQL refuses 8,000 and more. */
const INLINE_MAX = 7900
/** Reconnect backoff of the listening connection (ms). */
const RECONNECT_MIN = 100
const RECONNECT_MAX = 5000

/** Bus over PostgreSQL LISTEN/NOTIFY (see the module doc). */
export class PgBus implements Bus {
  readonly prefix: string
  readonly #pool: PgPoolLike
  readonly #log: PgBusOptions['log']
  /** Listeners by PostgreSQL channel: the bus channel they listen to and the listeners. */
  readonly #listeners = new Map<string, { channel: string, set: Set<BusListener> }>()
  #client: PgClientLike | null = null
  #connecting: Promise<PgClientLike> | null = null
  #reconnectDelay = RECONNECT_MIN
  #reconnectTimer: NodeJS.Timeout | null = null
  /** Notifications waiting behind the fetch of a large one (delivery stays in order). */
  #queue: Promise<void> = Promise.resolve()
  #fetching = 0
  #schemaReady = false
  #closed = false

  constructor (options: PgBusOptions) {
    this.#pool = options.pool
    this.prefix = checkPgPrefix(options.prefix ?? DEFAULT_PG_PREFIX)
    this.#log = options.log
  }

  /** The PostgreSQL channel of a bus channel (see the module doc). */
  channelName (channel: string): string {
    return `${this.prefix}c${createHash('sha256').update(channel).digest('hex').slice(0, 20)}`
  }

  async #query (text: string, values: unknown[]): Promise<Array<Record<string, unknown>>> {
    if (!this.#schemaReady) {
      await ensureSchema(this.#pool, this.prefix)
      this.#schemaReady = true
    }
    return (await this.#pool.query({ text, values })).rows
  }

  async publish (channel: string, message: BusMessage): Promise<void> {
    const body = `${channel}\n${JSON.stringify(message)}`
    const name = this.channelName(channel)
    if (Buffer.byteLength(body) <= INLINE_MAX) {
      await this.#query('SELECT pg_notify($1, $2)', [name, `i${body}`])
      return
    }
    const p = this.prefix
    await this.#query(`WITH old AS (DELETE FROM ${p}bus_messages WHERE at < clock_timestamp() - interval '5 minutes'),
      stored AS (INSERT INTO ${p}bus_messages (body) VALUES ($2) RETURNING id)
      SELECT pg_notify($1, 'r' || id) FROM stored`, [name, body])
  }

  async subscribe (channel: string, listener: BusListener): Promise<() => Promise<void>> {
    if (this.#closed) throw new Error('bus closed')
    const name = this.channelName(channel)
    let entry = this.#listeners.get(name)
    const fresh = entry === undefined
    if (entry === undefined) {
      entry = { channel, set: new Set() }
      this.#listeners.set(name, entry)
    }
    entry.set.add(listener)
    try {
      const client = await this.#connect()
      if (fresh) await client.query(`LISTEN ${name}`)
    } catch (err) {
      // Not listening: forget the listener, so that the next subscribe LISTENs again.
      entry.set.delete(listener)
      if (entry.set.size === 0 && this.#listeners.get(name) === entry) this.#listeners.delete(name)
      throw err
    }
    let done = false
    return async () => {
      if (done) return
      done = true
      const current = this.#listeners.get(name)
      if (current === undefined) return
      current.set.delete(listener)
      if (current.set.size > 0) return
      this.#listeners.delete(name)
      if (this.#closed) return
      await this.#client?.query(`UNLISTEN ${name}`).catch(() => {})
    }
  }

  /** The listening connection, made (or made again) on demand. */
  #connect (): Promise<PgClientLike> {
    if (this.#client !== null) return Promise.resolve(this.#client)
    if (this.#connecting !== null) return this.#connecting
    const connecting = (async () => {
      if (!this.#schemaReady) {
        await ensureSchema(this.#pool, this.prefix)
        this.#schemaReady = true
      }
      const client = await this.#pool.connect()
      if (this.#closed) { client.release(true); throw new Error('bus closed') }
      const onNotification = (n: { channel: string, payload?: string }): void => { this.#receive(n.channel, n.payload ?? '') }
      const onLost = (err?: unknown): void => {
        client.removeListener('notification', onNotification)
        client.removeListener('error', onLost)
        client.removeListener('end', onLost)
        if (this.#client !== client) return
        this.#client = null
        client.release(true)
        if (this.#closed) return
        this.#log?.warn({ err }, 'bus: the listening connection to PostgreSQL was lost; connecting again')
        this.#scheduleReconnect()
      }
      client.on('notification', onNotification)
      client.on('error', onLost)
      client.on('end', onLost)
      // LISTEN again to what this process listens to (after a lost connection).
      for (const name of this.#listeners.keys()) await client.query(`LISTEN ${name}`)
      this.#client = client
      this.#reconnectDelay = RECONNECT_MIN
      return client
    })()
    this.#connecting = connecting
    const clear = (): void => { if (this.#connecting === connecting) this.#connecting = null }
    connecting.then(clear, clear)
    return connecting
  }

  #scheduleReconnect (): void {
    if (this.#reconnectTimer !== null || this.#closed || this.#listeners.size === 0) return
    const wait = this.#reconnectDelay
    this.#reconnectDelay = Math.min(RECONNECT_MAX, wait * 2)
    this.#reconnectTimer = setTimeout(() => {
      this.#reconnectTimer = null
      this.#connect().catch(() => { this.#scheduleReconnect() })
    }, wait)
    this.#reconnectTimer.unref()
  }

  #receive (name: string, payload: string): void {
    if (payload.startsWith('i') && this.#fetching === 0) {
      this.#dispatch(name, payload.slice(1))
      return
    }
    if (payload.startsWith('r')) this.#fetching++
    this.#queue = this.#queue.then(async () => {
      if (payload.startsWith('i')) { this.#dispatch(name, payload.slice(1)); return }
      try {
        const rows = await this.#query(`SELECT body FROM ${this.prefix}bus_messages WHERE id = $1`, [payload.slice(1)])
        if (rows[0] !== undefined) this.#dispatch(name, rows[0].body as string)
      } catch (err) {
        this.#log?.warn({ err }, 'bus: a large message could not be read; dropped')
      } finally {
        this.#fetching--
      }
    })
  }

  #dispatch (name: string, body: string): void {
    const entry = this.#listeners.get(name)
    if (entry === undefined) return
    const cut = body.indexOf('\n')
    if (cut === -1 || body.slice(0, cut) !== entry.channel) return // another channel's hash
    let message: BusMessage
    try {
      message = JSON.parse(body.slice(cut + 1)) as BusMessage
    } catch (err) {
      this.#log?.warn({ err }, 'malformed bus message dropped')
      return
    }
    for (const l of entry.set) {
      try { l(message) } catch (err) { this.#log?.warn({ err }, 'bus listener failed') }
    }
  }

  async expect (sid: string, key: string, ttl: number, tag?: string): Promise<void> {
    const p = this.prefix
    await this.#query(`INSERT INTO ${p}answers (sid, key, tag, value, expires_at)
      VALUES ($1, $2, $3, NULL, clock_timestamp() + $4::float8 * interval '1 millisecond')
      ON CONFLICT (sid, key) DO UPDATE SET tag = excluded.tag, value = NULL, expires_at = excluded.expires_at`,
    [sid, key, tag === undefined || tag === '' ? null : tag, Math.max(1, Math.ceil(ttl))])
  }

  async keep (sid: string, key: string, value: string, ttl: number): Promise<boolean | string> {
    const rows = await this.#query(`UPDATE ${this.prefix}answers
      SET value = $3, expires_at = least(expires_at, clock_timestamp() + $4::float8 * interval '1 millisecond')
      WHERE sid = $1 AND key = $2 AND value IS NULL AND expires_at > clock_timestamp() RETURNING tag`,
    [sid, key, value, Math.max(1, Math.floor(ttl))])
    if (rows.length === 0) return false
    const tag = rows[0]?.tag
    return typeof tag === 'string' ? tag : true
  }

  async take (sid: string, key: string): Promise<string | null> {
    const rows = await this.#query(`DELETE FROM ${this.prefix}answers
      WHERE sid = $1 AND key = $2 AND value IS NOT NULL RETURNING value, expires_at > clock_timestamp() AS live`, [sid, key])
    return rows[0]?.live === true ? rows[0].value as string : null
  }

  async forget (sid: string, key: string): Promise<void> {
    await this.#query(`DELETE FROM ${this.prefix}answers WHERE sid = $1 AND key = $2 OR expires_at < clock_timestamp() - interval '1 minute'`, [sid, key])
  }

  /** Channels listened to by this process (tests check it returns to 0). */
  get channels (): number { return this.#listeners.size }

  /** Whether the listening connection is up (tests). */
  get listening (): boolean { return this.#client !== null }

  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#listeners.clear()
    if (this.#reconnectTimer !== null) clearTimeout(this.#reconnectTimer)
    await settleWithin(this.#connecting?.catch(() => {}) ?? Promise.resolve(), 1000, { keepAlive: false })
    const client = this.#client
    this.#client = null
    if (client !== null) {
      await settleWithin(client.query('UNLISTEN *').catch(() => {}), 1000, { keepAlive: false })
      client.release()
    }
  }
}
