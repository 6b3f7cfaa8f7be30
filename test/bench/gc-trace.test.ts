/**
 * Reading V8's `--trace-gc-nvp` output (bench/gc-trace.ts), for bench/gc.ts: a recorded line of
 * each kind, and the trace of a real Node process that allocates a known amount.
 */
import { spawnSync } from 'node:child_process'
import t from 'tap'
import { parseGcTrace, summarizeGc } from '../../bench/gc-trace.js'

// Shortened from real lines of Node 20 (V8 11.3); the fields read are kept as V8 wrote them.
const SCAVENGE = '[11025:0x175beca0]    10717 ms: pause=3.5 mutator=134.1 gc=s reduce_memory=0 scavenge=3.36 scavenge.parallel=2.90 ' +
  'background.scavenge.parallel=2.28 background.unmapper=0.02 total_size_before=57995776 total_size_after=45607088 allocated=12549344 ' +
  'promoted=868248 new_space_survived=153648 promotion_ratio=6.5% promotion_rate=94.0%'
const MARK_COMPACT = '[13538:0x31135e50]      184 ms: pause=21.7 mutator=10.5 gc=mc reduce_memory=0 background.mark=1.9 background.sweep=0.0 ' +
  'background.evacuate.copy=1.0 background.evacuate.update_pointers=0.0 background.unmapper=0.0 total_size_before=19253472 allocated=5998424 promoted=6026472'

t.test('a scavenge and a mark-compact: kinds, fields, and the sums per request', async t => {
  const text = ['server listening', SCAVENGE, '', MARK_COMPACT, 'other output'].join('\n')
  const events = parseGcTrace(text)
  t.same(events.map(e => e.kind), ['s', 'mc'])
  t.equal(events[0].fields.pause, 3.5)
  t.equal(events[0].fields['background.scavenge.parallel'], 2.28)
  t.equal(events[0].fields.promotion_ratio, 6.5, 'a percentage is read as its number')
  t.equal(events[1].fields.allocated, 5998424)
  const s = summarizeGc(events, 1000)
  t.equal(s.allocatedBytesPerRequest, Math.round((12549344 + 5998424) / 1000))
  t.equal(s.promotedBytesPerRequest, Math.round((868248 + 6026472) / 1000))
  t.equal(s.scavengesPer1000Requests, 1)
  t.equal(s.markCompacts, 1)
  t.equal(s.pauseMicrosPerRequest, 25.2, '(3.5 + 21.7) ms over 1000 requests')
  t.equal(s.backgroundMicrosPerRequest, 5.2, 'every background.* field: 2.28 + 0.02 + 1.9 + 1.0')
})

t.test('no collection: zeros, never NaN', async t => {
  t.same(summarizeGc(parseGcTrace('nothing here\n'), 500), {
    allocatedBytesPerRequest: 0, promotedBytesPerRequest: 0, scavengesPer1000Requests: 0, markCompacts: 0, pauseMicrosPerRequest: 0, backgroundMicrosPerRequest: 0
  })
})

t.test('the trace of a real process: what it allocated is what the collections report', async t => {
  // 200,000 arrays of 250 small integers, each dropped at once: ~2 KB each on a 64-bit Node (8-byte
  // slots), ~406 MB in all. The collections report all of it but what follows the last one (at most
  // a young generation: 16 MB by default), and nothing lives long enough to be promoted.
  const script = 'let keep = 0; for (let i = 0; i < 200_000; i++) keep += new Array(250).fill(i).length; console.log(keep)'
  // Without the test runner's loaders and coverage, whose start-up objects do live long.
  const r = spawnSync(process.execPath, ['--trace-gc-nvp', '-e', script], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '', NODE_V8_COVERAGE: '' } })
  t.equal(r.status, 0, r.stderr)
  const events = parseGcTrace(r.stdout)
  t.equal(r.stdout.split('\n').at(-2), '50000000', 'the loop ran')
  t.ok(events.length >= 5, `collections traced: ${events.length}`)
  t.ok(events.every(e => e.kind === 's'), 'only scavenges: nothing lives long')
  const s = summarizeGc(events, 1)
  t.ok(s.allocatedBytesPerRequest > 380e6 && s.allocatedBytesPerRequest < 440e6, `allocated ${s.allocatedBytesPerRequest} bytes`)
  t.ok(s.promotedBytesPerRequest < s.allocatedBytesPerRequest / 100, `promoted ${s.promotedBytesPerRequest} bytes`)
})
