import t from 'tap'
import { GcPolicy } from '../../lib/sessions/gc.js'
import type { SessionStore } from '../../lib/sessions/session-store.js'

/** A store that only counts gc() calls (and can be told how gc behaves). */
function countingStore (gc: () => Promise<string[]> = async () => []): SessionStore & { calls: number } {
  const store = {
    calls: 0,
    ttl: 1000,
    create: async () => {},
    load: async () => null,
    save: async () => 'gone' as const,
    destroy: async () => false,
    exists: async () => false,
    gc: async () => {
      store.calls++
      return await gc()
    }
  }
  return store
}

function recordingLog (): { warn: (obj: object, msg: string) => void, debug: (obj: object, msg: string) => void, lines: Array<[string, object, string]> } {
  const lines: Array<[string, object, string]> = []
  return {
    lines,
    warn: (obj, msg) => { lines.push(['warn', obj, msg]) },
    debug: (obj, msg) => { lines.push(['debug', obj, msg]) }
  }
}

t.test('the defaults construct: 1 in 100', async t => {
  const policy = new GcPolicy()
  t.equal(policy.gcProbability, 1)
  t.equal(policy.gcDivisor, 100)
})

t.test('probability 0 never runs (100 calls)', async t => {
  const policy = new GcPolicy({ gcProbability: 0, gcDivisor: 100 })
  const store = countingStore()
  for (let i = 0; i < 100; i++) t.equal(policy.maybeRun(store), undefined)
  t.equal(store.calls, 0)
})

t.test('probability == divisor always runs (10 of 10)', async t => {
  const policy = new GcPolicy({ gcProbability: 10, gcDivisor: 10 })
  const store = countingStore()
  for (let i = 0; i < 10; i++) await policy.maybeRun(store)
  t.equal(store.calls, 10)
})

t.test('probability > divisor always runs (5 of 5)', async t => {
  const policy = new GcPolicy({ gcProbability: 7, gcDivisor: 5 })
  const store = countingStore()
  for (let i = 0; i < 5; i++) await policy.maybeRun(store)
  t.equal(store.calls, 5)
})

t.test('the draw follows gcProbability / gcDivisor', async t => {
  const draws = [0, 0.249, 0.25, 0.99]
  const policy = new GcPolicy({ gcProbability: 1, gcDivisor: 4, random: () => draws.shift() as number })
  t.same([policy.shouldRun(), policy.shouldRun(), policy.shouldRun(), policy.shouldRun()], [true, true, false, false])
})

t.test('invalid settings are refused with clear messages', async t => {
  t.throws(() => new GcPolicy({ gcProbability: -1 }), new RangeError('gcProbability must be greater than or equal to 0.'))
  t.throws(() => new GcPolicy({ gcProbability: Number.NaN }), new RangeError('gcProbability must be greater than or equal to 0.'))
  t.throws(() => new GcPolicy({ gcDivisor: 0 }), new RangeError('gcDivisor must be greater than or equal to 1.'))
  t.throws(() => new GcPolicy({ gcDivisor: 0.5 }), new RangeError('gcDivisor must be greater than or equal to 1.'))
  t.throws(() => new GcPolicy({ gcDivisor: '100' as unknown as number }), new RangeError('gcDivisor must be greater than or equal to 1.'))
})

t.test('a run happens in the background: maybeRun returns before gc finishes', async t => {
  let finish: (ids: string[]) => void = () => {}
  const store = countingStore(async () => store.calls > 1 ? [] : await new Promise(resolve => { finish = resolve }))
  const policy = new GcPolicy({ gcProbability: 1, gcDivisor: 1 })
  const log = recordingLog()
  const run = policy.maybeRun(store, log)
  t.ok(run instanceof Promise, 'started')
  t.equal(store.calls, 1)
  t.equal(policy.maybeRun(store, log), undefined, 'no second run on top of a running one')
  finish(['a', 'b'])
  await run
  t.same(log.lines, [['debug', { removed: 2 }, 'expired sessions collected']])
  await policy.maybeRun(store, log)
  t.equal(store.calls, 2, 'runs again once the first finished')
})

t.test('maybeRun never throws nor rejects; a failing gc is logged as a warning', async t => {
  const policy = new GcPolicy({ gcProbability: 1, gcDivisor: 1 })
  const boom = new Error('disk gone')
  const rejecting = countingStore(async () => { throw boom })
  const log = recordingLog()
  await t.resolves(policy.maybeRun(rejecting, log) as Promise<void>)
  t.same(log.lines, [['warn', { err: boom }, 'session gc failed']])

  const throwing = { ...countingStore(), gc: () => { throw boom } } as unknown as SessionStore
  t.doesNotThrow(() => policy.maybeRun(throwing))
  await t.resolves(policy.maybeRun(throwing, log) as Promise<void>, 'a store whose gc throws synchronously')

  const brokenLog = { warn: () => { throw new Error('logger down') } }
  await t.resolves(policy.maybeRun(rejecting, brokenLog) as Promise<void>, 'even with a logger that throws')
})
