// The coverage floor that npm test checks after tap (scripts/coverage-floor.ts).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { ROOT } from '../../scripts/tiers.js'
import {
  METRICS, belowFloor, coverageUnder, raisedFloor, readFloor, repairSourcesContent,
  type Counts, type Floor, type Summary
} from '../../scripts/coverage-floor.js'

const counts = (total: number, covered: number): Counts => Object.fromEntries(METRICS.map(m =>
  [m, { total, covered, pct: total === 0 ? 100 : Math.floor(covered / total * 10000) / 100 }])) as Counts

/** A json-summary as tap writes it: absolute paths, a `total` over every file. */
const summary: Summary = {
  total: counts(400, 400),
  [join(ROOT, 'lib/a.ts')]: counts(100, 90),
  [join(ROOT, 'lib/sub/b.ts')]: counts(100, 80),
  [join(ROOT, 'bench/report.ts')]: counts(100, 0),
  [join(ROOT, 'library/c.ts')]: counts(100, 0)
}
const floor = (n: number): Floor => ({ lines: n, branches: n, functions: n, statements: n })

t.test('only lib/ counts, summed over its files', async t => {
  const lib = coverageUnder(summary, ROOT)
  for (const m of METRICS) t.same(lib[m], { total: 200, covered: 170, pct: 85 }, m)
  t.equal(coverageUnder({ total: counts(3, 2) }, ROOT).lines.pct, 0, 'no lib/ file recorded: nothing covered')
  t.equal(coverageUnder({ [join(ROOT, 'lib/x.ts')]: counts(3, 2) }, ROOT).lines.pct, 66.66, 'rounded down')
})

t.test('at or above the floor: passes; below it: one failure per metric', async t => {
  const lib = coverageUnder(summary, ROOT)
  t.same(belowFloor(lib, floor(85)), [])
  t.same(belowFloor(lib, floor(0)), [])
  const failures = belowFloor(lib, floor(85.01))
  t.equal(failures.length, 4)
  for (const m of METRICS) t.ok(failures.some(f => f.startsWith(`${m}: 85% is below the floor of 85.01%`)), m)
  const one = belowFloor(lib, { ...floor(50), branches: 90 })
  t.same(one, ['branches: 85% is below the floor of 90%'])
})

t.test('a non-number in the summary fails rather than passes', async t => {
  const lib = coverageUnder(summary, ROOT)
  t.equal(belowFloor({ ...lib, lines: { ...lib.lines, pct: 'Unknown' } }, floor(0)).length, 1)
})

t.test('--raise raises to today less the margin, never lowers', async t => {
  const lib = coverageUnder(summary, ROOT)
  t.same(raisedFloor(lib, floor(10)), floor(84.8))
  t.same(raisedFloor(lib, floor(90)), floor(90))
})

t.test('the floor file: four numbers from 0 to 100', async t => {
  const dir = t.testdir({
    'ok.json': JSON.stringify({ note: 'n', ...floor(50) }),
    'missing.json': JSON.stringify({ lines: 1, branches: 1, functions: 1 }),
    'high.json': JSON.stringify({ ...floor(50), lines: 101 })
  })
  t.same(readFloor(join(dir, 'ok.json')), floor(50))
  t.throws(() => readFloor(join(dir, 'missing.json')), /"statements" must be a number/)
  t.throws(() => readFloor(join(dir, 'high.json')), /"lines" must be a number/)
  const repo = readFloor(join(ROOT, 'scripts/coverage-floor.json'))
  t.same(Object.keys(repo), [...METRICS], "the repository's floor reads")
})

t.test("tsx's empty sourcesContent is dropped, so the report reads the .ts from disk", async t => {
  const entry = (content: unknown): unknown => ({ lineLengths: [3], data: { version: 3, sources: ['file:///x.ts'], sourcesContent: content, mappings: '' } })
  const dir = t.testdir({
    'a.json': JSON.stringify({ result: [], 'source-map-cache': { 'file:///x.ts': entry([null]), 'file:///y.ts': entry(['const y = 1']) } }),
    'b.json': JSON.stringify({ result: [] }),
    'notes.txt': 'not coverage'
  })
  t.equal(repairSourcesContent(dir), 1)
  const a = JSON.parse(readFileSync(join(dir, 'a.json'), 'utf8'))
  t.notOk('sourcesContent' in a['source-map-cache']['file:///x.ts'].data, 'dropped')
  t.same(a['source-map-cache']['file:///y.ts'].data.sourcesContent, ['const y = 1'], 'real content kept')
  t.equal(repairSourcesContent(dir), 0, 'idempotent')
})
