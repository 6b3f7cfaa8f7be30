/**
 * How steady the machine itself is: a fixed CPU-bound loop, alone on the servers' CPUs (nothing
 * else of the bench runs while it does), counted in windows of the length of a measured run. On a
 * shared VM the speed of a core can swing by more than the bound the targets are judged within
 * (MAX_ROUND_SPREAD) from one second to the next, with no load at all; the results say so
 * (`describeProbe` in report.ts), so a "not judged" reads as the machine's doing and not as the servers'.
 */
import { spawn } from 'node:child_process'

/** What the probe counted: loops per second in each window, in the order they ran. */
export interface MachineProbe {
  windowMs: number
  loopsPerSecond: number[]
}

/**
 * The child's program: counts passes of a fixed arithmetic loop over a small array (cache-resident,
 * no allocation, no syscall but the clock) in each window and prints them as one JSON line.
 */
const PROGRAM = `
const [windows, windowMs] = process.argv.slice(-2).map(Number)
const a = new Float64Array(1024).fill(1)
const out = []
let sink = 0
// Window -1, 200 ms, is a warm-up (the loop compiled, the process moved to its CPUs): not counted.
for (let w = -1; w < windows; w++) {
  const start = performance.now()
  const length = w < 0 ? 200 : windowMs
  let passes = 0
  while (performance.now() - start < length) {
    for (let i = 0; i < 10000; i++) sink += a[i & 1023] * i
    passes++
  }
  if (w >= 0) out.push(Math.round(passes * 1000 / (performance.now() - start)))
}
console.log(JSON.stringify({ out, sink: sink > 0 }))
`

/** Runs the probe for `windows` windows of `windowMs` each; `pin` moves it where the servers run. */
export async function probeMachine (windows: number, windowMs: number, pin: (pid: number | undefined) => unknown): Promise<MachineProbe> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', PROGRAM, '--', String(windows), String(windowMs)], {
    stdio: ['ignore', 'pipe', 'inherit']
  })
  pin(child.pid)
  let stdout = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  const code = await new Promise<number | null>((resolve, reject) => { child.once('error', reject).once('exit', resolve) })
  if (code !== 0) throw new Error(`the machine probe exited with ${String(code ?? child.signalCode)}`)
  const { out } = JSON.parse(stdout) as { out: number[] }
  return { windowMs, loopsPerSecond: out }
}
