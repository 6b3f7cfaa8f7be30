/**
 * The coverage floor (scripts/check-coverage.ts runs it after `tap` in `npm test`): the suite's
 * coverage of lib/ may rise, never fall below the numbers in scripts/coverage-floor.json.
 * Only lib/ counts: the report also holds the bench/, examples/ and scripts/ files tests load.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, relative, sep } from 'node:path'

export const METRICS = ['lines', 'branches', 'functions', 'statements'] as const
export type Metric = typeof METRICS[number]
export type Floor = Record<Metric, number>

/** One file's (or the total's) numbers in an istanbul json-summary report. */
export type Counts = Record<Metric, { total: number, covered: number, pct: number | string }>

/** An istanbul json-summary report: `total` and one entry per file, keyed by absolute path. */
export type Summary = Record<string, Counts>

/** The coverage of the files under `dir` (root-relative), summed from a summary's file entries. */
export function coverageUnder (summary: Summary, root: string, dir = 'lib'): Counts {
  const sums = Object.fromEntries(METRICS.map(m => [m, { total: 0, covered: 0, pct: 0 }])) as Counts
  for (const [file, counts] of Object.entries(summary)) {
    if (file === 'total' || !relative(root, file).startsWith(dir + sep)) continue
    for (const metric of METRICS) {
      sums[metric].total += counts[metric].total
      sums[metric].covered += counts[metric].covered
    }
  }
  for (const metric of METRICS) {
    const { total, covered } = sums[metric]
    // Rounded down: 99.999% is not 100%. No lib/ file recorded (a run of other tests only) is
    // nothing covered, not a pass.
    sums[metric].pct = total === 0 ? 0 : Math.floor(covered / total * 10000) / 100
  }
  return sums
}

/**
 * Makes the V8 coverage tap recorded (in `dir`, normally .tap/coverage) readable for the report.
 * tsx compiles each .ts file without `sourcesContent` in its source map, which node hands on as
 * `[null]`; v8-to-istanbul then takes `null` for the file's text and counts every file as one
 * covered line (everything reads 100%). Without the field it reads the .ts file from disk.
 * Returns how many source maps it changed.
 */
export function repairSourcesContent (dir: string): number {
  let repaired = 0
  for (const name of readdirSync(dir).filter(f => f.endsWith('.json'))) {
    const path = join(dir, name)
    const coverage = JSON.parse(readFileSync(path, 'utf8')) as { 'source-map-cache'?: Record<string, { data?: { sourcesContent?: unknown[] } }> }
    let changed = 0
    for (const entry of Object.values(coverage['source-map-cache'] ?? {})) {
      const content = entry.data?.sourcesContent
      if (entry.data !== undefined && Array.isArray(content) && content.every(c => c === null || c === undefined)) {
        delete entry.data.sourcesContent
        changed++
      }
    }
    if (changed > 0) writeFileSync(path, JSON.stringify(coverage))
    repaired += changed
  }
  return repaired
}

/** One line per metric whose coverage is below its floor (none: the floor holds). */
export function belowFloor (total: Counts, floor: Floor): string[] {
  const failures: string[] = []
  for (const metric of METRICS) {
    const pct = Number(total[metric].pct)
    if (!(pct >= floor[metric])) failures.push(`${metric}: ${total[metric].pct}% is below the floor of ${floor[metric]}%`)
  }
  return failures
}

/**
 * How far below today's numbers `--raise` sets the floor, in percentage points: a few lines are
 * covered or not by timing (a retry, a timeout's branch), and the floor must not fail on them.
 */
export const RAISE_MARGIN = 0.2

/** The floor raised to today's coverage less {@link RAISE_MARGIN}, to 0.1; never lowered. */
export function raisedFloor (total: Counts, floor: Floor): Floor {
  const raised = { ...floor }
  for (const metric of METRICS) {
    const today = Math.floor((Number(total[metric].pct) - RAISE_MARGIN) * 10) / 10
    if (today > raised[metric]) raised[metric] = today
  }
  return raised
}

/** Reads a floor file: each metric a number from 0 to 100. */
export function readFloor (path: string): Floor {
  const raw = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>
  const floor = {} as Floor
  for (const metric of METRICS) {
    const value = raw[metric]
    if (typeof value !== 'number' || !(value >= 0 && value <= 100)) throw new Error(`${path}: "${metric}" must be a number from 0 to 100`)
    floor[metric] = value
  }
  return floor
}
