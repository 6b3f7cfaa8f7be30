/**
 * PgEventLog on a database of its own: the event log contract (with an end mark, and guarded by
 * the session's row as the plugin runs it with a PgSessionStore), then what only this log does:
 * another instance replays what one appended, and the tables stay bounded.
 */
import t, { type Test } from 'tap'
import { newStreamId } from '../../lib/bus/event-log.js'
import { PgEventLog, type PgEventLogOptions } from '../../lib/bus/pg-event-log.js'
import { PgSessionStore } from '../../lib/sessions/pg-store.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { runEventLogContract } from './event-log-contract.js'

const db = await createTestDatabase(t)

function newLog (t: Test, options: Omit<PgEventLogOptions, 'pool'>): PgEventLog {
  return new PgEventLog({ pool: db.pool({ max: 4 }), ...options })
}

runEventLogContract(t, 'PgEventLog (an end mark refuses late writes)', {
  open: async (t, options) => newLog(t, { ...options, prefix: 'ev_' })
})

const store = new PgSessionStore({ pool: db.admin, prefix: 'evs_' })
runEventLogContract(t, "PgEventLog (writes need the session's row)", {
  open: async (t, options) => newLog(t, { ...options, prefix: 'evs_', guardByStore: true }),
  begin: async (sid) => { await store.create(sid, {}) },
  end: async (sid) => { await store.destroy(sid) }
})

t.test('another instance replays what one appended', async t => {
  const one = newLog(t, { prefix: 'ev2_' })
  const two = newLog(t, { prefix: 'ev2_' })
  const sid = generateSessionId()
  const streamId = newStreamId()
  const priming = await one.open(sid, streamId) as string
  const id = await one.append(sid, streamId, 'hello')
  t.same(await two.replay(sid, priming), { streamId, events: [{ id, data: 'hello' }], finished: false })
})

t.test('bounded: at most maxEvents rows per stream; expired streams go as new ones open', async t => {
  const log = newLog(t, { prefix: 'ev3_', maxEvents: 5, ttl: 200 })
  const sid = generateSessionId()
  const streamId = newStreamId()
  await log.open(sid, streamId)
  for (let i = 0; i < 50; i++) await log.append(sid, streamId, 'x'.repeat(1000))
  const count = async (table: string): Promise<number> => (await db.admin.query(`SELECT count(*)::int AS n FROM ev3_${table}`)).rows[0].n
  t.equal(await count('events'), 5)
  await new Promise(resolve => setTimeout(resolve, 300))
  await log.open(generateSessionId(), newStreamId())
  t.equal(await count('streams'), 1, 'the expired stream was deleted')
  t.equal(await count('events'), 1, 'with its events')
})
