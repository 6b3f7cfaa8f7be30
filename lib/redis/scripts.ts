/**
 * Lua scripts of the Redis session store and lock, added once per client by `defineScripts`: on a
 * standalone or Sentinel client each is sent as a plain EVALSHA (`eval.ts`: EVAL the first time on a
 * connection and after NOSCRIPT, from a SCRIPT FLUSH or a restart); on a Cluster through ioredis'
 * `defineCommand`, which does the same per node.
 *
 * Every script receives all the keys it touches in KEYS, and the keys of one call always share the
 * session's hash tag (see `keys.ts`), so the scripts run unchanged on Redis Cluster.
 *
 * Session hash layout: one field per session key holding the value's JSON text, plus the reserved
 * field `\0v` (NUL, "v") with the version, bumped by every save, and `\0t` with an idle TTL of the
 * record's own when it has one (state handles of a kind with another lifetime); every script that
 * refreshes the TTL prefers it to the store's.
 */
import { LuaScript, ScriptRunner, type EvalClient } from './eval.js'
import { evalshaSender, type EvalshaClient } from './evalsha-command.js'
import { confirmed, replicaAckFor, sendWait, type ReplicaAck } from './replica-ack.js'
/**
 * The Redis client an app hands to the plugin (store, lock, `redis` option): what the plugin calls
 * on it, as a structural type, so that a client of ioredis 5 or 6, standalone, Sentinel or
 * Cluster, type-checks whichever copy of ioredis the app has (the plugin's declarations import
 * nothing from ioredis). `isCluster` is how a Cluster is told apart, not `instanceof`: the app's
 * ioredis need not be the copy the plugin would load.
 */
export interface RedisClientLike {
  /** `true` on an ioredis Cluster. */
  readonly isCluster: boolean
  /** ioredis' connection status (`'ready'` when connected, `'end'` once closed). */
  readonly status: string
  /** The options the client was made with. */
  readonly options: object
  defineCommand (name: string, definition: { lua: string, numberOfKeys?: number, readOnly?: boolean }): void
  set (key: string, value: string, px: 'PX', milliseconds: number, nx: 'NX'): Promise<'OK' | null>
  set (key: string, value: string, px: 'PX', milliseconds: number): Promise<unknown>
  getdel (key: string): Promise<string | null>
  del (...keys: string[]): Promise<number>
  exists (...keys: string[]): Promise<number>
  zrem (key: string, ...members: string[]): Promise<number>
  xrange (key: string, start: string, end: string): Promise<Array<[id: string, fields: string[]]>>
  publish (channel: string, message: string): Promise<unknown>
  spublish (channel: string, message: string): Promise<unknown>
  subscribe (...channels: string[]): Promise<unknown>
  unsubscribe (...channels: string[]): Promise<unknown>
  ssubscribe (...channels: string[]): Promise<unknown>
  sunsubscribe (...channels: string[]): Promise<unknown>
  /** A new connection with the same options (ioredis `duplicate()`, on a client or a Cluster). */
  duplicate (...overrides: any[]): RedisClientLike
  on (event: string, listener: (...args: any[]) => void): unknown
  once (event: string, listener: (...args: any[]) => void): unknown
  off (event: string, listener: (...args: any[]) => void): unknown
  quit (): Promise<unknown>
  disconnect (reconnect?: boolean): void
}

/**
 * Connection options of a client the plugin creates (ioredis `RedisOptions`; the plugin passes them
 * through): an object literal, or an ioredis `RedisOptions` value.
 */
export type RedisConnectionOptions =
  | { readonly [option: string]: unknown }
  | { host?: string, port?: number, path?: string, username?: string, password?: string, db?: number }

/** The scripts {@link defineScripts} adds to a client. */
export interface McpScripts {
  mcpSessionCreate (session: string, ttl: number, own: '0' | '1', expiry: number, ...pairs: string[]): Promise<0 | 1>
  mcpSessionLoad (session: string, ttl: number): Promise<SessionReply | null>
  mcpSessionSave (session: string, lock: string, ...args: Array<string | number>): Promise<'ok' | 'gone' | 'fenced'>
  mcpLockRelease (lock: string, token: string): Promise<0 | 1>
  mcpLockExtend (lock: string, token: string, ttl: number): Promise<0 | 1>
  mcpAcquireAndLoad (lock: string, session: string, token: string, lockTtl: number, sessionTtl: number):
  Promise<'2' | '0' | `1 ${SessionReply}`>
  mcpSaveAndRelease (session: string, lock: string, ...args: Array<string | number>): Promise<'ok' | 'gone' | 'fenced'>
  /** `numberOfKeys`, then the keys and arguments of SAVE_AND_RELEASE_MANY. */
  mcpSaveAndReleaseMany (numberOfKeys: number, ...keysAndArgs: Array<string | number>): Promise<string>
}

/**
 * A session as the load scripts return it (see SESSION_DOCUMENT), one text: its version, a space,
 * the number of its data fields, a space, and those fields as the text of one JSON object.
 */
export type SessionReply = `${number} ${number} ${string}`

/** A client with the plugin's scripts defined (what {@link defineScripts} returns). */
export type RedisClient = RedisClientLike & McpScripts

/**
 * Lua helpers of every save: `check` is the fenced check of one record, `write` its write.
 *   check(key, holder, token, version): the record's meta (HMGET of the version and the record's
 *     own ttl) and 'ok', 'gone' or 'fenced'. `holder` is the lease's current token (or false),
 *     `token` the fence ('' = unfenced save), `version` the version read ('' = none). One HMGET
 *     reads the version and the ttl (a record always has a version; EXISTS only for a hash that
 *     lost it).
 *   write(key, meta, first, last, upto, ttl): ARGV[first .. last] are field, JSON pairs to set,
 *     ARGV[last + 1 .. upto] fields to delete; the fields and the new version go in HSETs, the
 *     deletions in HDELs (in slices: Lua's unpack has a stack limit), then the TTL is refreshed
 *     (the record's own, else `ttl`).
 */
const SAVE_HELPERS = `
local function check (key, holder, token, version)
  local meta = redis.call('HMGET', key, '\\0v', '\\0t')
  if not meta[1] and redis.call('EXISTS', key) == 0 then return meta, 'gone' end
  -- the lease is not ours: write only if nobody holds it and nobody wrote since our read
  if token ~= '' and holder ~= token and (holder or version == '' or meta[1] ~= version) then return meta, 'fenced' end
  return meta, 'ok'
end
local function write (key, meta, first, last, upto, ttl)
  local version = tostring((tonumber(meta[1]) or 0) + 1)
  repeat
    local to = math.min(first + 399, last)
    if first > to then
      redis.call('HSET', key, '\\0v', version)
    else
      redis.call('HSET', key, '\\0v', version, unpack(ARGV, first, to))
    end
    first = to + 1
  until first > last
  for i = last + 1, upto, 400 do
    redis.call('HDEL', key, unpack(ARGV, i, math.min(i + 399, upto)))
  end
  redis.call('PEXPIRE', key, meta[2] or ttl)
end
`

/**
 * Writes a save: a fenced check, then the changed fields. Shared by `mcpSessionSave` and
 * `mcpSaveAndRelease`; it expects `holder` (the lease's current token, or false) in scope and
 * sets `result`.
 *   KEYS[1] session hash            KEYS[2] lock key of the session
 *   ARGV[1] session ttl (ms)        ARGV[2] fence token ('' = unfenced save)
 *   ARGV[3] version read ('' = none) ARGV[4] n = number of fields to set
 *   ARGV[5 .. 4+2n] field, JSON pairs to set; ARGV[5+2n ..] fields to delete
 */
const FENCED_WRITE = `${SAVE_HELPERS}
local meta, result = check(KEYS[1], holder, ARGV[2], ARGV[3])
if result == 'ok' then write(KEYS[1], meta, 5, 4 + 2 * tonumber(ARGV[4]), #ARGV, ARGV[1]) end
`

/**
 * Lua: a session's flat HGETALL reply → the record's own ttl (or false), and one text: `head`, the
 * version, the number of data fields and the data as the text of one JSON object, separated by
 * spaces (a SessionReply after `head`). Every field name is quoted and every value (JSON text
 * already) put in as it is: one string to decode in the plugin (one JSON.parse), and one bulk
 * string to read off the socket, not an array (ioredis 6's reply decoder makes several
 * private-method calls per element, each a WeakMap lookup: an array of four costs it about three
 * times one string; docs/performance.md).
 * Reserved fields (NUL first) are not data.
 */
const SESSION_DOCUMENT = `
local byte, find, encode, concat = string.byte, string.find, cjson.encode, table.concat
local function document (h, head)
  -- pieces joined once by table.concat: a string per concatenation cost Redis more than the reply
  local parts, p, n, version, ttl = {}, 0, 0, 0, false
  for i = 1, #h, 2 do
    local f = h[i]
    if byte(f, 1) == 0 then
      if f == '\\0v' then version = tonumber(h[i + 1]) or 0 elseif f == '\\0t' then ttl = h[i + 1] end
    else
      n = n + 1
      if find(f, '[%c"\\\\]') then
        parts[p + 1] = ','; parts[p + 2] = encode(f); parts[p + 3] = ':'
      else
        parts[p + 1] = ',"'; parts[p + 2] = f; parts[p + 3] = '":'
      end
      parts[p + 4] = h[i + 1]
      p = p + 4
    end
  end
  -- %d: an integer as digits (tostring would give a float's exponent form past 1e14)
  if p == 0 then return ttl, string.format('%s%d 0 {}', head, version) end
  parts[1] = string.format('%s%d %d %s', head, version, n, parts[1] == ',' and '{' or '{"')
  parts[p + 1] = '}'
  return ttl, concat(parts)
end
`

/**
 * Creates a session unless it exists. Returns 1 when created, 0 when the id is taken.
 *   KEYS[1] session hash
 *   ARGV[1] ttl (ms); ARGV[2] '1' when the ttl is the record's own (kept in \0t), else '0';
 *   ARGV[3] the first expiry (ms): the ttl, or a shorter one until the first load or save (which
 *   refresh by the ttl); ARGV[4 ..] field, JSON pairs
 */
export const SESSION_CREATE = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], '\\0v', '0')
if ARGV[2] == '1' then redis.call('HSET', KEYS[1], '\\0t', ARGV[1]) end
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`

/**
 * Reads a session and refreshes its TTL. Returns its SessionReply (see SESSION_DOCUMENT), or nil
 * when missing.
 *   KEYS[1] session hash
 *   ARGV[1] session ttl (ms)
 */
export const SESSION_LOAD = `${SESSION_DOCUMENT}
local h = redis.call('HGETALL', KEYS[1])
if #h == 0 then return false end
local ttl, doc = document(h, '')
redis.call('PEXPIRE', KEYS[1], ttl or ARGV[1])
return doc
`

/**
 * Saves the changed fields of a session (see FENCED_WRITE for KEYS/ARGV). Returns 'ok', 'gone'
 * (never re-creates a destroyed session) or 'fenced'.
 */
export const SESSION_SAVE = `
local holder = false
if ARGV[2] ~= '' then holder = redis.call('GET', KEYS[2]) end
${FENCED_WRITE}
return result
`

/**
 * Compare-and-delete: releases a lease only if it still holds our token. Returns 1 or 0.
 *   KEYS[1] lock key
 *   ARGV[1] token
 */
export const LOCK_RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`

/**
 * Compare-and-PEXPIRE: renews a lease only if it still holds our token; never re-creates a lease
 * that expired (someone else may have held it in between). Returns 1 or 0.
 *   KEYS[1] lock key
 *   ARGV[1] token; ARGV[2] lease ttl (ms)
 */
export const LOCK_EXTEND = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`

/**
 * Takes a session's lease and reads the session in one round trip. Returns '2' when the session
 * does not exist (no lease taken), '0' when the lease is busy, '1 ' and the SessionReply (see
 * SESSION_DOCUMENT) when taken (the session's TTL is refreshed).
 *   KEYS[1] lock key                KEYS[2] session hash
 *   ARGV[1] token; ARGV[2] lease ttl (ms); ARGV[3] session ttl (ms)
 */
export const ACQUIRE_AND_LOAD = `${SESSION_DOCUMENT}
if redis.call('EXISTS', KEYS[2]) == 0 then return '2' end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return '0' end
local ttl, doc = document(redis.call('HGETALL', KEYS[2]), '1 ')
redis.call('PEXPIRE', KEYS[2], ttl or ARGV[3])
return doc
`

/**
 * Fenced save, then compare-and-delete of the lease, in one round trip. Returns 'ok', 'gone' or
 * 'fenced'; the lease is released in every case where it still held our token.
 *   KEYS[1] session hash            KEYS[2] lock key
 *   ARGV as in FENCED_WRITE (ARGV[2], the token, is required)
 */
export const SAVE_AND_RELEASE = `
local holder = redis.call('GET', KEYS[2])
${FENCED_WRITE}
if holder == ARGV[2] then redis.call('DEL', KEYS[2]) end
return result
`

/**
 * Fenced saves of several records and the release of their leases, all in one round trip, all
 * or nothing: every record is checked first (see `check`), and only when every one may be written
 * are they all written; the leases are released in every case where they still hold our tokens.
 * Returns the records' results separated by spaces, in order: all 'ok', or — when one cannot be
 * written — its 'gone' or 'fenced', and 'skipped' for the others (nothing written). Only on one
 * node (a Cluster keeps the records in other slots).
 *   KEYS[2i - 1] record i's hash     KEYS[2i] its lock key
 *   ARGV[1] session ttl (ms); ARGV[2] n records; then per record: token, version read ('' =
 *   none), s = number of fields to set, d = number of fields to delete, 2s field, JSON pairs,
 *   d fields
 */
export const SAVE_AND_RELEASE_MANY = `${SAVE_HELPERS}
local n, at, items, results, failed = tonumber(ARGV[2]), 3, {}, {}, false
for i = 1, n do
  local s, d = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local it = { token = ARGV[at], first = at + 4, last = at + 3 + 2 * s, upto = at + 3 + 2 * s + d }
  it.holder = redis.call('GET', KEYS[2 * i])
  it.meta, results[i] = check(KEYS[2 * i - 1], it.holder, it.token, ARGV[at + 1])
  if results[i] ~= 'ok' then failed = true end
  items[i] = it
  at = it.upto + 1
end
for i = 1, n do
  local it = items[i]
  if failed then
    if results[i] == 'ok' then results[i] = 'skipped' end
  else
    write(KEYS[2 * i - 1], it.meta, it.first, it.last, it.upto, ARGV[1])
  end
  if it.holder == it.token then redis.call('DEL', KEYS[2 * i]) end
end
return table.concat(results, ' ')
`

/** Name → definition of every script; the names are prefixed to stay clear of the app's own. */
const SCRIPTS = {
  mcpSessionCreate: { numberOfKeys: 1, lua: SESSION_CREATE },
  mcpSessionLoad: { numberOfKeys: 1, lua: SESSION_LOAD },
  mcpSessionSave: { numberOfKeys: 2, lua: SESSION_SAVE },
  mcpLockRelease: { numberOfKeys: 1, lua: LOCK_RELEASE },
  mcpLockExtend: { numberOfKeys: 1, lua: LOCK_EXTEND },
  mcpAcquireAndLoad: { numberOfKeys: 2, lua: ACQUIRE_AND_LOAD },
  mcpSaveAndRelease: { numberOfKeys: 2, lua: SAVE_AND_RELEASE },
  // Its number of keys is the call's first argument (two per record).
  mcpSaveAndReleaseMany: { numberOfKeys: 0, lua: SAVE_AND_RELEASE_MANY }
} as const

/**
 * The scripts whose effect a replica must hold before it counts (see `replica-ack.ts`), each with
 * how its reply says it wrote: a session or handle created or saved, a lease taken or renewed.
 */
const WRITES: Partial<Record<keyof typeof SCRIPTS, (reply: unknown) => boolean>> = {
  mcpSessionCreate: reply => reply === 1,
  mcpSessionSave: reply => reply === 'ok',
  mcpLockExtend: reply => reply === 1,
  mcpAcquireAndLoad: reply => typeof reply === 'string' && reply.startsWith('1'),
  mcpSaveAndRelease: reply => reply === 'ok',
  mcpSaveAndReleaseMany: reply => typeof reply === 'string' && reply.startsWith('ok')
}

/** The write scripts that take a lease: unconfirmed, the lease is let go and nothing was done. */
const TAKES: ReadonlySet<string> = new Set<keyof typeof SCRIPTS>(['mcpAcquireAndLoad'])

/**
 * Adds the scripts to a client, once: a client that already has them (because another store or
 * lock shares it) is left as it is. Returns the same client, typed with its scripts. A standalone
 * client sends them as plain EVALSHA commands (`eval.ts`: no per-call wrapper); a Cluster, or a
 * client without `evalsha`, through ioredis' `defineCommand`.
 */
export function defineScripts (client: RedisClientLike): RedisClient {
  const scripted = client as RedisClient
  if (typeof scripted.mcpSaveAndRelease === 'function') return scripted
  const plain = client as Partial<EvalClient> & RedisClientLike
  if (!client.isCluster && typeof plain.evalsha === 'function' && typeof plain.eval === 'function') {
    const methods = client as unknown as Record<string, unknown>
    // One sender per client: its commands' timeouts share one timer.
    const send = evalshaSender(client as unknown as EvalshaClient)
    const ack = replicaAckFor(client)
    for (const [name, definition] of Object.entries(SCRIPTS)) {
      const runner = new ScriptRunner(plain as EvalClient, lua(definition), send)
      const wrote = ack === undefined ? undefined : WRITES[name as keyof typeof SCRIPTS]
      // A script of as many keys as the call says takes their number first.
      const keys = definition.numberOfKeys === 0
      const take = TAKES.has(name)
      // Not async: the runner's promise as it is, no second promise per call.
      methods[name] = wrote === undefined
        ? (...args: Array<string | number>): unknown => keys ? runner.run(args.slice(1), args[0] as number) : runner.run(args)
        : (...args: Array<string | number>): unknown => (keys
            ? runner.runFollowed(args.slice(1), () => sendWait(client, ack as ReplicaAck), args[0] as number)
            : runner.runFollowed(args, () => sendWait(client, ack as ReplicaAck)))
            .then(([reply, acknowledged]) => confirmed(reply, acknowledged, ack as ReplicaAck, wrote, take))
    }
    return scripted
  }
  for (const [name, definition] of Object.entries(SCRIPTS)) {
    client.defineCommand(name, definition)
  }
  return scripted
}

/** One LuaScript per script text, shared by every client. */
const compiled = new Map<string, LuaScript>()
function lua (definition: { lua: string, numberOfKeys: number }): LuaScript {
  let script = compiled.get(definition.lua)
  if (script === undefined) {
    script = new LuaScript(definition.lua, definition.numberOfKeys)
    compiled.set(definition.lua, script)
  }
  return script
}
