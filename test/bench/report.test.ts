/**
 * The bench's target verdicts (bench/report.ts): a ratio read from rows whose rounds swung too far
 * apart is reported as not judged, with the rows that swung, instead of "met" or "not met".
 */
import t from 'tap'
import { addRatios, BARE, checkTargets, MAX_ROUND_SPREAD, OURS_MEMORY, renderMarkdown, renderText, roundSpread, type Results, type Row } from '../../bench/report.js'

/** A row of the modern block at c=50 whose rounds ran at `rates` req/s (CPU per request their inverse). */
function row (server: string, rates: number[]): Row {
  const perRound = rates.map(reqPerSec => ({ reqPerSec, p50: 1, p99: 2, cpuUsPerReq: 1e6 / reqPerSec, rssMiB: 80, otherCores: 0 }))
  const sorted = [...rates].sort((a, b) => a - b)
  const mid = sorted[Math.floor(sorted.length / 2)] as number
  return {
    scenario: 'modern', title: 'modern tools/call (JSON)', connections: 50, server, baseline: BARE, isBaseline: server === BARE,
    rounds: rates.length, reqPerSec: mid, p50: 1, p99: 2, cpuUsPerReq: 1e6 / mid, rssMiB: 80, otherCores: 0, failures: 0,
    statusCodes: { 200: 1 }, ratio: { reqPerSec: NaN, p50: NaN, p99: NaN, cpuUsPerReq: NaN, rssMiB: NaN }, perRound
  }
}

function results (bare: number[], ours: number[]): Results {
  const rows = [row(BARE, bare), row(OURS_MEMORY, ours)]
  addRatios(rows)
  const res: Results = { meta: { date: '2026-12-02T00:00:00Z', node: 'v20', cpu: 'cpu', cores: 2, memGiB: 24, command: 'npm run bench' }, options: { rounds: 3, duration: 3, warmup: 2 }, rows, parallel: [], idle: [], targets: [] }
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

t.test('a baseline whose rounds swung: the targets that read it are not judged, and say why', async t => {
  const res = results([9_600, 18_700, 12_400], [11_800, 11_900, 12_000])
  t.ok(roundSpread(res.rows[0] as Row, 'reqPerSec') > MAX_ROUND_SPREAD)
  const target = reqTarget(res)
  t.equal(target?.pass, true, 'the medians alone would read "met" (11.9k / 12.4k = 0.96×)')
  t.match(target?.unsteady, /^bare Fastify route: rounds 1\.95× apart$/)
  t.match(renderText(res), /UNSTEADY {2}modern tools\/call JSON, c=50: req\/s vs bare Fastify: 0\.96× \(want ≥ 0\.9×\) — not judged: bare Fastify route/)
  t.match(renderMarkdown(res), /\| not judged \(unsteady: bare Fastify route: rounds 1\.95× apart\) \|/)
  t.notMatch(renderMarkdown(res), /\| met \|/, 'neither target of the block reads met')
})

t.test('the row measured swung: not judged either', async t => {
  const target = reqTarget(results([60_000, 61_000, 62_000], [40_000, 56_000, 57_000]))
  t.match(target?.unsteady, /^ours, memory store: rounds 1\.43× apart$/)
})
