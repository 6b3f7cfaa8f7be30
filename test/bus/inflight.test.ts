/** Requests in flight per session: counting, cancelling by id (shared ids too), the session's end, the subscription after a moment. */
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { MemoryBus } from '../../lib/bus/bus.js'
import { InflightRequests } from '../../lib/bus/inflight.js'
import { SessionTopics } from '../../lib/bus/session-topics.js'
import { until } from '../helpers/time.js'

const quiet = { error () {}, warn () {}, debug () {} }

function setup (): { bus: MemoryBus, topics: SessionTopics, inflight: InflightRequests } {
  const bus = new MemoryBus()
  const topics = new SessionTopics(bus, quiet)
  return { bus, topics, inflight: new InflightRequests(topics) }
}

/** An abortable that records why it was aborted. */
function request (): { abort: (reason: unknown) => void, reasons: string[] } {
  const reasons: string[] = []
  return { reasons, abort: (reason) => { reasons.push((reason as Error).message) } }
}

t.test('each track counts, shared ids and the same request twice included; untrack is idempotent', async t => {
  const { topics, inflight } = setup()
  const a = request()
  const one = inflight.track('s', 1, a)
  const two = inflight.track('s', 1, a)
  const three = inflight.track('s', 'x', request())
  t.equal(inflight.count('s'), 3)
  t.ok(inflight.holds('s'))
  t.equal(inflight.count('other'), 0)
  two.untrack()
  two.untrack()
  t.equal(inflight.count('s'), 2, 'a second untrack does nothing')
  one.untrack()
  three.untrack()
  t.equal(inflight.count('s'), 0)
  t.notOk(inflight.holds('s'))
  t.equal(topics.size, 0, 'the session is forgotten once nothing is in flight')
  inflight.close()
})

t.test('a cancel aborts every request in flight with that id, and only those', async t => {
  const { topics, inflight } = setup()
  const first = request()
  const twin = request()
  const text = request()
  const other = request()
  const done = request()
  inflight.track('s', 7, first)
  inflight.track('s', 7, twin)
  inflight.track('s', '7', text)
  inflight.track('s', 8, other)
  inflight.track('s', 7, done).untrack()
  inflight.track('t', 7, request())
  await topics.publish('s', { t: 'cancel', sid: 's', requestId: 7 })
  t.same(first.reasons, ['cancelled by the client'])
  t.same(twin.reasons, ['cancelled by the client'], 'a second request sharing the id too')
  t.same(text.reasons, [], 'the string id "7" is another id than the number 7')
  t.same(other.reasons, [])
  t.same(done.reasons, [], 'an untracked request is not aborted')
  await topics.publish('s', { t: 'cancel', sid: 's', requestId: '7' })
  t.same(text.reasons, ['cancelled by the client'], 'cancelled by its own id')
  t.same(first.reasons, ['cancelled by the client'], 'the number 7 is not cancelled again')
  inflight.close()
})

t.test('a request that untracks itself while aborted does not stop the others from being aborted', async t => {
  const { topics, inflight } = setup()
  const reasons: string[] = []
  const trackings: Array<{ untrack: () => void }> = []
  for (let i = 0; i < 3; i++) {
    const n = i
    trackings.push(inflight.track('s', 1, { abort: () => { reasons.push(`r${n}`); trackings[n]?.untrack() } }))
  }
  await topics.publish('s', { t: 'cancel', sid: 's', requestId: 1 })
  t.same(reasons, ['r0', 'r1', 'r2'], 'in the order they were tracked')
  t.equal(inflight.count('s'), 0)
  inflight.close()
})

t.test('the session ending aborts all its requests; closing aborts everything', async t => {
  const { topics, inflight } = setup()
  const a = request()
  const b = request()
  const c = request()
  inflight.track('s', 1, a)
  inflight.track('s', 2, b)
  inflight.track('t', 1, c)
  await topics.publish('s', { t: 'ended', sid: 's' })
  t.same(a.reasons, ['session ended'])
  t.same(b.reasons, ['session ended'])
  t.same(c.reasons, [])
  inflight.close()
  t.same(c.reasons, ['server shutting down'])
})

t.test('a session is subscribed only once a request has run for a moment, and let go after', async t => {
  const { bus, topics, inflight } = setup()
  inflight.track('short', 1, request()).untrack()
  const long = inflight.track('s', 1, request())
  t.notOk(topics.subscribed('s'), 'not subscribed at once')
  // Two sweeps must see it: waited for, not guessed (a process stalled past both sweeps' times
  // runs them once when it resumes, with the sleep's timer).
  await until(() => topics.subscribed('s'), { what: 'the subscription after a moment' })
  t.notOk(topics.subscribed('short'))
  t.ok(topics.subscribed('s'), 'subscribed after a moment')
  const a = request()
  const cancelled = inflight.track('s', 2, a)
  await bus.publish('s:s', { t: 'cancel', sid: 's', requestId: 2 })
  await until(() => a.reasons.length > 0, { what: 'the cancel' })
  t.same(a.reasons, ['cancelled by the client'], 'a cancel published by another instance arrives')
  cancelled.untrack()
  t.ok(topics.subscribed('s'), 'still subscribed while a request is in flight')
  t.equal(inflight.watched, 0, 'a subscribed session is no longer watched')
  long.untrack()
  await sleep(1)
  t.equal(bus.channels, 0, 'unsubscribed once nothing is in flight')
  inflight.close()
})

t.test('requests coming and going faster than the sweep never subscribe the session', async t => {
  const { topics, inflight } = setup()
  let subscribed = false
  let judged = 0
  // Each lives ~2 ms: a sweep (every 10 ms) may see one, never the same one twice. One that a
  // stalled process kept for a sweep interval or more may be subscribed, rightly: not judged.
  for (let i = 0; i < 30; i++) {
    const start = performance.now()
    const r = inflight.track('s', i, request())
    await sleep(2)
    const now = topics.subscribed('s')
    if (performance.now() - start < 10) { subscribed ||= now; judged++ }
    r.untrack()
  }
  t.ok(judged > 0, 'at least one request was short')
  t.notOk(subscribed)
  t.equal(inflight.watched, 0)
  inflight.close()
})

t.test('a flood of sessions leaves no record behind once their requests end, however they end', async t => {
  const { topics, inflight } = setup()
  const done: Array<{ untrack: () => void }> = []
  for (let i = 0; i < 1000; i++) done.push(inflight.track(`s${i}`, i, request()), inflight.track(`s${i}`, 'same', request()))
  t.equal(inflight.sessions, 1000)
  t.equal(inflight.watched, 1000, 'each unsubscribed session is watched once, whatever its number of requests')
  // Half end by cancel (the aborted request then untracks, as the wire does), half as usual.
  for (let i = 0; i < 500; i++) inflight.onMessage(`s${i}`, { t: 'cancel', sid: `s${i}`, requestId: i })
  for (const d of done) d.untrack()
  t.equal(inflight.sessions, 0, 'no empty session record kept')
  t.equal(inflight.watched, 0, 'and none watched: a session leaves the sweeps\' list with its last request, not at the next sweep')
  t.equal(topics.size, 0)
  inflight.close()
})

t.test('closing with unsubscribed sessions in flight: every request aborted, none left watched, no sweep subscribes later', async t => {
  const { bus, inflight } = setup()
  const requests = [request(), request(), request()]
  inflight.track('a', 1, requests[0] as ReturnType<typeof request>)
  inflight.track('a', 2, requests[1] as ReturnType<typeof request>)
  inflight.track('b', 1, requests[2] as ReturnType<typeof request>)
  t.equal(inflight.watched, 2)
  inflight.close()
  t.same(requests.map(r => r.reasons), [['server shutting down'], ['server shutting down'], ['server shutting down']])
  t.equal(inflight.watched, 0, 'the watch list is empty')
  await sleep(40) // longer than two sweeps: time itself is under test
  t.equal(bus.channels, 0, 'no sweep ran after close to subscribe the sessions')
})
