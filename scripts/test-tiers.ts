/**
 * Runs a test tier (the tiers: scripts/tiers.ts, CONTRIBUTING.md).
 *
 *   tsx scripts/test-tiers.ts quick [tap options]   run the quick tier
 *   tsx scripts/test-tiers.ts list                  print every test file's tier and why
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { ROOT, classify, quickFiles, testFiles } from './tiers.js'

const TAP = join(ROOT, 'node_modules', '.bin', 'tap')

function main (argv: string[]): void {
  const [command, ...rest] = argv
  if (command === 'list') {
    for (const f of testFiles()) {
      const { tier, reasons } = classify(f)
      console.log(`${tier.padEnd(5)} ${f}${reasons.length > 0 ? `  — ${reasons.join('; ')}` : ''}`)
    }
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
