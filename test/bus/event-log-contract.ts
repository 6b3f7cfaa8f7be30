/**
 * The event log contract (lib/bus/event-log.ts), run against every log (memory, Redis). A
 * log-specific test file calls `runEventLogContract(t, name, options)`; `open` builds a fresh log
 * with the options asked for and registers its own cleanup with `t.teardown`.
 *
 * Event ids are `<streamId>_<seq>`: the contract checks what the ids say (their stream, their
 * order), never the numbers themselves, which are the log's business.
 */
import type { Test } from 'tap'
import { newStreamId, parseEventId } from '../../lib/bus/event-log.js'
import type { EventLog, EventLogOptions, Replay } from '../../lib/index.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { sleep, until } from '../helpers/time.js'

export interface EventLogContractOptions {
  /** A fresh log with `options`, closed (its clients) at the end of the test. */
  open: (t: Test, options: EventLogOptions) => Promise<EventLog>
  /** Makes a session live, for logs that check it before a write (Redis with `sessionKey`). */
  begin?: (sid: string) => Promise<void>
  /** Ends a session where it lives (before `dropSession`, as the plugin does on DELETE). */
  end?: (sid: string) => Promise<void>
  /**
   * Known defects, reported as tap `todo` (run and shown, not failing the suite) until lib fixes
   * them: the reason for each.
   */
  todo?: {
    /** A replay from the priming id after the oldest events were dropped returns the rest, with a gap. */
    primingAfterTrim?: string
  }
}

/** A stream opened in a session with events appended: its priming id and the events' ids. */
interface Stream { sid: string, streamId: string, priming: string, ids: string[], data: string[] }

/** The id a write of a live session resolves (never `null`: that means the session ended). */
async function logged (id: Promise<string | null>): Promise<string> {
  const got = await id
  if (got === null) throw new Error('a live session\'s write was refused')
  return got
}

/** Opens a stream of `sid` and appends `data` one by one. */
async function stream (log: EventLog, sid: string, data: string[]): Promise<Stream> {
  const streamId = newStreamId()
  const priming = await logged(log.open(sid, streamId))
  const ids: string[] = []
  for (const d of data) ids.push(await logged(log.append(sid, streamId, d)))
  return { sid, streamId, priming, ids, data }
}

/** `n` JSON-RPC messages, as the plugin logs them (serialized). */
const messages = (n: number, tag = 'm'): string[] =>
  Array.from({ length: n }, (_, i) => JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progress: i + 1, tag } }))

/** The replay expected from `s.ids[from]` (from -1: from the priming id). */
function rest (s: Stream, from: number, finished = false): Replay {
  const events = s.ids.map((id, i) => ({ id, data: s.data[i] })).slice(from + 1)
  return { streamId: s.streamId, events, finished }
}

const LONG: EventLogOptions = { ttl: 60_000 }

/** A new live session's id. */
async function live (options: EventLogContractOptions): Promise<string> {
  const sid = generateSessionId()
  await options.begin?.(sid)
  return sid
}

export function runEventLogContract (t: Test, name: string, options: EventLogContractOptions): void {
  t.test(`${name}: event log contract`, async t => {
    idChecks(t, options)
    replayChecks(t, options)
    refusalChecks(t, options)
    boundChecks(t, options)
    lifetimeChecks(t, options)
  })
}

function idChecks (t: Test, options: EventLogContractOptions): void {
  t.test('ids name their stream and increase; the priming id comes first', async t => {
    const log = await options.open(t, LONG)
    const s = await stream(log, await live(options), messages(5))
    const parsed = [s.priming, ...s.ids].map(id => parseEventId(id))
    t.ok(parsed.every(p => p?.streamId === s.streamId), 'every id parses to the stream')
    const seqs = parsed.map(p => p?.seq ?? NaN)
    t.ok(seqs.every((q, i) => i === 0 || q > seqs[i - 1]), `sequence numbers increase (${seqs.join(',')})`)
  })

  t.test('concurrent appends get distinct ids, replayed in id order', async t => {
    const log = await options.open(t, LONG)
    const sid = await live(options)
    const streamId = newStreamId()
    const priming = await logged(log.open(sid, streamId))
    const data = messages(30)
    const ids = await Promise.all(data.map(async d => await logged(log.append(sid, streamId, d))))
    t.equal(new Set(ids).size, ids.length, 'distinct')
    const replay = await log.replay(sid, priming)
    const bySeq = ids.map((id, i) => ({ id, data: data[i] })).sort((a, b) => parseEventId(a.id)!.seq - parseEventId(b.id)!.seq)
    t.same(replay?.events, bySeq, 'every event, in id order, with its own data')
  })
}

function replayChecks (t: Test, options: EventLogContractOptions): void {
  t.test('a replay returns the rest of the stream after the given id, in order', async t => {
    const log = await options.open(t, LONG)
    const s = await stream(log, await live(options), ['first', 'with\nnewline ✓', '', '{"jsonrpc":"2.0"}'])
    t.same(await log.replay(s.sid, s.priming), rest(s, -1), 'from the priming id: everything')
    t.same(await log.replay(s.sid, s.ids[1]), rest(s, 1), 'from the second event: the last two')
    t.same(await log.replay(s.sid, s.ids[3]), rest(s, 3), 'from the last event: nothing more, not finished')
    const more = await logged(log.append(s.sid, s.streamId, 'later'))
    t.same((await log.replay(s.sid, s.ids[3]))?.events, [{ id: more, data: 'later' }], 'what came after the last replay')
  })

  t.test('a replay returns that stream only', async t => {
    const log = await options.open(t, LONG)
    const sid = await live(options)
    const a: Stream = { ...await stream(log, sid, []), data: messages(4, 'a') }
    const b: Stream = { ...await stream(log, sid, []), data: messages(4, 'b') }
    for (let i = 0; i < 4; i++) {
      a.ids.push(await logged(log.append(sid, a.streamId, a.data[i])))
      b.ids.push(await logged(log.append(sid, b.streamId, b.data[i])))
    }
    t.same(await log.replay(sid, a.priming), rest(a, -1), 'stream a')
    t.same(await log.replay(sid, b.ids[0]), rest(b, 0), 'stream b')
  })

  t.test('finish marks the stream finished; its events stay replayable', async t => {
    const log = await options.open(t, LONG)
    const s = await stream(log, await live(options), messages(3))
    t.equal((await log.replay(s.sid, s.priming))?.finished, false, 'open before finish')
    await log.finish(s.sid, s.streamId)
    t.same(await log.replay(s.sid, s.priming), rest(s, -1, true), 'every event, finished')
    t.same(await log.replay(s.sid, s.ids[2]), rest(s, 2, true), 'from the last event: none, finished')
  })

  t.test('a stream with no events replays nothing from its priming id', async t => {
    const log = await options.open(t, LONG)
    const s = await stream(log, await live(options), [])
    t.same(await log.replay(s.sid, s.priming), rest(s, -1))
  })
}

function refusalChecks (t: Test, options: EventLogContractOptions): void {
  t.test('a replay for another session returns null', async t => {
    const log = await options.open(t, LONG)
    const s = await stream(log, await live(options), messages(3))
    const other = await stream(log, await live(options), messages(3))
    for (const id of [s.priming, ...s.ids]) t.equal(await log.replay(other.sid, id), null, `${id} from another session`)
    t.not(await log.replay(s.sid, s.ids[0]), null, 'the owner still replays it')
  })

  t.test('forged, malformed and unknown ids return null', async t => {
    const log = await options.open(t, LONG)
    const s = await stream(log, await live(options), messages(3))
    const lastSeq = parseEventId(s.ids[2])!.seq
    const ids = [
      '', 'garbage', s.streamId, `${s.streamId}_`, `${s.streamId}_x`, `${s.streamId}_1_2`, `${s.streamId}_-1`,
      `short_${lastSeq}`, `${s.streamId}_${lastSeq}${'0'.repeat(20)}`, ` ${s.ids[0]}`,
      `${newStreamId()}_1`, `${newStreamId()}_${lastSeq}`, // streams that never existed
      `${s.streamId}_0`, `${s.streamId}_${lastSeq + 1}`, `${s.streamId}_${lastSeq + 1000}` // past the stream's ends
    ]
    for (const id of ids) t.equal(await log.replay(s.sid, id), null, JSON.stringify(id))
    t.not(await log.replay(s.sid, s.ids[2]), null, 'the real last id still replays')
  })
}

function boundChecks (t: Test, options: EventLogContractOptions): void {
  t.test('maxEvents keeps the newest events; a replay from before the kept window returns null', async t => {
    const log = await options.open(t, { ...LONG, maxEvents: 3 })
    const s = await stream(log, await live(options), messages(7))
    // Kept: the last three (ids[4..6]). A replay from a kept event returns the rest as usual.
    t.same(await log.replay(s.sid, s.ids[4]), rest(s, 4), 'from the oldest kept event')
    t.same(await log.replay(s.sid, s.ids[5]), rest(s, 5))
    // Two events or more before the window, the events in between are lost: no partial replay.
    // (From the event right before the window nothing is lost: the logs may answer either way.)
    for (const i of [0, 1, 2]) t.equal(await log.replay(s.sid, s.ids[i]), null, `from event ${i + 1}`)
  })

  t.test('a replay from the priming id after events were dropped returns null', async t => {
    const log = await options.open(t, { ...LONG, maxEvents: 3 })
    const s = await stream(log, await live(options), messages(7))
    t.equal(await log.replay(s.sid, s.priming), null, 'the first four events are gone: no replay with a gap', { todo: options.todo?.primingAfterTrim })
  })
}

function lifetimeChecks (t: Test, options: EventLogContractOptions): void {
  t.test("dropSession forgets the session's streams, and only them", async t => {
    const log = await options.open(t, LONG)
    const sid = await live(options)
    const [a, b] = [await stream(log, sid, messages(2)), await stream(log, sid, messages(2))]
    const other = await stream(log, await live(options), messages(2))
    await log.finish(sid, b.streamId)
    await options.end?.(sid)
    await log.dropSession(sid)
    for (const id of [a.priming, a.ids[0], b.priming, b.ids[1]]) t.equal(await log.replay(sid, id), null, `${id} forgotten`)
    t.same(await log.replay(other.sid, other.priming), rest(other, -1), 'another session keeps its stream')
    await log.dropSession(generateSessionId())
    t.pass('dropping a session without streams is fine')
  })

  t.test('after dropSession, writes of the ended session are refused and create nothing', async t => {
    const log = await options.open(t, LONG)
    const sid = await live(options)
    const running = await stream(log, sid, messages(2))
    const other = await stream(log, await live(options), messages(1))
    await options.end?.(sid)
    await log.dropSession(sid)
    // A writer that has not heard of the end yet: its stream, and a stream it opens only now.
    t.equal(await log.append(sid, running.streamId, 'late'), null, 'an append to a dropped stream: refused')
    await log.finish(sid, running.streamId)
    const late = newStreamId()
    t.equal(await log.open(sid, late), null, 'a stream opened after the end: refused')
    t.equal(await log.append(sid, late, 'late'), null, 'and appends to it: refused')
    await log.finish(sid, late)
    for (const id of [running.priming, running.ids[1], `${late}_1`, `${late}_2`]) t.equal(await log.replay(sid, id), null, `${id}: nothing to replay`)
    t.same(await log.replay(other.sid, other.priming), rest(other, -1), 'another session is not affected')
    t.ok(await log.append(other.sid, other.streamId, 'still') !== null, 'and still writes')
  })

  t.test('a stream expires ttl ms after its last event; each append renews it', async t => {
    const ttl = 400
    const log = await options.open(t, { ttl })
    const s = await stream(log, await live(options), ['0'])
    // Appends 150 ms apart for 900 ms: each renews the ttl, so the stream outlives its first ttl.
    for (let i = 1; i <= 6; i++) {
      await sleep(150) // the ttl is under test: time must pass
      s.ids.push(await logged(log.append(s.sid, s.streamId, String(i))))
      s.data.push(String(i))
    }
    t.same(await log.replay(s.sid, s.priming), rest(s, -1), 'alive 900 ms after it opened')
    const quiet = performance.now()
    await until(async () => await log.replay(s.sid, s.priming) === null, { timeout: ttl + 3000, what: 'the stream to expire' })
    t.ok(performance.now() - quiet >= ttl - 50, 'not before its ttl')
  })
}
