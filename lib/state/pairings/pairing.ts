/**
 * A pairing: how one (store, lock) pair takes, reads, writes and lets go of one leased record.
 * The state scope (`../state-scope.ts`) says what to do with a key — open, close, suspend and
 * resume around a wait, destroy — and asks its pairing how, so the scope never looks at which
 * store or lock it runs on. One pairing per kind of backend pair, chosen once when the plugin
 * builds its state engine (`choose-pairing.ts`); what makes one faster than the plain sequence of
 * store and lock calls (a read without a promise, one backend call for lease and read, a lease
 * handed on inside the process) stays inside it.
 *
 * One contract suite (`lib/testing/contracts/pairing-contract.ts`) runs against every pairing.
 */
import type { LocalAcquireOptions, SessionLease, SessionLock } from '../../locks/session-lock.js'
import type { SaveGuard, SessionChanges, SessionRecord, SessionStore } from '../../sessions/session-store.js'
import type { KeyHolds } from '../key-holds.js'
import type { CloseResult } from '../outcome.js'

/** A record read, with the lease it was read under (`null`: read without the lock). */
export interface Taken {
  lease: SessionLease | null
  record: SessionRecord
}

/** One record's write: its changes, fenced by its lease (`null`: written without the lock). */
export interface WriteItem {
  id: string
  changes: SessionChanges
  guard: SaveGuard
  lease: SessionLease | null
}

/** What {@link Pairing.takeNow} is asked for: `lock` says whether to take the lease. */
export interface TakeOptions extends LocalAcquireOptions {
  lock: boolean
}

/** See the module doc. */
export interface Pairing {
  readonly store: SessionStore
  /** `null`: no lock (`lock: false`); nothing is leased. */
  readonly lock: SessionLock | null
  /**
   * Whether {@link take} takes the lease and reads in one backend call. Without it, callers that
   * must not queue for a key they may not use (someone else's handle) look at it first.
   */
  readonly oneCall: boolean
  /** Whether {@link letGoNow} can end a lease without a promise (else it is never called with one). */
  readonly letsGoNow: boolean
  /**
   * The record (and the lease when `options.lock` and a lock is configured) without a promise,
   * where that needs neither a backend call nor a wait; `null` when the record does not exist;
   * `undefined`, having done nothing, when {@link take} or {@link read} must be awaited.
   */
  takeNow (id: string, options: TakeOptions): Taken | null | undefined
  /**
   * Waits for the key's lease (the lock's timeout, signal, owner and errors) and reads the record
   * under it. `null`, holding nothing, when the record does not exist; an unknown key never makes
   * a lock key or file. Only with a lock.
   */
  take (id: string, options: LocalAcquireOptions): Promise<Taken | null>
  /** Reads the record without the lock (`null`: it does not exist). */
  read (id: string): Promise<SessionRecord | null>
  /**
   * Ends the lease of a record left unchanged, without a promise: handed on to the next holder of
   * this process, or released. Only where {@link letsGoNow}.
   */
  letGoNow (id: string, lease: SessionLease): CloseResult
  /** Ends the lease of a record left unchanged: handed on ({@link passOn}), or released. */
  letGo (id: string, lease: SessionLease): Promise<CloseResult>
  /**
   * Hands the lease of a record left unchanged, with the record as read under it, to the next
   * request of this process waiting for the same key, without a backend call (its {@link take}
   * resolves with them, its own copy). False, holding on, when it cannot (no waiter, the lease
   * lost or stale, passed on too often in a row, a pairing that never does).
   */
  passOn (id: string, lease: SessionLease): boolean
  /**
   * Writes `changes` (fenced by the lease where the store can check it) and ends the lease, even
   * when the write fails. Never rejects: a failed write is `{ status: 'failed', error }`.
   */
  write (id: string, changes: SessionChanges, guard: SaveGuard, lease: SessionLease | null): Promise<CloseResult>
  /**
   * Optional, where the backend can: writes several records all together or not at all (one
   * Redis script on one node, one PostgreSQL call, one synchronous step in memory) and ends every
   * lease, even when it fails. Resolves each item's result in order: `ok` for all, or, when one
   * cannot be written (`gone`, `fenced`, `failed`), that one's status and `skipped` for the rest;
   * never rejects. Without it, a unit of work writes its records one by one in lock order.
   */
  writeTogether? (items: readonly WriteItem[]): Promise<CloseResult[]>
  /** Releases a lease; resolves the error when that failed (it then expires in the backend). */
  release (lease: SessionLease | null): Promise<unknown>
  /** Calls `fn` once when `lease` is lost (a Redis or PostgreSQL lease that could not be renewed). */
  whenLost (lease: SessionLease, fn: () => void): void
  /** Whether `lease` is lost or can no longer be ours by the clock. */
  expired (lease: SessionLease): boolean
  /** Single-key holds on this pairing's store (a task's runner: `../key-holds.ts`). */
  holds (): KeyHolds
}
