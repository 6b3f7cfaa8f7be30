/**
 * Runs a test tier (the tiers: scripts/tiers.ts, CONTRIBUTING.md).
 *
 *   tsx scripts/test-tiers.ts quick [tap options]   run the quick tier (compiled: scripts/quick-mirror.ts)
 *   tsx scripts/test-tiers.ts list                  print every test file's tier and why, then the counts
 */
import { spawn } from 'node:child_process'
import { rmSync } from 'node:fs'
import { join, relative } from 'node:path'
import { ROOT, classify, quickFiles, testFiles } from './tiers.js'
import { MIRRORS, buildMirror, removeStaleMirrors } from './quick-mirror.js'

const TAP = join(ROOT, 'node_modules', '.bin', 'tap')

async function main (argv: string[]): Promise<void> {
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
  removeStaleMirrors(ROOT)
  const mirror = join(ROOT, MIRRORS, String(process.pid))
  const compiled = await buildMirror(ROOT, mirror)
  console.log(`test:quick: ${compiled} TypeScript files compiled into ${relative(ROOT, mirror)}/, where tap runs them`)
  const tap = spawn(TAP, [...rest, ...files.map(f => f.replace(/\.ts$/, '.js'))], { cwd: mirror, stdio: 'inherit' })
  const code = await new Promise<number | null>(resolve => {
    tap.once('error', err => { console.error(err); resolve(1) })
    tap.once('exit', resolve)
  })
  rmSync(mirror, { recursive: true, force: true })
  process.exitCode = code ?? 1
}

main(process.argv.slice(2)).catch((err: unknown) => { console.error(err); process.exitCode = 1 })
