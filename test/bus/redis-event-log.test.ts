/**
 * RedisEventLog on a private redis-server: the event log contract, then what only the Redis log
 * does: another instance replays what one appended, the keys live under the session's hash tag
 * with the ttl, and prefixes keep deployments apart.
 */
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { newStreamId } from '../../lib/bus/event-log.js'
import { RedisEventLog, type EventLogOptions } from '../../lib/index.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { runEventLogContract } from './event-log-contract.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => { admin.disconnect() })
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`

/** A log with its own client (as another instance would have), closed in teardown. */
function newLog (t: Test, options: EventLogOptions & { prefix?: string, sessionKey?: (sid: string) => string } = {}): RedisEventLog {
  const client = new Redis(server.url)
  t.teardown(() => { client.disconnect() })
  return new RedisEventLog({ redis: client, ...options })
}

const contractPrefix = newPrefix()
runEventLogContract(t, 'RedisEventLog (an end mark refuses late writes)', {
  open: async (t, options) => newLog(t, { ...options, prefix: contractPrefix })
})

// As the plugin runs it with a RedisSessionStore: the session's hash must exist for a write.
const guardedPrefix = newPrefix()
const sessionKey = (sid: string): string => `${guardedPrefix}{${sid}}:s`
runEventLogContract(t, 'RedisEventLog (writes need the session\'s hash)', {
  open: async (t, options) => newLog(t, { ...options, prefix: guardedPrefix, sessionKey }),
  begin: async (sid) => { await admin.hset(sessionKey(sid), 'k', '1'); await admin.pexpire(sessionKey(sid), 60_000) },
  end: async (sid) => { await admin.del(sessionKey(sid)) }
})

t.test('a stream appended on one instance is replayed and finished on another', async t => {
  const prefix = newPrefix()
  const [a, b] = [newLog(t, { prefix }), newLog(t, { prefix })]
  const sid = generateSessionId()
  const streamId = newStreamId()
  const priming = (await a.open(sid, streamId))!
  const id = await a.append(sid, streamId, 'on a')
  await b.finish(sid, streamId)
  t.same(await b.replay(sid, priming), { streamId, events: [{ id, data: 'on a' }], finished: true })
})

t.test("keys: under the session's hash tag, with the ttl; dropSession deletes them", async t => {
  const prefix = newPrefix()
  const log = newLog(t, { prefix, ttl: 5000 })
  const sid = generateSessionId()
  const streamId = newStreamId()
  await log.open(sid, streamId)
  await log.append(sid, streamId, 'x')
  const keys = (await admin.keys(`${prefix}*`)).sort()
  t.same(keys, [`${prefix}{${sid}}:ev:${streamId}`, `${prefix}{${sid}}:evs`].sort())
  for (const key of keys) {
    const pttl = await admin.pttl(key)
    t.ok(pttl > 0 && pttl <= 5000, `${key}: PX ttl (${pttl})`)
  }
  await log.dropSession(sid)
  t.same(await admin.keys(`${prefix}*`), [`${prefix}{${sid}}:evx`], 'only the end mark is left')
  const mark = await admin.pttl(`${prefix}{${sid}}:evx`)
  t.ok(mark > 0 && mark <= 5000, `the mark goes after the ttl (${mark})`)
  t.equal(await log.append(sid, streamId, 'late'), null, 'a late append is refused')
  t.same(await admin.keys(`${prefix}*`), [`${prefix}{${sid}}:evx`], 'and created nothing')
})

t.test('with sessionKey: nothing is left at all, no write outlives the session\'s hash, and none lives longer', async t => {
  const prefix = newPrefix()
  const hash = (sid: string): string => `${prefix}{${sid}}:s`
  const log = newLog(t, { prefix, ttl: 60_000, sessionKey: hash })
  const sid = generateSessionId()
  const streamId = newStreamId()
  t.equal(await log.open(sid, streamId), null, 'no session hash: the open is refused')
  t.same(await admin.keys(`${prefix}*`), [], 'and created nothing')
  await admin.hset(hash(sid), 'k', '1')
  await admin.pexpire(hash(sid), 4000)
  t.ok(await log.open(sid, streamId) !== null, 'the session lives: the stream opens')
  await log.append(sid, streamId, 'x')
  for (const key of [`${prefix}{${sid}}:ev:${streamId}`, `${prefix}{${sid}}:evs`]) {
    const pttl = await admin.pttl(key)
    t.ok(pttl > 0 && pttl <= 4000, `${key}: expires no later than the session (${pttl})`)
  }
  await admin.del(hash(sid))
  t.equal(await log.append(sid, streamId, 'late'), null, 'the session ended: an append is refused')
  await log.dropSession(sid)
  t.same(await admin.keys(`${prefix}*`), [], 'dropSession leaves nothing, not even a mark')
  await log.finish(sid, streamId)
  t.equal(await log.open(sid, newStreamId()), null, 'a late open is refused')
  t.same(await admin.keys(`${prefix}*`), [], 'late writers created nothing')
})

t.test('logs with different prefixes do not see each other\'s streams', async t => {
  const [a, b] = [newLog(t, { prefix: newPrefix() }), newLog(t, { prefix: newPrefix() })]
  const sid = generateSessionId()
  const priming = (await a.open(sid, newStreamId()))!
  t.equal(await b.replay(sid, priming), null)
  t.not(await a.replay(sid, priming), null)
})

t.test('a prefix with a brace is refused (it would break the hash tag)', async t => {
  for (const prefix of ['a{', 'a}', '{x}:']) {
    t.throws(() => new RedisEventLog({ redis: admin, prefix }), TypeError, prefix)
  }
})

t.test('size: the streams this instance wrote that still live; a dropped session and refused writes do not count', async t => {
  const prefix = newPrefix()
  const log = newLog(t, { prefix })
  const [s1, s2] = [generateSessionId(), generateSessionId()]
  const a = newStreamId()
  await log.open(s1, a)
  await log.append(s1, a, 'again')
  await log.open(s1, newStreamId())
  await log.open(s2, newStreamId())
  t.equal(log.size, 3, 'three streams, each counted once however often written')
  t.equal((await admin.keys(`${prefix}*:ev:*`)).length, 3, 'as many as Redis holds')
  await log.dropSession(s1)
  t.equal(log.size, 1, 'the dropped session\'s streams are gone')
  t.equal(await log.open(s1, newStreamId()), null, 'a late write is refused…')
  t.equal(log.size, 1, '…and not counted')
})
