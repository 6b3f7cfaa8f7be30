/**
 * `fastify-mcp-http/testing/contracts`: the store, lock, fenced save, pairing and fast-path contract suites the
 * plugin's own stores and locks pass, for an app's own engine (docs/your-own-engine.md). Loaded by
 * tests only (the plugin's entry never imports it). Each suite registers one test per rule with the
 * runner's `test(name, fn)` and asserts with `node:assert`: it needs nothing but Node.
 *
 *   import { test } from 'node:test'                       // or: import t from 'tap'; const test = t.test.bind(t)
 *   import { storeContract, lockContract, pairingContract } from 'fastify-mcp-http/testing/contracts'
 *   storeContract({ test, make: ({ ttl }) => new MyStore({ ttl }) })
 */
import type { SessionLock } from '../../locks/session-lock.js'
import type { SessionStore } from '../../sessions/session-store.js'
import { pairingFor } from '../../state/pairings/choose-pairing.js'
import { runPairingContract, type Test } from './pairing-contract.js'
import { registerCases, type CaseScope, type TestFunction } from './runner.js'
import { caseAssertions } from './tap-like.js'

export { storeContract, storeContractCases, type StoreContractOptions } from './store-contract.js'
export { lockContract, lockContractCases, type LockContractOptions, type MakeLockOptions } from './lock-contract.js'
export { fencedStoreContract, fencedStoreContractCases, type FencedStoreContractOptions, type FencingPair } from './fenced-store-contract.js'
export { lockingStoreContract, lockingStoreContractCases, type LockingStoreContractOptions, type LockingPair } from './locking-store-contract.js'
export type { TestFunction, CaseScope } from './runner.js'

/** One instance for {@link pairingContract}: a store and its lock (`null`: none). */
export interface StoreAndLock<S extends SessionStore = SessionStore, L extends SessionLock = SessionLock> {
  store: S
  lock: L | null
}

/** Options of {@link pairingContract}. */
export interface PairingContractOptions<S extends SessionStore = SessionStore, L extends SessionLock = SessionLock> {
  /** The runner's `test(name, fn)` (`node:test`'s `test`, tap's `t.test.bind(t)`). */
  test: TestFunction
  /** Builds a store and its lock on fresh backends, as the app hands them to the plugin. */
  make: (scope: CaseScope) => StoreAndLock<S, L> | Promise<StoreAndLock<S, L>>
  /** Cleans up what `make` built, when its case ends (default: `lock?.close?.()`, `store.close?.()`). */
  cleanup?: (made: StoreAndLock<S, L>) => unknown
  /** Whether `make` gives a lock (default `true`): without one only reads, writes and holds are checked. */
  locked?: boolean
  /** Whether an unchanged record's lease goes to a waiter of this process (a `LockingSessionStore` with `passOn`; default `false`). */
  passesOn?: boolean
  /** Whether the pairing writes several records in one call (the bundled memory, Redis and PostgreSQL ones do; none of an app's own; default `false`). */
  together?: boolean
  /** The prefix of the case names (default `pairing`): `<name>: <rule>`. */
  name?: string
}

/**
 * Registers the pairing contract's cases: what the plugin's state engine does with the store and
 * lock (take the lease and read, write and end the lease, hand on, hold), run on the pairing the
 * plugin makes of them — the plain sequence of store and lock calls, or the fast path of a
 * `LockingSessionStore`.
 */
export function pairingContract<S extends SessionStore, L extends SessionLock> (options: PairingContractOptions<S, L>): void {
  const prefix = options.name ?? 'pairing'
  const cleanup = options.cleanup ?? (async ({ store, lock }: StoreAndLock<S, L>) => { await lock?.close?.(); await store.close?.() })
  const group = declarations(options.test, prefix)
  runPairingContract({ ...group, test: (_name, fn) => { void fn(group) } }, prefix, {
    locked: options.locked ?? true,
    passesOn: options.passesOn ?? false,
    together: options.together ?? false,
    create: async (t) => {
      const made = await options.make(scopes.get(t) as CaseScope)
      t.teardown(async () => { await cleanup(made) })
      return pairingFor(made.store, made.lock)
    }
  })
}

/** Each case's `t` → its scope (what `make` is handed). */
const scopes = new WeakMap<object, CaseScope>()

/** A suite's `t` whose `test(name, fn)` registers one case with the runner. */
function declarations (test: TestFunction, prefix: string): Test {
  const outside: CaseScope = { name: prefix, teardown: () => { throw new Error('teardown outside a case') } }
  const group: Test = {
    ...caseAssertions(outside),
    test: (name, fn) => {
      registerCases(test, prefix, [{ name, run: async (_context, scope) => { await fn(caseT(scope)) } }], () => undefined)
    }
  }
  const caseT = (scope: CaseScope): Test => {
    const t: Test = { ...caseAssertions(scope), test: () => { throw new Error('a case declares no cases') } }
    scopes.set(t, scope)
    return t
  }
  return group
}
