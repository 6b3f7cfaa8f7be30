/**
 * The bench's target verdicts (bench/report.ts): a ratio is taken round by round (the servers of a
 * block take turns within each round), and one whose round-by-round values swung too far apart is
 * reported as not judged, with the rows that swung, instead of "met" or "not met".
 */
import t from 'tap'
import { addRatios, BARE, checkTargets, MAX_ROUND_SPREAD, OURS_MEMORY, pairedRatio, renderMarkdown, renderText, roundRatios, type Results, type Row } from '../../bench/report.js'

/** A row of the modern block at c=50 whose rounds ran at `rates` req/s (CPU per request their inverse). */
function row (server: string, rates: number[]): Row {
  const perRound = rates.map(reqPerSec => ({ reqPerSec, p50: 1, p99: 2, cpuUsPerReq: 1e6 / reqPerSec, rssMiB: 80, otherCores: 0 }))
  const sorted = [...rates].sort((a, b) => a - b)
  const mid = sorted[Math.floor(sorted.length / 2)] as number
  return {
    scenario: 'modern',
    title: 'modern tools/call (JSON)',
    connections: 50,
    server,
    baseline: BARE,
    isBaseline: server === BARE,
    rounds: rates.length,
    reqPerSec: mid,
    p50: 1,
    p99: 2,
    cpuUsPerReq: 1e6 / mid,
    rssMiB: 80,
    otherCores: 0,
    failures: 0,
    statusCodes: { 200: 1 },
    ratio: { reqPerSec: NaN, p50: NaN, p99: NaN, cpuUsPerReq: NaN, rssMiB: NaN },
    perRound
  }
}

function results (bare: number[], ours: number[]): Results {
  const rows = [row(BARE, bare), row(OURS_MEMORY, ours)]
  addRatios(rows)
  const res: Results = {
    meta: { date: '2026-12-02T00:00:00Z', node: 'v20', cpu: 'cpu', cores: 2, memGiB: 24, command: 'npm run bench' },
    options: { rounds: 3, duration: 3, warmup: 2 },
    rows,
    parallel: [],
    idle: [],
    targets: []
  }
  res.targets = checkTargets(res)
  return res
}

const reqTarget = (res: Results): Results['targets'][number] | undefined => res.targets.find(x => x.name === 'modern tools/call JSON, c=50: req/s vs bare Fastify')

t.test('steady rounds: the ratio is judged', async t => {
  const res = results([60_000, 62_000, 63_000], [55_000, 56_000, 57_000])
  const target = reqTarget(res)
  t.equal(target?.unsteady, undefined)
  t.equal(target?.pass, true, '56k / 62k = 0.90×')
  t.match(renderText(res), /PASS {2}modern tools\/call JSON, c=50: req\/s vs bare Fastify/)
})

t.test('a baseline whose rounds swung and the row that did not: the targets that read them are not judged, and say why', async t => {
  const res = results([9_600, 18_700, 12_400], [11_800, 11_900, 12_000])
  const ratios = roundRatios(res.rows[1] as Row, res.rows[0] as Row, 'reqPerSec') as number[]
  t.ok(Math.max(...ratios) / Math.min(...ratios) > MAX_ROUND_SPREAD)
  const target = reqTarget(res)
  t.equal(target?.pass, true, 'the ratio alone would read "met" (round ratios 1.23, 0.64, 0.97: median 0.97×)')
  t.match(target?.unsteady, /^ours, memory store over bare Fastify route: round ratios 1\.93× apart$/)
  t.match(renderText(res), /UNSTEADY {2}modern tools\/call JSON, c=50: req\/s vs bare Fastify: 0\.97× \(want ≥ 0\.9×\) — not judged: ours, memory store over bare Fastify route/)
  t.match(renderMarkdown(res), /\| not judged \(unsteady: ours, memory store over bare Fastify route: round ratios 1\.93× apart\) \|/)
  t.notMatch(renderMarkdown(res), /\| met \|/, 'neither target of the block reads met')
})

t.test('the row measured swung: not judged either', async t => {
  const target = reqTarget(results([60_000, 61_000, 62_000], [40_000, 56_000, 57_000]))
  t.match(target?.unsteady, /^ours, memory store over bare Fastify route: round ratios 1\.38× apart$/)
})

t.test('the machine slowed and sped up under both servers alike: the ratio holds round by round and is judged', async t => {
  // Each row's rounds are 2× apart, which the rule on each row's own rounds would not judge.
  const res = results([10_000, 20_000, 15_000], [8_900, 18_000, 13_600])
  const target = reqTarget(res)
  t.equal(target?.unsteady, undefined)
  t.equal(target?.got, '0.90×', 'round ratios 0.89, 0.90, 0.91')
  t.equal(target?.pass, true)
  const cpu = res.targets.find(x => x.name === 'modern tools/call JSON, c=50: CPU/request vs bare Fastify')
  t.equal(cpu?.unsteady, undefined)
  t.equal(cpu?.got, '1.11×')
})

t.test('the ratio is the median of the rounds\' ratios, not the quotient of the medians', async t => {
  // Ours kept to 0.9× the baseline in two rounds of three; the medians (15k and 15k) come from the
  // third, where it did not.
  const bare = row(BARE, [20_000, 10_000, 15_000])
  const ours = row(OURS_MEMORY, [18_000, 9_000, 15_000])
  t.same(roundRatios(ours, bare, 'reqPerSec'), [0.9, 0.9, 1])
  t.equal(pairedRatio(ours, bare, 'reqPerSec'), 0.9)
  t.equal(ours.reqPerSec / bare.reqPerSec, 1, 'the quotient of the medians would read 1.00×')
})

t.test('rows whose rounds do not pair up: each row is held to the bound on its own rounds', async t => {
  const bare = row(BARE, [60_000, 61_000, 62_000])
  const ours = row(OURS_MEMORY, [40_000, 56_000])
  t.equal(roundRatios(ours, bare, 'reqPerSec'), null)
  t.equal(pairedRatio(ours, bare, 'reqPerSec'), ours.reqPerSec / bare.reqPerSec)
  const rows = [bare, ours]
  addRatios(rows)
  const target = checkTargets({ rows, parallel: [], idle: [] }).find(x => x.name === 'modern tools/call JSON, c=50: req/s vs bare Fastify')
  t.match(target?.unsteady, /^ours, memory store: rounds 1\.40× apart$/)
})

t.test('a round that answered nothing: the ratio is not judged', async t => {
  const bare = row(BARE, [60_000, 0, 62_000])
  const ours = row(OURS_MEMORY, [0, 0, 57_000])
  const rows = [bare, ours]
  addRatios(rows)
  const target = checkTargets({ rows, parallel: [], idle: [] }).find(x => x.name === 'modern tools/call JSON, c=50: req/s vs bare Fastify')
  t.equal(target?.unsteady, 'ours, memory store over bare Fastify route: a round with nothing to compare')
})
