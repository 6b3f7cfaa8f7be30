import t from 'tap'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import type { JsonValue } from '../../lib/sessions/session-store.js'
import { fencedStoreContract, storeContract } from '../../lib/testing/contracts/index.js'
import { sleep } from '../helpers/time.js'
import { fullGc } from '../helpers/gc.js'

storeContract({
  test: t.test.bind(t),
  name: 'MemorySessionStore',
  make: ({ ttl }, t) => {
    const store = new MemorySessionStore({ ttl })
    t.teardown(() => store.close())
    return store
  }
})

// With the memory lock: a save under a live lease, and after a destroy. Not the stale-holder cases
// (no leaseTtl): the memory lock's leases never expire (a lease is lost only with the process that
// holds it, and the store with it), so the store has no fence to check and ignores one.
fencedStoreContract({
  test: t.test.bind(t),
  name: 'MemorySessionStore + MemorySessionLock fenced save',
  make: () => ({ store: new MemorySessionStore(), lock: new MemorySessionLock() })
})

t.test('defaults: one hour, 10,000 sessions', async t => {
  const store = new MemorySessionStore()
  t.teardown(() => store.close())
  t.equal(store.ttl, 3_600_000)
  t.equal(store.max, 10_000)
})

t.test('bad options are refused', async t => {
  t.throws(() => new MemorySessionStore({ ttl: 0 }), new RangeError('ttl must be greater than 0.'))
  t.throws(() => new MemorySessionStore({ ttl: -5 }), RangeError)
  t.throws(() => new MemorySessionStore({ max: 0 }), RangeError)
  t.throws(() => new MemorySessionStore({ max: 1.5 }), RangeError)
  t.throws(() => new MemorySessionStore({ sweepInterval: -1 }), RangeError)
})

t.test('when full and every session was used, the least recently used one is evicted', async t => {
  const store = new MemorySessionStore({ max: 3 })
  t.teardown(() => store.close())
  const [a, b, c, d, e] = Array.from({ length: 5 }, () => generateSessionId()) as [string, string, string, string, string]
  for (const id of [a, b, c]) {
    await store.create(id, {})
    await store.load(id)
  }
  await store.load(a) // a is now more recent than b and c
  await store.create(d, {})
  t.equal(store.size, 3)
  t.equal(await store.exists(b), false, 'b was the least recently used')
  t.ok(await store.exists(a) && await store.exists(c) && await store.exists(d))
  await store.load(d)
  await store.save(c, { set: { x: 1 }, delete: [] }) // a save counts as a use too
  await store.create(e, {})
  t.equal(await store.exists(a), false, 'then a')
  t.ok(await store.exists(c) && await store.exists(d) && await store.exists(e))
})

t.test('a flood of never-used sessions evicts never-used ones first: a used session survives', async t => {
  const max = 50
  const store = new MemorySessionStore({ max })
  t.teardown(() => store.close())
  const used = generateSessionId()
  const loadedOnly = generateSessionId()
  const savedOnly = generateSessionId()
  for (const id of [used, loadedOnly, savedOnly]) await store.create(id, { n: 0 })
  await store.load(used)
  await store.save(used, { set: { n: 1 }, delete: [] })
  await store.load(loadedOnly) // a load alone makes a session used…
  await store.save(savedOnly, { set: { n: 2 }, delete: [] }) // …and so does a save alone
  const flood = Array.from({ length: 2 * max }, () => generateSessionId())
  for (const id of flood) await store.create(id, {})
  t.equal(store.size, max, 'still bounded')
  t.same(await store.load(used), { data: { n: 1 }, version: 1 }, 'the used session survived, intact')
  t.ok(await store.exists(loadedOnly), 'a loaded session survived')
  t.ok(await store.exists(savedOnly), 'a saved session survived')
  const kept = []
  for (const id of flood) if (await store.exists(id)) kept.push(id)
  t.same(kept, flood.slice(-(max - 3)), 'the newest never-used sessions are kept, the oldest evicted')
})

t.test('never-used sessions are evicted oldest first, and a used one only once none is left', async t => {
  const store = new MemorySessionStore({ max: 3 })
  t.teardown(() => store.close())
  const [u, f1, f2, f3, f4] = Array.from({ length: 5 }, () => generateSessionId()) as [string, string, string, string, string]
  await store.create(u, {})
  await store.load(u)
  await store.create(f1, {})
  await store.create(f2, {})
  await store.create(f3, {})
  t.equal(await store.exists(f1), false, 'the oldest never-used session went first')
  t.ok(await store.exists(u) && await store.exists(f2) && await store.exists(f3))
  await store.load(f2)
  await store.load(f3) // now every session is used: u is the least recently used
  await store.create(f4, {})
  t.equal(await store.exists(u), false, 'with no never-used session left, the least recently used one goes')
  t.ok(await store.exists(f2) && await store.exists(f3) && await store.exists(f4))
})

t.test('a destroyed and re-created session starts never-used again', async t => {
  const store = new MemorySessionStore({ max: 2 })
  t.teardown(() => store.close())
  const [a, b, c] = Array.from({ length: 3 }, () => generateSessionId()) as [string, string, string]
  await store.create(a, {})
  await store.load(a)
  await store.destroy(a)
  await store.create(a, {})
  await store.create(b, {})
  await store.load(b)
  await store.create(c, {})
  t.equal(await store.exists(a), false, 'the re-created, never-used a was evicted before the used b')
  t.ok(await store.exists(b) && await store.exists(c))
})

t.test('expired sessions of both kinds are swept', async t => {
  const store = new MemorySessionStore({ ttl: 100, sweepInterval: 0 })
  t.teardown(() => store.close())
  const [fresh, used] = [generateSessionId(), generateSessionId()]
  await store.create(fresh, {})
  await store.create(used, {})
  await store.load(used)
  await sleep(200)
  const live = generateSessionId()
  await store.create(live, {})
  t.same((await store.gc()).sort(), [fresh, used].sort())
  t.equal(store.size, 1)
})

t.test('gc returns exactly the expired ids', async t => {
  const store = new MemorySessionStore({ ttl: 150, sweepInterval: 0 })
  t.teardown(() => store.close())
  const old = [generateSessionId(), generateSessionId()]
  for (const id of old) await store.create(id, {})
  await sleep(250)
  const fresh = generateSessionId()
  await store.create(fresh, {})
  t.same((await store.gc()).sort(), [...old].sort())
  t.equal(store.size, 1)
  t.same(await store.gc(), [], 'nothing left to collect')
})

t.test('one unref()ed sweep timer drops expired sessions without any access, and close() clears it', async t => {
  const created: NodeJS.Timeout[] = []
  const cleared: unknown[] = []
  const { setInterval: realSetInterval, setTimeout: realSetTimeout, clearInterval: realClearInterval } = globalThis
  t.teardown(() => {
    Object.assign(globalThis, { setInterval: realSetInterval, setTimeout: realSetTimeout, clearInterval: realClearInterval })
  })
  Object.assign(globalThis, {
    setInterval: (...args: Parameters<typeof realSetInterval>) => {
      const timer = realSetInterval(...args)
      created.push(timer)
      return timer
    },
    setTimeout: (...args: Parameters<typeof realSetTimeout>) => {
      const timer = realSetTimeout(...args)
      created.push(timer)
      return timer
    },
    clearInterval: (timer: NodeJS.Timeout) => {
      cleared.push(timer)
      realClearInterval(timer)
    }
  })
  const store = new MemorySessionStore({ ttl: 50, sweepInterval: 40 })
  t.equal(created.length, 1, 'one timer')
  t.equal(created[0]?.hasRef(), false, 'unref()ed: it never keeps the process alive')
  for (let i = 0; i < 20; i++) {
    const id = generateSessionId()
    await store.create(id, { i })
    await store.load(id)
    await store.save(id, { set: { j: i }, delete: [] })
  }
  t.equal(created.length, 1, 'no timer per session')
  Object.assign(globalThis, { setTimeout: realSetTimeout })
  await sleep(250)
  t.equal(store.size, 0, 'swept without any access')
  await store.close()
  t.ok(cleared.includes(created[0]), 'cleared on close')
})

t.test('an idle session of five small keys costs at most 2 KiB', async t => {
  const count = 20_000
  const store = new MemorySessionStore({ max: count })
  t.teardown(() => store.close())
  const ids = Array.from({ length: count }, () => generateSessionId())
  fullGc()
  const before = process.memoryUsage().heapUsed
  for (const id of ids) {
    await store.create(id, {
      protocolVersion: '2025-06-18',
      clientInfo: { name: 'client', version: '1.0.0' },
      capabilities: { roots: { listChanged: true } },
      logLevel: 'info',
      nextId: 1000
    })
  }
  fullGc()
  const perSession = (process.memoryUsage().heapUsed - before) / count
  t.comment(`${Math.round(perSession)} bytes per session`)
  t.ok(perSession <= 2048, `${Math.round(perSession)} B <= 2048 B`)
  t.equal(store.size, count)
})

t.test('a value nested as deep as JSON.stringify allows loads at any stack depth', async t => {
  const store = new MemorySessionStore()
  t.teardown(() => store.close())
  // The deepest value that can be stored from here.
  let lo = 1
  let hi = 100_000
  let id = ''
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1
    const tried = generateSessionId()
    try { await store.create(tried, { deep: nest(mid) }); lo = mid; id = tried } catch { hi = mid }
  }
  const want = JSON.stringify({ deep: nest(lo) })
  // Loaded from ever deeper stacks (a copy made by recursion has less room there).
  const loads: Array<Promise<unknown>> = []
  const deepLoad = (frames: number): Promise<unknown> => frames === 0 ? store.load(id) : deepLoad(frames - 1)
  for (let frames = 0; ; frames += 250) {
    let load
    try { load = deepLoad(frames) } catch { break }
    loads.push(load)
  }
  t.ok(loads.length > 3, `${loads.length} depths`)
  for (const record of await Promise.all(loads)) {
    if (JSON.stringify((record as { data: unknown }).data) !== want) t.fail('a load differs')
  }
})

/** `depth` nested objects and arrays around a number. */
function nest (depth: number): JsonValue {
  let v: JsonValue = 1
  for (let i = 0; i < depth; i++) v = i % 2 === 0 ? { a: v } : [v]
  return v
}

t.test('onExpired: every removal the store makes on its own is told (found on access, swept, evicted), destroy() is not', async t => {
  const store = new MemorySessionStore({ ttl: 40, max: 2, sweepInterval: 0 })
  t.teardown(() => store.close())
  const told: string[] = []
  const stop = store.onExpired((ids) => { told.push(...ids) })
  const [a, b, c, d] = Array.from({ length: 4 }, () => generateSessionId()) as [string, string, string, string]
  await store.create(a, {})
  await store.create(b, {})
  await store.create(c, {}) // full: a, the oldest never used, is evicted
  t.same(told, [a], 'evicted')
  await store.destroy(c)
  t.same(told, [a], 'destroy() is not told')
  await sleep(60) // the ttl is under test: time must pass
  t.equal(await store.load(b), null)
  t.same(told, [a, b], 'expired, found on access')
  await store.create(d, {})
  await sleep(60)
  t.same(await store.gc(), [d])
  t.same(told, [a, b, d], 'expired, collected by gc()')
  stop()
  const e = generateSessionId()
  await store.create(e, {})
  await sleep(60)
  await store.gc()
  t.same(told, [a, b, d], 'a listener that stopped is not told')
})

t.test('destroy() of a session that expired meanwhile: false, told once as expired, and the store holds nothing', async t => {
  const store = new MemorySessionStore({ ttl: 40, sweepInterval: 0 })
  t.teardown(() => store.close())
  const told: string[] = []
  store.onExpired((ids) => { told.push(...ids) })
  const [fresh, used] = [generateSessionId(), generateSessionId()]
  await store.create(fresh, {})
  await store.create(used, {})
  await store.load(used)
  await sleep(60) // the ttl is under test: time must pass
  t.equal(await store.destroy(fresh), false, 'a never-used one')
  t.equal(await store.destroy(used), false, 'a used one')
  t.same(told, [fresh, used], 'each told once, as found expired on access')
  t.equal(store.size, 0)
  t.same(await store.gc(), [], 'nothing left for a sweep')
})
