/**
 * Runs a test tier (the tiers: scripts/tiers.ts, CONTRIBUTING.md).
 *
 *   tsx scripts/test-tiers.ts quick [tap options]   run the quick tier
 *   tsx scripts/test-tiers.ts list                  print every test file's tier and why, then the counts
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { ROOT, classify, quickFiles, testFiles } from './tiers.js'

const TAP = join(ROOT, 'node_modules', '.bin', 'tap')

function main (argv: string[]): void {
  const [command, ...rest] = argv
  if (command === 'list') {
    const files = testFiles()
    let quick = 0
    for (const f of files) {
      const { tier, reasons } = classify(f)
      if (tier === 'quick') quick++
      console.log(`${tier.padEnd(5)} ${f}${reasons.length > 0 ? `  — ${reasons.join('; ')}` : ''}`)
    }
    console.log(`${quick} quick and ${files.length - quick} full, of ${files.length} test files`)
    return
  }
  if (command !== 'quick') {
    console.error('usage: tsx scripts/test-tiers.ts quick [tap options] | list')
    process.exitCode = 2
    return
  }
  const files = quickFiles()
  console.log(`test:quick: ${files.length} of ${testFiles().length} test files (\`tsx scripts/test-tiers.ts list\` says which and why)`)
  const tap = spawn(TAP, [...rest, ...files], { cwd: ROOT, stdio: 'inherit' })
  tap.once('error', err => { console.error(err); process.exitCode = 1 })
  tap.once('exit', code => { process.exitCode = code ?? 1 })
}

main(process.argv.slice(2))
