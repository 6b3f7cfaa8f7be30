/** RenewalClock (lib/locks/renewal.ts) on its own: what one tick does to the leases it walks. */
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { RenewalClock, type Renewal } from '../../lib/locks/renewal.js'
import { until } from '../helpers/time.js'

/** A lease's side of the renewal: counts renewals and losses; `onLost` runs inside the loss. */
function target (onLost: () => void = () => {}): { extendLease: () => Promise<number>, leaseLost: () => void, renewed: number, lost: number } {
  const t = {
    renewed: 0,
    lost: 0,
    extendLease: async () => { t.renewed++; return 1 },
    leaseLost: () => { t.lost++; onLost() }
  }
  return t
}

t.test('a lease stopped by an earlier one\'s loss in the same tick is neither renewed nor reported lost', async t => {
  const clock = new RenewalClock(30)
  // Both confirmed long ago: both past their deadline at the first tick. The first one's holder,
  // told of its loss, ends the second lease (as a holder of both would, releasing it).
  let second: Renewal | null = null
  const b = target()
  const a = target(() => { second?.stop() })
  const past = performance.now() - 1000
  clock.start(past, a)
  second = clock.start(past, b)
  await until(() => a.lost === 1, { what: 'the first loss' })
  // The second lease would be reported in the same walk as the first: nothing to wait for.
  t.equal(a.lost, 1)
  t.equal(b.lost, 0, 'the stopped lease is not reported lost')
  t.equal(b.renewed, 0, 'nor renewed')
  t.equal(clock.size, 0, 'neither is renewed any more')
  clock.stopAll()
})

t.test('a lease due for renewal is renewed; stopAll stops every renewal', async t => {
  const clock = new RenewalClock(60)
  const a = target()
  const renewal = clock.start(performance.now(), a)
  await until(() => a.renewed > 0, { what: 'a renewal' })
  t.equal(a.lost, 0)
  t.equal(clock.size, 1)
  clock.stopAll()
  t.ok(renewal.stopped)
  t.equal(clock.size, 0)
  const renewed = a.renewed
  await new Promise(resolve => setTimeout(resolve, 100))
  t.equal(a.renewed, renewed, 'no renewal after stopAll')
})
