/**
 * What the contract suites need of a test runner: one function, `test(name, fn)`, that runs `fn`
 * as a test named `name` and fails it when `fn` rejects. `node:test`'s `test`, tap's
 * `t.test.bind(t)`, vitest's and jest's `test` all are one. Each case is one such test, named
 * `<suite>: <rule>`, so a store or lock that breaks a rule fails a test that says which; the
 * assertions are `node:assert/strict` (no runner's own), and what a case makes is torn down in its
 * `finally` (no runner's teardown either).
 */

/** A runner's `test(name, fn)`: `node:test`'s `test`, tap's `t.test.bind(t)`, vitest's `test`. */
export type TestFunction = (name: string, fn: () => Promise<void>) => unknown

/** One case as it runs: its name, and where what it makes registers its clean-up. */
export interface CaseScope {
  /** The case's rule, without the suite's prefix. */
  readonly name: string
  /** Runs `fn` when the case ends, pass or fail, the last registered first. */
  teardown (fn: () => unknown): void
}

/** One rule of a suite: a name, and the body that checks it against what `make` builds. */
export interface ContractCase<C> {
  readonly name: string
  run (context: C, scope: CaseScope): Promise<void>
}

class Scope implements CaseScope {
  readonly name: string
  readonly #teardowns: Array<() => unknown> = []
  constructor (name: string) { this.name = name }
  teardown (fn: () => unknown): void { this.#teardowns.push(fn) }

  async end (): Promise<void> {
    let first: unknown
    for (const fn of this.#teardowns.reverse()) {
      try { await fn() } catch (err) { first ??= err }
    }
    if (first !== undefined) throw first
  }
}

/** Registers each case with the runner as `<prefix>: <case name>`. */
export function registerCases<C> (
  test: TestFunction,
  prefix: string,
  cases: ReadonlyArray<ContractCase<C>>,
  context: (scope: CaseScope) => C
): void {
  if (typeof test !== 'function') throw new TypeError('options.test must be a test runner\'s test(name, fn) function.')
  for (const c of cases) {
    test(`${prefix}: ${c.name}`, async () => {
      const scope = new Scope(c.name)
      let failed = true
      try {
        await c.run(context(scope), scope)
        failed = false
      } finally {
        // A teardown's error fails a case that passed; it never hides the case's own failure.
        await scope.end().catch((err: unknown) => { if (!failed) throw err })
      }
    })
  }
}

/** Resolves after `ms` ms. */
export async function sleep (ms: number): Promise<void> {
  await new Promise<void>(resolve => setTimeout(resolve, ms))
}

/** Whether `promise` settles (either way) within `ms`. */
export async function settlesWithin (promise: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false
  promise.then(() => { settled = true }, () => { settled = true })
  await sleep(ms)
  return settled
}

/** Blocks the event loop for `ms`, as a GC pause or a stalled process would: no timer (renewal) runs. */
export function freeze (ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

/** Resolves once `signal` aborts; rejects with `message` if it has not after `ms` (a bound, not a timing). */
export async function abortedWithin (signal: AbortSignal, ms: number, message: string): Promise<void> {
  if (signal.aborted) return
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => { signal.removeEventListener('abort', onAbort); reject(new Error(message)) }, ms)
    const onAbort = (): void => { clearTimeout(timer); resolve() }
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

/** The error `promise` rejects with, or `null` when it resolves. */
export async function rejection (promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
    return null
  } catch (err) {
    return err
  }
}
