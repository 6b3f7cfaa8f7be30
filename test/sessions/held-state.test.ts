/**
 * What the memory store evicts first when full (issue 47, item 3): a record that holds no state (a
 * session nobody wrote to since its creation, a record marked spent) goes before any record that
 * holds state, whoever made either; within each class a record of the owner holding the most, and
 * among owners holding as many the least recently active one — not the one that came first.
 */
import t from 'tap'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import { SPENT_KEY, createdHoldingState } from '../../lib/sessions/held-state.js'

function store (max: number): MemorySessionStore {
  return new MemorySessionStore({ max, sweepInterval: 0 })
}

async function alive (s: MemorySessionStore, ids: string[]): Promise<string[]> {
  const out: string[] = []
  for (const id of ids) if (await s.exists(id)) out.push(id)
  return out
}

t.test('createdHoldingState: an application key holds state, protocol keys alone do not, the spent mark never', async t => {
  t.equal(createdHoldingState({}), false)
  t.equal(createdHoldingState({ '$mcp/version': '2025-11-25', '$mcp/capabilities': {} }), false, 'what initialize writes')
  t.equal(createdHoldingState({ items: [], '$mcp/kind': 'basket' }), true, 'a handle created with data')
  t.equal(createdHoldingState({ status: 'working' }), true, 'a task record')
  t.equal(createdHoldingState({ status: 'completed', [SPENT_KEY]: true }), false, 'marked spent')
})

t.test('records holding no state go before any record holding state, whoever made them', async t => {
  const s = store(4)
  // The victim: one record holding state, made first and never touched again.
  await s.create('victim', { counter: 42 }, { owner: 'a:198.51.100.7' })
  // Another client's records, each used, holding nothing.
  for (const id of ['x1', 'x2', 'x3']) { await s.create(id, { '$mcp/version': 'v' }, { owner: 'a:203.0.113.9' }); await s.load(id) }
  // Records of many other clients, one each: each pushes out a record holding no state.
  for (let i = 0; i < 10; i++) { await s.create(`n${i}`, {}, { owner: `a:192.0.2.${i}` }); await s.load(`n${i}`) }
  t.ok(await s.exists('victim'), 'the record holding state stays while any record holds none')
  t.same(await alive(s, ['x1', 'x2', 'x3']), [], 'the records holding nothing went, the flooder\'s first')
  t.same(await alive(s, Array.from({ length: 10 }, (_, i) => `n${i}`)), ['n7', 'n8', 'n9'], 'then the least recently active clients\'')
})

t.test('a save makes a record hold state; the spent mark makes it hold none again; full of state, the store evicts', async t => {
  const s = store(3)
  await s.create('written', { '$mcp/version': 'v' }, { owner: 'a' })
  await s.create('spent', { status: 'working' }, { owner: 'b' })
  await s.create('idle', {}, { owner: 'c' })
  await s.save('written', { set: { '$mcp/logLevel': 'error' }, delete: [] }) // a protocol key: written to all the same
  await s.save('spent', { set: { status: 'completed', [SPENT_KEY]: true }, delete: [] })
  await s.load('idle')
  await s.create('new1', {}, { owner: 'd' })
  t.notOk(await s.exists('spent'), 'the spent record went first (least recently active of those holding nothing)')
  await s.load('new1')
  await s.create('new2', {}, { owner: 'e' })
  t.notOk(await s.exists('idle'), 'then the record nobody wrote to')
  t.ok(await s.exists('written'), 'the written one, the least recently active of all, stays')
  await s.save('new1', { set: { x: 1 }, delete: [] })
  await s.save('new2', { set: { x: 1 }, delete: [] })
  // Every record holds state now: the store evicts (docs/abuse-bounds.md says why it does not refuse).
  await s.create('new3', {}, { owner: 'f' })
  t.equal(s.size, 3)
  t.notOk(await s.exists('written'), 'full of state: of the owners holding the most, the least recently active loses its record')
  t.same(await alive(s, ['new1', 'new2', 'new3']), ['new1', 'new2', 'new3'])
})

t.test('a flood of records holding no state from the victim\'s own owner: its record holding state stays', async t => {
  const s = store(50)
  await s.create('victim', { '$mcp/version': 'v' }, { owner: 'a:shared' })
  await s.save('victim', { set: { counter: 42 }, delete: [] })
  for (let i = 0; i < 1000; i++) { await s.create(`f${i}`, { '$mcp/version': 'v' }, { owner: 'a:shared' }); await s.load(`f${i}`) }
  t.same(await s.load('victim'), { data: { '$mcp/version': 'v', counter: 42 }, version: 1 }, 'the victim\'s record, intact')
  t.ok(await s.exists('f999') && !await s.exists('f949'), 'the flood keeps its most recent records')
})

t.test('among owners holding as many records, the least recently active goes first, not the first to come', async t => {
  const s = store(3)
  for (const id of ['a', 'b', 'c']) { await s.create(id, {}, { owner: id }); await s.load(id) }
  await s.load('a') // a is the most recently active now
  await s.create('d', {}, { owner: 'd' })
  t.same(await alive(s, ['a', 'b', 'c', 'd']), ['a', 'c', 'd'], 'b went: the least recently active')
  await s.load('d')
  await s.load('c')
  await s.load('a')
  await s.create('e', {}, { owner: 'e' })
  t.same(await alive(s, ['a', 'c', 'd', 'e']), ['a', 'c', 'e'], 'then d')
})

t.test('an owner that lost a record takes its place by its last activity, not as the most recent one', async t => {
  const s = store(4)
  await s.create('b1', {}, { owner: 'b' })
  await s.load('b1')
  await s.create('a1', {}, { owner: 'a' })
  await s.load('a1')
  await s.create('a2', {}, { owner: 'a' })
  await s.load('a2')
  await s.create('c1', {}, { owner: 'c' })
  await s.load('c1')
  await s.load('b1')
  // Last activity: a (a2), then c, then b. a holds 2 until one of its records goes.
  await s.destroy('a2')
  await s.create('d1', {}, { owner: 'd' })
  await s.load('d1')
  await s.create('e1', {}, { owner: 'e' })
  t.same(await alive(s, ['a1', 'b1', 'c1', 'd1', 'e1']), ['b1', 'c1', 'd1', 'e1'], 'a, the least recently active of those holding one, went')
})
