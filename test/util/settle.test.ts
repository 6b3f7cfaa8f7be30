/** settleWithin (lib/util/settle.ts): the bounded wait every close and drain uses. */
import t from 'tap'
import { settleWithin } from '../../lib/util/settle.js'

t.test('true once the work settles, fulfilled or rejected; false after the bound; never rejects', async t => {
  t.equal(await settleWithin(Promise.resolve(1), 1000), true)
  t.equal(await settleWithin(Promise.reject(new Error('boom')), 1000), true, 'a failed close is over, not a crash')
  const started = Date.now()
  t.equal(await settleWithin(new Promise(() => {}), 50), false, 'a hang ends at the bound')
  t.ok(Date.now() - started < 5000, 'and not much later')
})

t.test('the timer is cleared once the work settles: nothing is left to hold the process', async t => {
  const before = process.getActiveResourcesInfo().filter(r => r === 'Timeout').length
  await settleWithin(Promise.resolve(), 60_000)
  t.equal(process.getActiveResourcesInfo().filter(r => r === 'Timeout').length, before)
})

t.test('keepAlive: false does not hold the process open by itself', async t => {
  const { spawnSync } = await import('node:child_process')
  // A child whose only pending thing is the bounded wait of a hanging promise: it exits at once.
  const code = "import('" + new URL('../../lib/util/settle.ts', import.meta.url).href + "').then(m => m.settleWithin(new Promise(() => {}), 60000, { keepAlive: false }))"
  const started = Date.now()
  const r = spawnSync(process.execPath, ['--import', 'tsx', '-e', code], { encoding: 'utf8', timeout: 30_000 })
  t.equal(r.status, 0, r.stderr)
  t.ok(Date.now() - started < 20_000, 'exited without waiting for the 60 s bound')
})
