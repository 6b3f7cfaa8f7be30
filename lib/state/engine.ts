/**
 * The state engine of one plugin instance, built once by the plugin's composition
 * (`createStateEngine`): the pairing of its store and lock, the scopes on it, state handles,
 * holds for tasks, and the units of work the wires run requests in. Sessions, state handles,
 * read-only snapshots and task holds are subjects of this one engine; a request's unit of work
 * (`unit-of-work.ts`) owns its leases from the first open to the end.
 */
// Imported: the global `performance` is a lazy getter, called on every access.
import { performance } from 'node:perf_hooks'
import type { SessionLock } from '../locks/session-lock.js'
import type { SessionStore } from '../sessions/session-store.js'
import { StateHandles, type HandleKind } from './handles.js'
import type { KeyHolds } from './key-holds.js'
import { pairingFor } from './pairings/choose-pairing.js'
import type { Pairing } from './pairings/pairing.js'
import { StateBackend, type StateScope } from './state-scope.js'
import { UnitOfWork, type Opening, type UnitHome, type UnitOptions, type UnitOutcome } from './unit-of-work.js'
import { newOutages, reportRefusal, type Outages, type Subject, type UnitLogger } from './unit-report.js'
import { refusalOf, type Refusal } from './outcome.js'
import { StateRefusedError } from './unit-of-work.js'

/** What the engine is built from. */
export interface StateEngineOptions {
  store: SessionStore
  /** `null`: no lock (`sessions.lock: false`). */
  lock: SessionLock | null
  /** See `SessionOptions.cancelGraceMs` (default 5,000 ms). */
  cancelGraceMs?: number
  /** The registered handle kinds (the registry's). */
  handleKinds?: Map<string, HandleKind>
}

/**
 * How {@link StateEngine.run} went: `ran` (the work ran; what the unit kept), `missing` (the record
 * does not exist, ended, or may not serve this request), `gave-up` (stopped while queued: its
 * client left, cancelled it, or its session ended), `refused` (the store or lock cannot serve it).
 */
export type Ran<T> =
  | { status: 'ran', value: T, outcome: UnitOutcome, closedMs: number }
  | { status: 'missing' }
  | { status: 'gave-up', reason: unknown }
  | { status: 'refused', refusal: Refusal, subject: Subject, cause: unknown }

/** The state engine's part of `app.mcp.status()` (`McpStatus` documents each count). */
export interface StateStatus {
  lockWaiters: number
}

/** See the module doc. */
export class StateEngine implements UnitHome {
  readonly backend: StateBackend
  readonly handles: StateHandles
  readonly outages: Outages = newOutages()
  readonly waiting: Record<Subject, number> = { session: 0, handle: 0, call: 0 }
  readonly #holds: KeyHolds

  constructor (options: StateEngineOptions) {
    const pairing = pairingFor(options.store, options.lock)
    this.backend = new StateBackend(pairing, { cancelGraceMs: options.cancelGraceMs })
    this.handles = new StateHandles(this.backend, options.handleKinds)
    this.#holds = pairing.holds()
  }

  get pairing (): Pairing { return this.backend.pairing }
  get store (): SessionStore { return this.backend.store }
  get lock (): SessionLock | null { return this.backend.lock }

  /** What the state engine adds to `app.mcp.status()` (the requests it queues, all subjects). */
  status (): StateStatus {
    return { lockWaiters: this.waiting.session + this.waiting.handle + this.waiting.call }
  }

  /** Single-key holds for work that outlives a request (a task's runner). */
  holds (): KeyHolds { return this.#holds }

  /**
   * A failure of the store or lock outside a unit's open (a create, an event log read): logged
   * as a refusal to open is, and typed for the caller's answer.
   */
  refused (subject: Subject, key: string, err: unknown, log: UnitLogger): StateRefusedError {
    const refusal = refusalOf(err)
    reportRefusal(subject, key, refusal, err, log, this.outages)
    return new StateRefusedError(refusal, subject, err)
  }

  /** The backend answered again: an outage logged for `subject` ends with one line. */
  answered (subject: Subject, log: UnitLogger): void {
    this.outages[subject].ok(log)
  }

  /** A unit of work for one request (see `unit-of-work.ts`). */
  unit (options: UnitOptions): UnitOfWork {
    return new UnitOfWork(this, options)
  }

  /**
   * Runs `work` in a unit of work that first opens `opening` (none: the work opens what it needs,
   * handles as its calls reach them), then ends the unit: `commit` unless the unit's abort fired
   * (stopped work keeps nothing) or the work threw. Resolves how it went (see {@link Ran}); rejects
   * with what `work` threw, after the unit ended without keeping anything.
   */
  async run<T> (opening: Opening | null, options: UnitOptions, work: (scope: StateScope | null, unit: UnitOfWork) => Promise<T>): Promise<Ran<T>> {
    const unit = this.unit(options)
    let scope: StateScope | null = null
    if (opening !== null) {
      try {
        const now = unit.tryNow(opening)
        // Mostly opened without a wait (the memory store): then there is no promise to wait for.
        scope = now instanceof Promise ? await now : now
      } catch (err) {
        if (err instanceof StateRefusedError) return { status: 'refused', refusal: err.refusal, subject: err.subject, cause: err.cause }
        if (options.abort.aborted) return { status: 'gave-up', reason: options.abort.reason }
        throw err
      }
      if (scope === null) return MISSING
    }
    let value: T
    try {
      value = await work(scope, unit)
    } catch (err) {
      await unit.end('abandon')
      throw err
    }
    const how = options.abort.aborted ? 'abandon' : 'commit'
    const start = performance.now()
    // Most requests change nothing: their end needs no wait (no promise).
    const outcome = unit.endNow(how) ?? await unit.end(how)
    return { status: 'ran', value, outcome, closedMs: performance.now() - start }
  }
}

const MISSING = Object.freeze({ status: 'missing' as const })

/** Builds the state engine of a plugin instance (see the module doc). */
export function createStateEngine (options: StateEngineOptions): StateEngine {
  return new StateEngine(options)
}
