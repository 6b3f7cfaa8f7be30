/**
 * The kit's runner adapter (lib/testing/contracts/runner.ts) and its tap-style assertions
 * (tap-like.ts): a case's teardowns run last registered first, pass or fail; a teardown's error
 * fails a case that passed and never hides the case's own failure; the assertions throw what
 * `node:assert` throws, so any runner reports them.
 */
import t from 'tap'
import { registerCases, type CaseScope, type TestFunction } from '../../lib/testing/contracts/runner.js'
import { caseAssertions } from '../../lib/testing/contracts/tap-like.js'

/** Registers the cases with a runner of this file's own; each case's error (or null), by name. */
async function runAll (register: (test: TestFunction) => void): Promise<Record<string, string | null>> {
  const cases: Array<[string, () => Promise<void>]> = []
  register((name, fn) => { cases.push([name, fn]) })
  const out: Record<string, string | null> = {}
  for (const [name, fn] of cases) out[name] = await fn().then(() => null, (err: Error) => err.message)
  return out
}

t.test('a case: named <prefix>: <name>, teardowns last first, their errors never hiding the case\'s own', async t => {
  const order: string[] = []
  const results = await runAll(test => {
    registerCases(test, 'suite', [
      { name: 'passes', run: async (_c, scope) => { scope.teardown(() => order.push('first')); scope.teardown(() => order.push('second')) } },
      { name: 'fails', run: async (_c, scope) => { scope.teardown(() => { throw new Error('teardown') }); throw new Error('the case') } },
      { name: 'teardown fails', run: async (_c, scope) => { scope.teardown(() => { throw new Error('teardown') }) } }
    ], () => ({}))
  })
  t.same(results, { 'suite: passes': null, 'suite: fails': 'the case', 'suite: teardown fails': 'teardown' })
  t.same(order, ['second', 'first'])
  t.throws(() => { registerCases(undefined as unknown as TestFunction, 'x', [], () => ({})) }, TypeError)
})

t.test('tap-style assertions throw as node:assert does', async t => {
  const torn: number[] = []
  const scope: CaseScope = { name: 'x', teardown: () => { torn.push(1) } }
  const a = caseAssertions(scope)
  a.equal(1, 1); a.same({ a: [1] }, { a: [1] }); a.ok(true); a.notOk(false); a.pass()
  a.match('lock is not held', /not held/); a.match('abc', 'b'); a.match({ code: 'X', n: { m: 1 } }, { code: /X/, n: { m: 1 } })
  t.throws(() => { a.match(null, { code: 'X' }) })
  t.throws(() => { a.match(2, { code: 'X' }) })
  t.throws(() => { a.equal(1, 2) })
  t.throws(() => { a.fail('no') }, { message: 'no' })
  await a.rejects(Promise.reject(new RangeError('r')), RangeError)
  await a.rejects(async () => { throw new Error('fn') }, 'a function that rejects')
  await a.rejects(Promise.reject(new Error('any')))
  await a.rejects(Promise.reject(Object.assign(new Error('coded'), { code: 'C' })), { code: 'C' })
  await t.rejects(a.rejects(Promise.resolve(1), { code: 'C' }))
  await t.rejects(a.rejects(Promise.reject(new Error('other')), { code: 'C' }))
  a.not(1, 2); a.notSame({ a: 1 }, { a: 2 }); a.strictSame([1], [1]); a.type('s', 'string'); a.type(new RangeError('x'), Error); a.comment('c')
  t.throws(() => { a.type(1, 'string') })
  a.throws(() => { throw new RangeError('t') }, RangeError)
  a.throws(() => { throw Object.assign(new Error('t'), { code: 'T' }) }, { code: 'T' })
  t.throws(() => { a.throws(() => {}, { code: 'T' }) })
  await a.resolves(Promise.resolve(1))
  await a.resolves(async () => {})
  a.teardown(() => {})
  t.same(torn, [1])
})
