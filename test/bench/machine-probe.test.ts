/**
 * The bench's machine probe (bench/machine-probe.ts): a fixed CPU loop run alone between the
 * blocks, whose spread the results report, so a target left unjudged can be read against how much
 * the machine itself swung.
 */
import t from 'tap'
import { probeMachine } from '../../bench/machine-probe.js'
import { describeProbe, MAX_ROUND_SPREAD, renderMarkdown, renderText, type Results } from '../../bench/report.js'

t.test('a real probe: one count per window, in a child process handed to the pin', async t => {
  const pinned: Array<number | undefined> = []
  const probe = await probeMachine(3, 100, pid => pinned.push(pid))
  t.equal(probe.windowMs, 100)
  t.equal(probe.loopsPerSecond.length, 3, 'three windows (the warm-up window is not counted)')
  for (const n of probe.loopsPerSecond) t.ok(Number.isInteger(n) && n > 0, `${n} passes per second`)
  t.equal(pinned.length, 1)
  t.ok(typeof pinned[0] === 'number' && pinned[0] !== process.pid, 'the child, not the driver, is pinned')
})

t.test('a probe killed midway rejects (the run logs it and goes on without its figure)', async t => {
  await t.rejects(probeMachine(2, 1000, pid => { if (pid !== undefined) process.kill(pid, 'SIGKILL') }), /the machine probe exited with SIGKILL/)
})

t.test('the note: the range when the machine held, a warning when it swung past the bound', async t => {
  t.equal(describeProbe(undefined, MAX_ROUND_SPREAD), null, 'no probe, no note')
  t.equal(describeProbe({ windowMs: 3000, loopsPerSecond: [] }, MAX_ROUND_SPREAD), null)
  const steady = describeProbe({ windowMs: 3000, loopsPerSecond: [100_000, 110_000] }, MAX_ROUND_SPREAD)
  t.equal(steady, 'Machine: a fixed CPU loop alone on the servers\' CPU ran 100,000–110,000 passes per second in 2 windows of 3 s between the blocks (1.10× apart).')
  const swung = describeProbe({ windowMs: 1000, loopsPerSecond: [37_693, 65_827, 50_000] }, MAX_ROUND_SPREAD) ?? ''
  t.match(swung, /^Warning: this machine's own speed swung: a fixed CPU loop .* ran 37,693–65,827 passes per second in 3 windows of 1 s between the blocks \(1\.75× apart\)/)
  t.match(swung, /moved more than 1\.3× are not judged/)
  t.match(describeProbe({ windowMs: 1000, loopsPerSecond: [0, 10] }, MAX_ROUND_SPREAD), /^Warning: .*\(a window that counted nothing\)/)
})

t.test('the results carry the note under the table, in the terminal and in results.md', async t => {
  const res: Results = {
    meta: { date: '2026-12-02T00:00:00Z', node: 'v20', cpu: 'cpu', cores: 2, memGiB: 24, command: 'npm run bench', probe: { windowMs: 3000, loopsPerSecond: [40_000, 70_000] } },
    options: { rounds: 3, duration: 3, warmup: 2 },
    rows: [],
    parallel: [],
    idle: [],
    targets: []
  }
  t.match(renderText(res), /\nWarning: this machine's own speed swung: .*40,000–70,000 .*\(1\.75× apart\)/)
  t.match(renderMarkdown(res), /\n> Warning: this machine's own speed swung: .*40,000–70,000/)
  delete res.meta.probe
  t.notMatch(renderMarkdown(res), /Machine:|swung/, 'results without a probe (older results.json) render as before')
})
