/**
 * Runs a test tier (the tiers: scripts/tiers.ts, CONTRIBUTING.md).
 *
 *   tsx scripts/test-tiers.ts quick [tap options]   run the quick tier
 *   tsx scripts/test-tiers.ts list                  print every test file's tier and why
 */
import { spawn } from 'node:child_process'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ROOT, classify, quickFiles, testFiles } from './tiers.js'

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
  const tap = spawn('tap', [...rest, ...files], { cwd: ROOT, stdio: 'inherit' })
  tap.once('error', err => { console.error(err); process.exitCode = 1 })
  tap.once('exit', (code, signal) => { process.exitCode = code ?? (signal === null ? 1 : 128) })
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main(process.argv.slice(2))
