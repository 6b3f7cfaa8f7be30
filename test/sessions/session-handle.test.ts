/**
 * The session handle a request sees: application keys (get/set/has/delete/keys), reserved protocol
 * keys, copies on set, and the change set a save writes back (only what this request changed).
 */
import t from 'tap'
import { K, PROTOCOL_PREFIX, SessionHandle } from '../../lib/sessions/session-handle.js'

const handle = (data: Record<string, unknown> = {}, version = 3): SessionHandle =>
  new SessionHandle('sid', { data: data as never, version })

t.test('get, set, has, delete and keys over application keys; protocol keys are hidden and reserved', async t => {
  const h = handle({ cart: ['a'], [K.version]: '2025-11-25' })
  t.same(h.get('cart'), ['a'])
  t.equal(h.get('missing'), undefined)
  t.equal(h.has('cart'), true)
  t.equal(h.has('missing'), false)
  t.same(h.keys(), ['cart'], 'protocol keys are not listed')
  t.equal(h.getProtocol(K.version), '2025-11-25')
  for (const key of [K.version, `${PROTOCOL_PREFIX}mine`]) {
    t.throws(() => h.get(key), TypeError, `get ${key}`)
    t.throws(() => h.set(key, 1), TypeError, `set ${key}`)
    t.throws(() => h.has(key), TypeError, `has ${key}`)
    t.throws(() => h.delete(key), TypeError, `delete ${key}`)
  }
  t.throws(() => h.get(''), TypeError, 'empty key')
  t.throws(() => h.set(5 as unknown as string, 1), TypeError, 'non-string key')
  t.equal(h.dirty, false, 'refused calls changed nothing')
})

t.test('set stores a copy; a value JSON cannot carry is refused; undefined deletes', async t => {
  const h = handle()
  const value = { items: [1, 2], at: new Date(0) }
  h.set('v', value)
  value.items.push(3)
  t.same(h.get('v'), { items: [1, 2], at: '1970-01-01T00:00:00.000Z' }, 'a JSON copy, taken at set()')
  t.throws(() => h.set('f', () => 1), TypeError)
  t.throws(() => h.set('s', Symbol('x')), TypeError)
  t.equal(h.has('f'), false)
  h.set('v', undefined)
  t.equal(h.has('v'), false, 'set(undefined) removes the key')
  t.same(h.changes(), { set: {}, delete: ['v'] })
})

t.test('the change set holds only what this request changed, last change wins', async t => {
  const h = handle({ a: 1, b: 2, c: 3 })
  t.equal(h.dirty, false)
  t.same(h.changes(), { set: {}, delete: [] })
  h.set('a', 10)
  t.equal(h.delete('b'), true, 'delete reports a present key')
  t.equal(h.delete('nope'), false, 'and an absent one')
  h.set('b', 20) // set after delete: a set, not a delete
  h.set('d', 4)
  h.delete('d') // delete after set: a delete, not a set
  t.equal(h.dirty, true)
  t.same(h.changes(), { set: { a: 10, b: 20 }, delete: ['nope', 'd'] })
  t.same(h.keys().sort(), ['a', 'b', 'c'])
  h.setProtocol(K.logLevel, 'debug')
  t.same(h.changes().set, { a: 10, b: 20, [K.logLevel]: 'debug' }, 'protocol keys are saved like the others')
})

t.test('markSaved clears the change set and bumps the version; reload re-applies unsaved changes', async t => {
  const h = handle({ a: 1 }, 7)
  h.set('a', 2)
  h.markSaved()
  t.equal(h.version, 8)
  t.equal(h.dirty, false)
  t.same(h.changes(), { set: {}, delete: [] })
  h.set('mine', 'x')
  h.delete('a')
  // Another request saved meanwhile: newer state, our own unsaved changes on top.
  h.reload({ data: { a: 5, theirs: true }, version: 9 })
  t.equal(h.version, 9)
  t.same({ a: h.get('a'), theirs: h.get('theirs'), mine: h.get('mine') }, { a: undefined, theirs: true, mine: 'x' })
  t.same(h.changes(), { set: { mine: 'x' }, delete: ['a'] }, 'still to be saved')
})
