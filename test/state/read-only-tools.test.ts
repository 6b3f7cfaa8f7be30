/**
 * Read-only tools (`annotations.readOnlyHint: true`) read a snapshot of their session or handle
 * without the lock, with a lock configured explicitly (memory, and Redis on a private
 * redis-server): parallel read-only calls on one handle (both eras) or one session are in their
 * handlers at once (an ordering, not a time: a gate they wait at opens only then) while
 * writers on it are still serialized and lose nothing; a read-only call does not wait for a
 * writer; a write from a read-only tool throws a clear error and stores nothing; a snapshot read
 * during writes sees each write whole or not at all (memory, file, Redis stores; a store that
 * saves key by key shows the probe would see a half). Attacks and faults: `read-only-faults.test.ts`.
 */
import t from 'tap'
import { injectClient, MemorySessionLock, MemorySessionStore, type InjectClient, type SaveResult, type SessionChanges } from '../../lib/index.js'
import { sleep, until } from '../helpers/time.js'
import { LOCK_TIMEOUT, ReadGate, backend, build, held, newBasket, text } from './fixtures/read-only-app.js'

const ERAS = ['2025-11-25', '2026-07-28'] as const
/** How many read-only calls run at once, and how many writes go in while they wait. */
const READERS = 20
const WRITERS = 10
/**
 * How long the readers have to be all in their handlers at once. A bound on a failure only: with
 * the reads serialized one waits in its handler and the others wait for the lock, forever.
 */
const ALL_IN = { timeout: 60_000, what: `${READERS} read-only handlers waiting at once` }

// ─── Side by side ────────────────────────────────────────────────────────────────────────────

// Overlap is shown by ordering, not by time: every reader is inside its handler at the same
// moment (each waits for a gate the test opens only then), and every write lands while they wait.
for (const kind of ['memory', 'redis'] as const) {
  for (const era of ERAS) {
    t.test(`${kind} lock, ${era}: ${READERS} read-only calls on one handle are in their handlers at once; ${WRITERS} writes on it land meanwhile`, async t => {
      const gate = new ReadGate()
      const app = await build(t, { sessions: await backend(t, kind) }, gate)
      const c = injectClient(app, { protocolVersion: era })
      const basket = await newBasket(c)
      const reads = Array.from({ length: READERS }, async () => await c.callTool('basket_wait', { basket }))
      await until(() => gate.waiting === READERS, ALL_IN)
      const written = await Promise.all(Array.from({ length: WRITERS }, async (_, i) => await c.callTool('basket_add', { basket, item: `w${i}`, delayMs: 20 })))
      t.equal(gate.waiting, READERS, 'the writes landed while every reader was still in its handler')
      gate.open()
      const read = await Promise.all(reads)
      t.same(written.map(r => r.structuredContent?.count).sort((a, b) => (a as number) - (b as number)),
        Array.from({ length: WRITERS }, (_, i) => i + 1), 'each write saw every earlier one')
      const final = (await c.callTool('basket_get', { basket })).structuredContent?.items as string[]
      t.same([...final].sort(), Array.from({ length: WRITERS }, (_, i) => `w${i}`).sort(), 'no write lost')
      const prefixes = read.map(r => r.isError !== true && (r.structuredContent?.items as string[] | undefined)?.every((x, i) => final[i] === x))
      t.ok(prefixes.every(ok => ok === true), 'every read answered a saved state (a prefix of the final items)')
    })
  }

  t.test(`${kind} lock, handshake era: ${READERS} read-only calls on one session are in their handlers at once; ${WRITERS} writes on it land meanwhile`, async t => {
    const gate = new ReadGate()
    const app = await build(t, { sessions: await backend(t, kind) }, gate)
    const c = injectClient(app, { protocolVersion: '2025-11-25' })
    t.same((await c.callTool('counter_peek')).structuredContent, { counter: 0 })
    const reads = Array.from({ length: READERS }, async () => await c.callTool('counter_wait'))
    await until(() => gate.waiting === READERS, ALL_IN)
    const written = await Promise.all(Array.from({ length: WRITERS }, async () => await c.callTool('counter_add', { by: 1, delayMs: 20 })))
    t.equal(gate.waiting, READERS, 'the writes landed while every reader was still in its handler')
    gate.open()
    const read = await Promise.all(reads)
    t.same(written.map(r => r.structuredContent?.counter).sort((a, b) => (a as number) - (b as number)),
      Array.from({ length: WRITERS }, (_, i) => i + 1), 'each write saw every earlier one')
    t.same((await c.callTool('counter_get')).structuredContent, { counter: WRITERS }, 'no write lost')
    t.ok(read.every(r => r.isError !== true && (r.structuredContent?.counter as number) <= WRITERS), 'every read answered a saved value')
  })

  t.test(`${kind} lock: a read-only call does not wait for a writer holding the lock; it sees the state before that write`, async t => {
    // The writer holds the lock until the test opens its gate: the read answering before that is
    // the proof (were it to wait for the lock, it would wait for the gate, i.e. forever).
    const sessions = await backend(t, kind)
    const gate = new ReadGate()
    const app = await build(t, { sessions }, gate)
    const c = injectClient(app, { protocolVersion: '2026-07-28' })
    const basket = await newBasket(c)
    await c.callTool('basket_add', { basket, item: 'first' })
    const writer = c.callTool('basket_add_wait', { basket, item: 'slow' })
    await until(() => held(sessions.lock) > 0 && gate.waiting === 1, { timeout: 30_000, what: 'the writer to hold the lock' })
    const read = await c.callTool('basket_get', { basket })
    t.equal(gate.waiting, 1, 'answered while the writer still held the lock')
    t.same(read.structuredContent, { items: ['first'] }, 'the saved state, not the write in progress')
    gate.open()
    t.same((await writer).structuredContent, { count: 2 })
  })
}

// ─── Writes refused ──────────────────────────────────────────────────────────────────────────

t.test('handshake era: a read-only tool\'s write to its session throws a clear error and stores nothing', async t => {
  const app = await build(t, { sessions: await backend(t, 'memory') })
  const c = injectClient(app, { protocolVersion: '2025-11-25' })
  t.same((await c.callTool('counter_add', { by: 5 })).structuredContent, { counter: 5 })
  const set = await c.callTool('sneak', { how: 'set' })
  t.equal(set.isError, true)
  t.equal(text(set), 'Cannot set "counter": tool "sneak" is read-only (annotations.readOnlyHint: true); it reads a snapshot and cannot change state')
  const del = await c.callTool('sneak', { how: 'delete' })
  t.match(text(del), /^Cannot delete "counter": tool "sneak" is read-only/)
  const caught = await c.callTool('sneak', { how: 'caught' })
  t.same([caught.isError, text(caught)], [undefined, 'caught ReadOnlyStateError'], 'a handler that catches it answers, having changed nothing')
  const huge = await c.callTool('sneak', { how: 'huge' })
  t.ok(huge.isError === true && text(huge).length < 300, `a 1 MiB key is cut in the message (${text(huge).length} characters)`)
  t.same((await c.callTool('counter_get')).structuredContent, { counter: 5 }, 'nothing stored')
  t.same((await c.callTool('counter_add', { by: 1 })).structuredContent, { counter: 6 }, 'a writing tool still writes')
})

for (const era of ERAS) {
  t.test(`${era}: a read-only tool's write to its handle throws a clear error and stores nothing`, async t => {
    const app = await build(t, { sessions: await backend(t, 'memory') })
    const c = injectClient(app, { protocolVersion: era })
    const basket = await newBasket(c)
    await c.callTool('basket_add', { basket, item: 'pear' })
    const r = await c.callTool('basket_sneak', { basket })
    t.equal(r.isError, true)
    t.equal(text(r), 'Cannot set "items": tool "basket_sneak" is read-only (annotations.readOnlyHint: true); it reads a snapshot and cannot change state')
    const caught = await c.callTool('basket_sneak', { basket, caught: true })
    t.equal(text(caught), 'caught ReadOnlyStateError')
    t.same((await c.callTool('basket_get', { basket })).structuredContent, { items: ['pear'] }, 'nothing stored')
  })
}

// ─── Snapshots are whole ─────────────────────────────────────────────────────────────────────

/** A store that writes a save's keys one at a time (not a valid store for read-only tools). */
class KeyByKeyStore extends MemorySessionStore {
  override async save (id: string, changes: SessionChanges): Promise<SaveResult> {
    let result: SaveResult = 'ok'
    for (const key of Object.keys(changes.set)) {
      result = await super.save(id, { set: { [key]: changes.set[key] }, delete: [] })
      await sleep(5)
    }
    if (changes.delete.length > 0) result = await super.save(id, { set: {}, delete: changes.delete })
    return result
  }
}

/** Writes pairs one after another while readers poll them; resolves every pair read. */
async function pairsSeen (c: InjectClient, basket: string): Promise<Array<{ a: unknown, b: unknown }>> {
  let writing = true
  const writer = (async () => {
    for (let n = 1; n <= 15; n++) await c.callTool('pair_set', { basket, n, delayMs: 10 })
    writing = false
  })()
  const seen: Array<{ a: unknown, b: unknown }> = []
  const readers = Array.from({ length: 4 }, async () => {
    while (writing) { // eslint-disable-line no-unmodified-loop-condition -- the writer task above clears it
      const r = await c.callTool('pair_get', { basket })
      seen.push(r.structuredContent as { a: unknown, b: unknown })
    }
  })
  await Promise.all([writer, ...readers])
  return seen
}

for (const kind of ['memory', 'file', 'redis'] as const) {
  t.test(`${kind} store: a snapshot read during writes sees each write whole or not at all`, async t => {
    const app = await build(t, { sessions: await backend(t, kind) })
    const c = injectClient(app, { protocolVersion: '2026-07-28' })
    const basket = await newBasket(c)
    const seen = await pairsSeen(c, basket)
    const halves = seen.filter(p => p.a !== p.b)
    t.same(halves, [], `no half write among ${seen.length} reads`)
    t.ok(new Set(seen.map(p => p.a)).size > 3, 'the reads ran while the writes did')
  })
}

t.test('the probe above sees halves when a store saves key by key (so its "no half" means something)', async t => {
  const app = await build(t, { sessions: { store: new KeyByKeyStore(), lock: new MemorySessionLock({ timeout: LOCK_TIMEOUT }) } })
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const basket = await newBasket(c)
  const seen = await pairsSeen(c, basket)
  t.ok(seen.some(p => p.a !== p.b), 'a half write was read')
})
