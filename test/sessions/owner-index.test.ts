/**
 * The owner index against a plain model of its rule (`lib/sessions/owner-index.ts`): after any
 * sequence of adds, touches and removals, the victim is a record of an owner holding the most —
 * one with a never-used record first, the least recently active among them — its oldest
 * never-used record, else its least recently used. Random sequences, a fixed seed.
 */
import t from 'tap'
import { OwnerIndex, type Owned } from '../../lib/sessions/owner-index.js'

interface Rec extends Owned { id: number, key: string, made: number, used: number | null }

/** A small deterministic PRNG (mulberry32). */
function prng (seed: number): () => number {
  return () => {
    seed = (seed + 0x6D2B79F5) | 0
    let x = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

function expected (recs: Rec[], active: Map<string, number>): Rec | null {
  if (recs.length === 0) return null
  const byOwner = new Map<string, Rec[]>()
  for (const r of recs) byOwner.set(r.key, [...(byOwner.get(r.key) ?? []), r])
  const most = Math.max(...[...byOwner.values()].map(rs => rs.length))
  const top = [...byOwner.entries()].filter(([, rs]) => rs.length === most)
  const withFresh = top.filter(([, rs]) => rs.some(r => r.used === null))
  const pool = withFresh.length > 0 ? withFresh : top
  pool.sort((a, b) => (active.get(a[0]) as number) - (active.get(b[0]) as number))
  const rs = pool[0]![1]
  const fresh = rs.filter(r => r.used === null).sort((a, b) => a.made - b.made)
  if (fresh.length > 0) return fresh[0]!
  return [...rs].sort((a, b) => (a.used as number) - (b.used as number))[0]!
}

for (const seed of [1, 2, 3, 4, 5]) {
  t.test(`random adds, touches, removals (seed ${seed}): the victim is the model's`, async t => {
    const rnd = prng(seed)
    const index = new OwnerIndex()
    const live: Rec[] = []
    const active = new Map<string, number>()
    let tick = 0
    let id = 0
    let mismatches = 0
    for (let step = 0; step < 4000; step++) {
      const r = rnd()
      if (r < 0.4 || live.length === 0) {
        const key = `o${Math.floor(rnd() * 12)}`
        const used = rnd() < 0.2
        const rec: Rec = { id: id++, key, made: ++tick, used: used ? tick : null, owner: null, ownerUsed: false, ownerPrev: null, ownerNext: null }
        index.add(rec, key, used)
        active.set(key, tick)
        live.push(rec)
      } else if (r < 0.8) {
        const rec = live[Math.floor(rnd() * live.length)]!
        index.touch(rec)
        rec.used = ++tick
        active.set(rec.key, tick)
      } else if (r < 0.9) {
        const rec = live.splice(Math.floor(rnd() * live.length), 1)[0]!
        index.remove(rec)
      } else {
        // An eviction: the victim goes.
        const victim = index.victim() as Rec
        live.splice(live.indexOf(victim), 1)
        index.remove(victim)
      }
      const want = expected(live, active)
      const got = index.victim() as Rec | null
      if (got?.id !== want?.id && mismatches++ < 3) t.fail(`step ${step}: victim ${String(got?.id)}, the model says ${String(want?.id)}`)
    }
    t.equal(mismatches, 0, 'every step agreed')
    t.equal(index.size, new Set(live.map(r => r.key)).size, 'owners counted')
  })
}
