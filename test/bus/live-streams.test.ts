/** The tally behind the Redis event log's size: streams live one TTL from their last write, and the tally stays bounded. */
import t from 'tap'
import { LiveStreams } from '../../lib/bus/live-streams.js'

t.test('a stream lives one TTL from its last write', async t => {
  const live = new LiveStreams(1000)
  live.wrote('s', 'a', 0)
  live.wrote('s', 'a', 900)
  live.wrote('s', 'b', 100)
  t.equal(live.size(1050), 2, 'both within their TTL (a rewritten at 900)')
  t.equal(live.size(1500), 1, 'b expired at 1100; a lives until 1900')
  t.equal(live.size(2000), 0, 'and a at 1900')
})

t.test('expired entries are pruned on writes too, so the tally stays bounded without reads', async t => {
  const live = new LiveStreams(100)
  for (let i = 0; i < 10_000; i++) live.wrote(`s${i}`, 'x', i)
  // Every write past a quarter TTL prunes: at most ~1.25 TTL of writes (one per ms here) are held.
  t.ok(live.held <= 126, `${live.held} entries held`)
})

t.test('a dropped session takes its streams with it', async t => {
  const live = new LiveStreams(1000)
  live.wrote('s', 'a', 0)
  live.wrote('s', 'b', 0)
  live.wrote('o', 'c', 0)
  live.dropped('s')
  live.dropped('unknown')
  t.equal(live.size(1), 1)
})
