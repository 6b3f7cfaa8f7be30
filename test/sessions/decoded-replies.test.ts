import t from 'tap'
import { DecodedReplies, MAX_DECODED_SESSIONS, MAX_DECODED_TEXT } from '../../lib/sessions/decoded-replies.js'
import type { JsonValue } from '../../lib/sessions/session-store.js'

/** A decoder that counts its calls: JSON.parse, or a throw for text starting with "!". */
function counted (): { decode: (id: string, text: string) => Record<string, JsonValue>, calls: () => number } {
  let calls = 0
  return {
    decode: (_id, text) => {
      calls++
      if (text.startsWith('!')) throw new Error('not data')
      return JSON.parse(text) as Record<string, JsonValue>
    },
    calls: () => calls
  }
}

t.test('a session read again unchanged is copied, not decoded: its second read decodes once more, later ones never', async t => {
  const cache = new DecodedReplies()
  const { decode, calls } = counted()
  const text = '{"a":{"b":[1,{"c":"d"}]},"n":null}'
  const reads = [1, 2, 3, 4, 5].map(() => cache.data('s1', text, decode))
  t.equal(calls(), 2, 'decoded on the first read (kept as text) and the second (kept parsed), copied after')
  for (const r of reads) t.same(r, JSON.parse(text))
  t.not(reads[3], reads[4], 'each read gets its own object')
  t.not(reads[3].a, reads[4].a, 'nested objects too')
  ;((reads[3].a as Record<string, JsonValue>).b as JsonValue[]).push('mutated')
  reads[3].n = 'changed'
  t.same(cache.data('s1', text, decode), JSON.parse(text), 'what a caller did to its copy never reaches the next read')
})

t.test('another text is decoded afresh: nothing stale is ever answered', async t => {
  const cache = new DecodedReplies()
  const { decode, calls } = counted()
  cache.data('s1', '{"v":1}', decode)
  cache.data('s1', '{"v":1}', decode)
  t.same(cache.data('s1', '{"v":2}', decode), { v: 2 })
  t.same(cache.data('s1', '{"v":1}', decode), { v: 1 }, 'and back')
  t.same(cache.data('s2', '{"v":1}', decode), { v: 1 }, 'per session')
  t.equal(calls(), 5)
})

t.test('a text that does not decode throws every time and is not kept', async t => {
  const cache = new DecodedReplies()
  const { decode, calls } = counted()
  t.throws(() => cache.data('s1', '!bad', decode), /not data/)
  t.throws(() => cache.data('s1', '!bad', decode), /not data/)
  t.equal(calls(), 2)
  t.same(cache.data('s1', '{}', decode), {})
})

t.test('a key named __proto__ stays an own property of every copy', async t => {
  const cache = new DecodedReplies()
  const text = '{"__proto__":{"polluted":true},"x":1}'
  for (let i = 0; i < 3; i++) {
    const data = cache.data('s', text, (_id, s) => JSON.parse(s) as Record<string, JsonValue>)
    t.ok(Object.hasOwn(data, '__proto__'), `read ${i}`)
    t.equal(Object.getPrototypeOf(data), Object.prototype)
    t.equal((data as { polluted?: unknown }).polluted, undefined)
  }
})

t.test('bounded: at most MAX_DECODED_SESSIONS sessions, the oldest forgotten first; a long text is never kept', async t => {
  const cache = new DecodedReplies()
  const { decode, calls } = counted()
  for (let i = 0; i < MAX_DECODED_SESSIONS + 50; i++) cache.data(`s${i}`, '{}', decode)
  t.equal(cache.size, MAX_DECODED_SESSIONS)
  const before = calls()
  cache.data(`s${MAX_DECODED_SESSIONS + 49}`, '{}', decode)
  cache.data(`s${MAX_DECODED_SESSIONS + 49}`, '{}', decode)
  t.equal(calls() - before, 1, 'the newest is kept (one decode to keep it parsed, none after)')
  cache.data('s0', '{}', decode)
  t.equal(calls() - before, 2, 'the oldest was forgotten: decoded again')
  t.equal(cache.size, MAX_DECODED_SESSIONS)

  const long = JSON.stringify({ big: 'x'.repeat(MAX_DECODED_TEXT) })
  const size = cache.size
  const decodes = calls()
  for (let i = 0; i < 3; i++) t.same(cache.data('long', long, decode), JSON.parse(long))
  t.equal(calls() - decodes, 3, 'a text over MAX_DECODED_TEXT characters is decoded every time')
  t.equal(cache.size, size, 'and not kept')
})

t.test('a value nested as deep as a kept text can be comes back whole', async t => {
  const cache = new DecodedReplies()
  const deep = `{"a":${'['.repeat(2000)}${']'.repeat(2000)}}`
  t.ok(deep.length <= MAX_DECODED_TEXT)
  const { decode } = counted()
  for (let i = 0; i < 3; i++) t.equal(JSON.stringify(cache.data('s', deep, decode)), deep)
})
