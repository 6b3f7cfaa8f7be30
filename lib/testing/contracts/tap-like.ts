/**
 * The few tap-style assertions a contract case written as `t.equal(…)`, `t.same(…)` calls, on
 * `node:assert` (the pairing contract is written so: it reads as the repo's other tests, and it
 * runs on any runner through this). `t.same` is a loose deep equality, as tap's; `t.match` takes a
 * RegExp, a substring, or an object whose fields each match.
 */
import assert from 'node:assert'
import type { CaseScope } from './runner.js'

type ErrorPattern = (new (...args: never[]) => Error) | RegExp | Error | Record<string, unknown>

/** A case's `t`: assertions and teardown. */
export interface CaseAssertions {
  equal (actual: unknown, expected: unknown, message?: string): void
  not (actual: unknown, expected: unknown, message?: string): void
  same (actual: unknown, expected: unknown, message?: string): void
  notSame (actual: unknown, expected: unknown, message?: string): void
  strictSame (actual: unknown, expected: unknown, message?: string): void
  type (actual: unknown, type: string | (new (...args: never[]) => unknown), message?: string): void
  throws (fn: () => unknown, expected?: ErrorPattern, message?: string): void
  resolves (promise: Promise<unknown> | (() => Promise<unknown>), message?: string): Promise<void>
  comment (...message: unknown[]): void
  ok (value: unknown, message?: string): void
  notOk (value: unknown, message?: string): void
  match (actual: unknown, pattern: RegExp | string | Record<string, unknown>, message?: string): void
  rejects (promise: Promise<unknown> | (() => Promise<unknown>), expected?: ErrorPattern | string, message?: string): Promise<void>
  pass (message?: string): void
  fail (message?: string): void
  teardown (fn: () => unknown): void
}

/** A contract suite's `t` at its top: `test(name, fn)` declares one case. */
export interface SuiteDeclarations {
  test (name: string, fn: (t: SuiteDeclarations & CaseAssertions) => Promise<void>): void
}

function matches (actual: unknown, pattern: unknown): boolean {
  if (pattern instanceof RegExp) return pattern.test(String(actual))
  if (typeof pattern === 'string') return String(actual).includes(pattern)
  if (pattern !== null && typeof pattern === 'object') {
    if (actual === null || (typeof actual !== 'object' && typeof actual !== 'function')) return false
    return Object.entries(pattern).every(([key, value]) => matches((actual as Record<string, unknown>)[key], value))
  }
  return Object.is(actual, pattern)
}

/** The assertions of one case, its teardown the case's scope. */
export function caseAssertions (scope: CaseScope): CaseAssertions {
  return {
    equal: (actual, expected, message) => { assert.strictEqual(actual, expected, message) },
    not: (actual, expected, message) => { assert.notStrictEqual(actual, expected, message) },
    same: (actual, expected, message) => { assert.deepEqual(actual, expected, message) },
    notSame: (actual, expected, message) => { assert.notDeepEqual(actual, expected, message) },
    strictSame: (actual, expected, message) => { assert.deepStrictEqual(actual, expected, message) },
    type: (actual, type, message) => {
      // eslint-disable-next-line valid-typeof -- the type's name is given, as in tap
      assert.ok(typeof type === 'string' ? typeof actual === type : actual instanceof type, message ?? `not of type ${typeof type === 'string' ? type : type.name}`)
    },
    throws: (fn, expected, message) => {
      if (expected === undefined || typeof expected === 'function' || expected instanceof RegExp || expected instanceof Error) { assert.throws(fn, expected as never, message); return }
      let err: unknown
      try { fn() } catch (e) { err = e ?? null }
      assert.ok(err !== undefined && matches(err, expected), message ?? `expected a throw matching ${JSON.stringify(expected)}`)
    },
    resolves: async (promise, message) => { await assert.doesNotReject(typeof promise === 'function' ? promise() : promise, message) },
    comment: () => {},
    ok: (value, message) => { assert.ok(value, message) },
    notOk: (value, message) => { assert.ok(!(value as boolean), message) },
    match: (actual, pattern, message) => {
      assert.ok(matches(actual, pattern), message ?? `${JSON.stringify(actual)} does not match ${String(pattern)}`)
    },
    rejects: async (promise, expected, message) => {
      const settled = typeof promise === 'function' ? promise() : promise
      if (typeof expected === 'string') { await assert.rejects(settled, expected); return }
      if (expected === undefined) { await assert.rejects(settled, message ?? 'expected a rejection'); return }
      if (typeof expected === 'function' || expected instanceof RegExp || expected instanceof Error) { await assert.rejects(settled, expected as never, message); return }
      const err = await settled.then(() => undefined, (e: unknown) => e ?? null)
      assert.ok(err !== undefined, message ?? 'expected a rejection')
      assert.ok(matches(err, expected), `${message ?? 'rejection'}: ${String(err)} does not match ${JSON.stringify(expected)}`)
    },
    pass: () => {},
    fail: (message) => { assert.fail(message) },
    teardown: (fn) => { scope.teardown(fn) }
  }
}
