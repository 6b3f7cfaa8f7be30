/**
 * The capacity section's text (bench/capacity-report.ts): what it says is computed from the run,
 * not written once — the failover counts after the kill, the contention verdict and lost updates,
 * one `<!-- part -->` block per part run.
 */
import t from 'tap'
import { renderCapacity, type Capacity } from '../../bench/capacity-report.js'

function capacity (over: Partial<Capacity> = {}): Capacity {
  return {
    meta: { date: '2026-12-07T10:00:00.000Z', load: [1, 1, 1], calls: 100, records: 100, rounds: 3, cores: 2, cpu: 'Test CPU' },
    backend: [],
    contention: [],
    size: { atRest: [], perCall: [] },
    failover: [],
    ...over
  }
}

const instance = (p99: number): { calls: number, p50: number, p99: number } => ({ calls: 10, p50: p99 / 2, p99 })

t.test('only the parts run get a block', async t => {
  const { markdown, charts } = renderCapacity(capacity({
    failover: [{ variant: 'without waitReplicas', bins: [], firstSuccessMs: 2000, calls: 0, acknowledgedLost: 0 }]
  }))
  t.match(markdown, /<!-- part:failover -->[\s\S]*<!-- \/part:failover -->/)
  t.notMatch(markdown, /part:contention|part:backend|part:size/)
  t.same(Object.keys(charts), ['capacity-failover-1.svg'])
})

t.test('failover: ok / refused / unknown counted from the kill on; the machine and date named', async t => {
  const bins = [
    { atMs: -100, ok: 9, refused: 0, unknown: 0 },
    { atMs: 0, ok: 0, refused: 4, unknown: 1 },
    { atMs: 100, ok: 3, refused: 2, unknown: 0 }
  ]
  const { markdown } = renderCapacity(capacity({ failover: [{ variant: 'waitReplicas 1', bins, firstSuccessMs: Number.NaN, calls: 19, acknowledgedLost: 0 }] }))
  t.match(markdown, /\| waitReplicas 1 \| 19 \| – \| 3 \/ 6 \/ 1 \| 0 \|/, 'the bin before the kill left out; no success: a dash')
  t.match(markdown, /\(2026-12-07, 2 × Test CPU\)/)
  t.match(markdown, /no call answered ok was lost/)
  const lost = renderCapacity(capacity({ failover: [{ variant: 'without waitReplicas', bins, firstSuccessMs: 100, calls: 19, acknowledgedLost: 2 }] })).markdown
  t.match(lost, /2 appends answered ok were lost/)
  t.notMatch(lost, /no call answered ok was lost/)
})

t.test('contention: the verdict at the largest N, and lost updates said when there are any', async t => {
  const row = (backend: string, parallel: number, ratio: number, p99s: number[], lostUpdates = 0): Capacity['contention'][number] =>
    ({ backend, parallel, serialUnitMs: 2, ratio, perInstance: p99s.map(instance), lostUpdates, load: 1 })
  const kept = renderCapacity(capacity({ contention: [row('redis', 10, 2, [5, 5, 5]), row('redis', 100, 0.9, [100, 150, 50])] })).markdown
  t.match(kept, /at 100 parallel calls, Redis 0\.90× the floor, the slowest instance's p99 3\.00× the fastest's/)
  t.match(kept, /Every update was kept/)
  const lost = renderCapacity(capacity({ contention: [row('postgres', 1, 1, [5, Number.NaN, Number.NaN], 2), row('postgres', 50, 1.2, [10, 10, 10], 1)] })).markdown
  t.match(lost, /at 50 parallel calls, PostgreSQL 1\.20× the floor, the slowest instance's p99 1\.00× the fastest's/)
  t.match(lost, /3 updates answered ok were lost/)
  t.notMatch(lost, /Every update was kept/)
})
