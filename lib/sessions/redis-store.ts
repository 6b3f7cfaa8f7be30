/**
 * `RedisSessionStore`: sessions shared by every instance, one hash per session at
 * `<prefix>{<sid>}:s`. Each session key is a hash field holding its JSON text; the reserved field
 * `\0v` holds the version. Redis keeps the idle TTL (PEXPIRE on create, load and save), so `gc()`
 * has nothing to do.
 *
 * Every operation is one round trip (a Lua script where it reads and writes). A save never
 * re-creates a destroyed session and, given a lease's fence, refuses to overwrite a session whose
 * lease was lost and which someone else has since locked or written (see `SaveGuard`).
 *
 * With a `RedisSessionLock` on the same Redis, the state layer runs take-lock+read and
 * save+release as one script each (`state/pairings/redis-pairing.ts`, using this file's codec): two round
 * trips per locked request instead of four.
 */
import { DEFAULT_KEY_PREFIX, RESERVED_FIELD_PREFIX, assertKeyPrefix, lockKey, sessionKey } from '../redis/keys.js'
import { replicaAckOf, requireReplicaAck } from '../redis/replica-ack.js'
import { defineScripts, type RedisClient, type RedisClientLike } from '../redis/scripts.js'
import { roundTrip } from '../telemetry/index.js'
import { DecodedReplies } from './decoded-replies.js'
import { DEFAULT_SESSION_TTL, checkTtl } from './ttl.js'
import {
  SessionDataError, encodeSessionValue,
  type CreateOptions, type JsonValue, type SaveGuard, type SaveResult, type SessionChanges, type SessionRecord, type SessionStore,
  type SessionStoreOptions
} from './session-store.js'
import { shownId } from '../util/shown-id.js'
import { redisWrite } from '../redis/write-outcome.js'

/** Options of {@link RedisSessionStore}. */
export interface RedisSessionStoreOptions extends SessionStoreOptions {
  /** An ioredis (5 or 6) client (standalone, Sentinel or Cluster). The store never closes it. */
  redis: RedisClientLike
  /**
   * Replicas that must acknowledge each write (a session, handle or task created or saved)
   * before it is reported as kept (Redis `WAIT`; default 0: none). Too few within
   * `waitTimeoutMs` → the write rejects with an `UnconfirmedWriteError` (the client gets a 503).
   * Marks the client: pass the same numbers to a lock sharing it. Not on a Cluster.
   */
  waitReplicas?: number
  /** How long each write waits for the replicas, in ms (default 200). */
  waitTimeoutMs?: number
  /** Key prefix (default `'mcp:'`). */
  prefix?: string
}

/** Sessions in Redis hashes. */
export class RedisSessionStore implements SessionStore {
  readonly ttl: number
  /** Key prefix. */
  readonly prefix: string
  readonly #redis: RedisClient
  /** The sessions read last, decoded (see `decoded-replies.ts`). */
  readonly #decoded = new DecodedReplies()

  constructor (options: RedisSessionStoreOptions) {
    this.ttl = checkTtl(options.ttl ?? DEFAULT_SESSION_TTL)
    if (!Number.isInteger(this.ttl)) throw new RangeError('ttl must be an integer number of milliseconds.')
    const prefix = options.prefix ?? DEFAULT_KEY_PREFIX
    assertKeyPrefix(prefix)
    this.prefix = prefix
    if (typeof options.redis?.defineCommand !== 'function') throw new TypeError('redis must be an ioredis client.')
    this.#redis = defineScripts(requireReplicaAck(options.redis, replicaAckOf(options)))
  }

  /** The ioredis client the store uses (the app's; the default `RedisSessionLock` shares it). */
  get client (): RedisClientLike {
    return this.#redis
  }

  /** @throws {TypeError} for a key starting with NUL (reserved) or a value JSON cannot carry. */
  async create (id: string, data: Record<string, JsonValue>, options: CreateOptions = {}): Promise<void> {
    const ttl = options.ttl === undefined ? this.ttl : checkTtl(options.ttl)
    if (!Number.isInteger(ttl)) throw new RangeError('ttl must be an integer number of milliseconds.')
    const pairs: string[] = []
    for (const key of Object.keys(data)) pairs.push(checkKey(key), encodeSessionValue(key, data[key]))
    // Until its first load or save (which refresh by `ttl`) the record expires by `unusedTtl`.
    const expiry = options.unusedTtl === undefined ? ttl : Math.min(ttl, Math.ceil(checkTtl(options.unusedTtl)))
    const created = await this.#redis.mcpSessionCreate(sessionKey(this.prefix, id), ttl, ttl === this.ttl ? '0' : '1', expiry, ...pairs)
    if (created !== 1) throw new Error(`Session ${shownId(id)} already exists`)
  }

  async load (id: string): Promise<SessionRecord | null> {
    roundTrip()
    const reply = await this.#redis.mcpSessionLoad(sessionKey(this.prefix, id), this.ttl)
    return reply === null ? null : this.decode(id, reply)
  }

  /**
   * A load script's reply from index `at` → the record (see {@link decodeSession}), a session read
   * again unchanged copied rather than parsed.
   * @throws {SessionDataError} when the data cannot be decoded.
   * @internal For the store + lock fast path (`state/pairings/redis-pairing.ts`).
   */
  decode (id: string, reply: string, at = 0): SessionRecord {
    return decodeSession(id, reply, at, this.#decoded)
  }

  /**
   * Writes the changed keys in one script. With `guard.fence` (the lease the request ran under) the
   * save goes through when the lease is still ours, or when nobody holds it and the session is
   * still at `guard.version`; otherwise `'fenced'`.
   */
  async save (id: string, changes: SessionChanges, guard: SaveGuard = {}): Promise<SaveResult> {
    const fence = guard.fence
    const args = saveArguments(this.ttl, changes, fence?.token ?? '', guard.version)
    roundTrip()
    return await redisWrite(this.#redis, () => this.#redis.mcpSessionSave(sessionKey(this.prefix, id), fence?.key ?? lockKey(this.prefix, id), ...args))
  }

  async destroy (id: string): Promise<boolean> {
    this.#decoded.forget(id)
    return await this.#redis.del(sessionKey(this.prefix, id)) === 1
  }

  async exists (id: string): Promise<boolean> {
    roundTrip()
    return await this.#redis.exists(sessionKey(this.prefix, id)) === 1
  }

  /** Redis expires sessions itself: nothing to do. */
  async gc (): Promise<string[]> {
    return []
  }
}

/**
 * ARGV of the save scripts (see `redis/scripts.ts`, FENCED_WRITE): session ttl, fence token
 * ('' = unfenced), version read ('' = none), then the changes. Checks keys and values first.
 * @throws {TypeError} for a reserved key or a value JSON cannot carry.
 */
export function saveArguments (ttl: number, changes: SessionChanges, token: string, version: number | undefined): Array<string | number> {
  const args: Array<string | number> = [ttl, token, version === undefined ? '' : String(version)]
  const set = Object.keys(changes.set)
  args.push(set.length)
  for (const key of set) args.push(checkKey(key), encodeSessionValue(key, changes.set[key]))
  for (const key of changes.delete) args.push(checkKey(key))
  return args
}

function checkKey (key: string): string {
  if (key.startsWith(RESERVED_FIELD_PREFIX)) throw new TypeError('Session keys starting with a NUL character are reserved.')
  return key
}

/**
 * A load script's reply (`SessionReply`: version, number of data fields, the data as one JSON
 * object's text, separated by spaces, from index `at` of `reply`: the take-lock+read script's
 * reply has its status first) → the record. The count guards the one parse: a stored value that
 * is not JSON text fails it, or (spliced into the neighbouring fields) changes the number of keys.
 * With `cache`, a session read again unchanged is copied rather than parsed (`decoded-replies.ts`).
 * @throws {SessionDataError} when the data cannot be decoded.
 */
export function decodeSession (id: string, reply: string, at = 0, cache?: DecodedReplies): SessionRecord {
  const afterVersion = reply.indexOf(' ', at)
  const version = Number(reply.slice(at, afterVersion))
  // Not a reply of these scripts: nothing it says can be trusted.
  if (afterVersion === -1 || !Number.isSafeInteger(version)) throw notJson(id)
  // The count and the data: all that decodeData reads, so what it makes of them is the text's own.
  const body = reply.slice(afterVersion + 1)
  return { data: cache === undefined ? decodeData(id, body) : cache.data(id, body, decodeData), version }
}

/** `<number of fields> <JSON object>` → the data. */
function decodeData (id: string, body: string): Record<string, JsonValue> {
  const afterFields = body.indexOf(' ')
  const fields = Number(body.slice(0, afterFields))
  if (afterFields === -1 || !Number.isSafeInteger(fields)) throw notJson(id)
  let data: Record<string, JsonValue> | undefined
  try {
    // JSON.parse defines own properties: a key named "__proto__" stays a plain key.
    data = JSON.parse(body.slice(afterFields + 1)) as Record<string, JsonValue>
  } catch (err) {
    throw notJson(id, err)
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data) || countKeys(data) !== fields) throw notJson(id)
  return data
}

function notJson (id: string, cause?: unknown): SessionDataError {
  return new SessionDataError(id, `Session ${shownId(id)} holds a value that is not JSON`, cause === undefined ? undefined : { cause })
}

function countKeys (data: object): number {
  let n = 0
  for (const key in data) if (Object.hasOwn(data, key)) n++
  return n
}
