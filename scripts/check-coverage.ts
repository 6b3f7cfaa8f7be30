/**
 * `npm run coverage`, run by `npm test` after `tap`: prints the coverage of lib/ that the last tap
 * run recorded and fails when a metric is below scripts/coverage-floor.json. tap's own coverage
 * check (--lines and the like) would read the report before scripts/coverage-floor.ts repairs it.
 *
 *   tsx scripts/check-coverage.ts            print and check
 *   tsx scripts/check-coverage.ts --raise    also raise the floor to today's numbers (never lowers it)
 *
 * It reads whatever the last tap run recorded: after `npm test` that is the whole suite, the run
 * the floor is set from; after a run of a few files it is only theirs.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT } from './tiers.js'
import { METRICS, belowFloor, coverageUnder, raisedFloor, readFloor, repairSourcesContent, type Summary } from './coverage-floor.js'

const COVERAGE_DIR = join(ROOT, '.tap', 'coverage')
const SUMMARY = join(ROOT, '.tap', 'report', 'coverage-summary.json')
const TAP = join(ROOT, 'node_modules', '.bin', 'tap')
const FLOOR_FILE = join(ROOT, 'scripts', 'coverage-floor.json')

function main (argv: string[]): number {
  if (!existsSync(COVERAGE_DIR) || readdirSync(COVERAGE_DIR).length === 0) {
    console.error('coverage: no coverage recorded; run tap (without --disable-coverage) first')
    return 1
  }
  repairSourcesContent(COVERAGE_DIR)
  const report = spawnSync(TAP, ['report', 'json-summary', 'text-summary'], { cwd: ROOT, stdio: 'inherit' })
  if (report.error !== undefined || report.status !== 0) {
    console.error('coverage: `tap report` failed', report.error ?? `(exit ${report.status})`)
    return 1
  }
  const total = coverageUnder(JSON.parse(readFileSync(SUMMARY, 'utf8')) as Summary, ROOT)
  console.log(`coverage of lib/: ${METRICS.map(m => `${m} ${total[m].pct}%`).join(', ')}`)
  const floor = readFloor(FLOOR_FILE)
  if (argv.includes('--raise')) {
    const raised = raisedFloor(total, floor)
    const file = JSON.parse(readFileSync(FLOOR_FILE, 'utf8')) as Record<string, unknown>
    writeFileSync(FLOOR_FILE, JSON.stringify({ ...file, ...raised }, null, 2) + '\n')
    console.log(`coverage: floor now ${JSON.stringify(raised)}`)
    return 0
  }
  const failures = belowFloor(total, floor)
  if (failures.length > 0) {
    console.error(`coverage fell below the floor (scripts/coverage-floor.json):\n  ${failures.join('\n  ')}`)
    console.error('Cover the new code with tests; `npx tap report text` lists the uncovered lines per file.')
    return 1
  }
  console.log(`coverage: at or above the floor ${JSON.stringify(floor)}`)
  return 0
}

process.exitCode = main(process.argv.slice(2))
