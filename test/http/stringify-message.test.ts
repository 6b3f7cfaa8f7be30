/**
 * `stringifyMessage`, the JSON of a POST's single answer: whatever the message, the same text as
 * `JSON.stringify`, and the message as it was afterwards (its `_meta` is left out and put back
 * when it is a `presetMeta`). The wire's answers themselves: test/protocol/stateless.
 */
import t from 'tap'
import fc from 'fast-check'
import { presetMeta, resultResponse, stringifyMessage } from '../../lib/jsonrpc/messages.js'

const SERVER = presetMeta({ 'io.modelcontextprotocol/serverInfo': { name: 'srv', version: '1.0.0', icons: [{ src: 'x' }] } })

t.test('presetMeta: a deep-frozen copy, the JSON of the original', async (t) => {
  const info = { name: 'a', version: '1', nested: { list: [1, 2] } }
  const meta = presetMeta({ k: info })
  t.not(meta.k, info)
  t.strictSame(meta, { k: info })
  t.ok(Object.isFrozen(meta) && Object.isFrozen(meta.k) && Object.isFrozen((meta.k as typeof info).nested.list))
  info.name = 'changed'
  t.equal(stringifyMessage(resultResponse(1, { _meta: meta })), '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"k":{"name":"a","version":"1","nested":{"list":[1,2]}}}}}')
})

t.test('the server _meta last in the result: the same text, the result unchanged', async (t) => {
  const result: Record<string, unknown> = { content: [{ type: 'text', text: 'hé "x" \u2028' }], resultType: 'complete' }
  result._meta = SERVER
  const message = resultResponse('id-1', result)
  t.equal(stringifyMessage(message), JSON.stringify(message))
  t.strictSame(Object.keys(result), ['content', 'resultType', '_meta'])
  t.equal(result._meta, SERVER)
  t.equal(stringifyMessage(message), JSON.stringify(message), 'again, on the same object')
})

t.test('a result with nothing else, or only undefined values', async (t) => {
  for (const result of [{ _meta: SERVER }, { a: undefined, _meta: SERVER }, { f: () => 1, _meta: SERVER }]) {
    const message = resultResponse(7, result as Record<string, unknown>)
    t.equal(stringifyMessage(message), JSON.stringify(message))
  }
})

t.test('what is serialized as it is: _meta not last, not preset, toJSON, the result not last, no result', async (t) => {
  const cases: unknown[] = [
    resultResponse(1, { _meta: SERVER, resultType: 'complete' }),
    resultResponse(1, { resultType: 'complete', _meta: { ...SERVER } }),
    resultResponse(1, { resultType: 'complete', toJSON: () => ({ replaced: true }), _meta: SERVER }),
    { result: { _meta: SERVER }, jsonrpc: '2.0', id: 1 },
    { jsonrpc: '2.0', id: 1, result: { _meta: SERVER }, toJSON: () => 'whole' },
    { jsonrpc: '2.0', id: 1, error: { code: -32600, message: 'x' } },
    { jsonrpc: '2.0', id: 1, result: null },
    null,
    'text'
  ]
  for (const c of cases) t.equal(stringifyMessage(c), JSON.stringify(c))
})

t.test('a result with integer-like keys (written first by JSON.stringify) and the preset _meta', async (t) => {
  const result: Record<string, unknown> = { content: [], _meta: SERVER }
  result['3'] = 'three'
  const message = resultResponse(1, result)
  t.equal(stringifyMessage(message), JSON.stringify(message))
})

t.test('property: the same text as JSON.stringify for any JSON result, with or without the preset _meta', async (t) => {
  fc.assert(fc.property(fc.dictionary(fc.string(), fc.jsonValue()), fc.boolean(), fc.oneof(fc.integer(), fc.string()), (fields, withMeta, id) => {
    const result: Record<string, unknown> = { ...fields }
    if (withMeta) { delete result._meta; result._meta = SERVER }
    const message = resultResponse(id, result)
    const before = Object.keys(result)
    const text = stringifyMessage(message)
    return text === JSON.stringify(message) && JSON.stringify(Object.keys(result)) === JSON.stringify(before)
  }), { numRuns: 500 })
  t.pass()
})
