/**
 * A request's unit of work: every record one request holds (a handshake-era session, the state
 * handles its tool calls work on), opened in lock order — the session first, then each handle as
 * a call reaches it — and ended together: what they changed is written when the request ends
 * (in one backend call where the pairing can write several records at once), and every lease is
 * let go. Around a wait for the client it saves and lets go of everything, then takes it back in
 * the same order. It counts the requests queued for a lock (by subject), turns a lost lease into
 * the abort of the work that holds it, lets go of a record whose work was given up, and logs one
 * line per subject and outcome. The wires only admit, run and answer: what a client is told is
 * read off the {@link UnitOutcome} (`protocol/unkept-answers.ts`).
 */
import { performance } from 'node:perf_hooks'
import type { AbortSource, SessionLease } from '../locks/session-lock.js'
import { withRelease } from './pairings/any-pairing.js'
import type { WriteItem } from './pairings/pairing.js'
import { SessionEndedError, LeaseLostError, outcomeOf, type CloseResult, type Outcome, type Refusal } from './outcome.js'
import { sealSnapshot } from './snapshot.js'
import type { ScopeOptions, StateBackend, StateScope } from './state-scope.js'
import { reportClose, type Subject, type UnitLogger } from './unit-report.js'

export type { Subject, UnitLogger }

/** A cancellation the unit can read and fire (a request's `RequestAbort`). */
export interface Stoppable extends AbortSource {
  abort (reason: unknown): void
}

/**
 * How a record is opened: `lock` takes its lease (when a lock is configured) — the work writes, or
 * must see every earlier write; `snapshot` reads it without the lock and refuses writes (read-only
 * tools); `read` reads it without the lock (nothing will be written: a POST of answers only).
 */
export type OpenMode = 'lock' | 'snapshot' | 'read'

/** One record to open. */
export interface Opening {
  subject: Subject
  /** Its key in the store. */
  key: string
  mode: OpenMode
  /** Whether the record may serve this request (its owner, its kind); `false` → closed, `null` answered. */
  admit?: (scope: StateScope) => boolean
  /**
   * Look at the record before queueing for its lock (someone else's handle is then never queued
   * for, nor given a lock key or file), where the pairing does not take and read in one call and
   * the lease cannot be had at once.
   */
  look?: boolean
  /** What a lost lease of this record aborts (default: the unit's abort). */
  abort?: Stoppable
  /** The request (JSON-RPC message) that works on the record; a session is every request's. */
  member?: object
}

/** What the unit was made for. */
export interface UnitOptions {
  /** Who asks (the request): taking a key its owner holds already is an error, not a deadlock. */
  owner: object
  /** The unit's cancellation: a queued open gives up when it aborts; a lost session lease aborts it. */
  abort: Stoppable
  log: UnitLogger
}

/** A subject's part of a unit's end. */
export interface Part {
  subject: Subject
  key: string
  /** The requests working on it (none: the session, every request's). */
  members: readonly object[]
  outcome: Outcome
}

/**
 * How a unit ended: each record's outcome, in lock order, and whether changes were kept at a
 * wait for the client before it (`keptBefore`: the part before the question is kept whatever
 * happens after it).
 */
export interface UnitOutcome {
  parts: Part[]
  keptBefore: boolean
}

/** A typed refusal to open: why, and which subject. */
export class StateRefusedError extends Error {
  constructor (readonly refusal: Refusal, readonly subject: Subject, readonly cause: unknown) {
    super(`${subject} ${refusal}`)
    this.name = 'StateRefusedError'
  }
}

/** A record held by the unit. */
interface Entry {
  readonly subject: Subject
  readonly scope: StateScope
  readonly abort: Stoppable
  /** The requests working on it (none: the session, every request's). */
  readonly members: object[]
  /** How it ended early (given up, dropped), or `null` while it takes part in the end. */
  closed: CloseResult | null
}

/** What the unit needs of its engine. */
export interface UnitHome {
  readonly backend: StateBackend
  /** Requests queued for a lock, by subject. */
  readonly waiting: Record<Subject, number>
  /** Logs a failure to open and types it. */
  refused (subject: Subject, key: string, err: unknown, log: UnitLogger): StateRefusedError
  /** The backend answered: an outage logged for `subject` is over. */
  answered (subject: Subject, log: UnitLogger): void
}

const NOTHING: UnitOutcome = Object.freeze({ parts: [], keptBefore: false })
const SKIPPED: CloseResult = Object.freeze({ status: 'skipped' })

/** See the module doc. */
export class UnitOfWork {
  readonly #home: UnitHome
  readonly #options: UnitOptions
  readonly #entries: Entry[] = []
  /** Whether a wait for the client kept changes of this unit (see {@link UnitOutcome.keptBefore}). */
  #keptBefore = false
  #ended: UnitOutcome | null = null
  /** How long the last open waited for its lock and read (ms; 0 without a wait). */
  waitedMs = 0

  constructor (home: UnitHome, options: UnitOptions) {
    this.#home = home
    this.#options = options
  }

  /** Whether a record of the unit holds a lease right now. */
  get holdsLease (): boolean {
    for (const e of this.#entries) if (e.closed === null && e.scope.held) return true
    return false
  }

  /**
   * The scope of `key` this unit holds already (a batch's second call on one handle), if any;
   * `member` (that call's request) is then answered by the record's outcome too.
   */
  held (key: string, member?: object): StateScope | undefined {
    for (const e of this.#entries) {
      if (e.scope.id !== key || e.closed !== null) continue
      if (member !== undefined && !e.members.includes(member)) e.members.push(member)
      return e.scope
    }
    return undefined
  }

  /**
   * Opens a record: resolves its scope, or `null`, holding nothing, when it does not exist or may
   * not serve this request. Rejects with a {@link StateRefusedError} when the store or lock cannot
   * serve it (logged here), or with the abort's reason when the request was given up while queued.
   */
  open (o: Opening): Promise<StateScope | null> {
    try {
      const opened = this.tryNow(o)
      return opened instanceof Promise ? opened : Promise.resolve(opened)
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * {@link open}, with the scope itself, no promise, where it needs no wait (the memory store: most
   * of its requests). Throws what `open` rejects with.
   */
  tryNow (o: Opening): StateScope | null | Promise<StateScope | null> {
    let now
    try {
      now = this.#home.backend.openNow(o.key, this.#scopeOptions(o))
    } catch (err) {
      throw this.#refused(o, err)
    }
    if (now === undefined) return this.#opened(o, this.#take(o))
    if (now === null) return null
    // Given up at once, or not this request's: the asynchronous path closes and answers it.
    if ((o.abort ?? this.#options.abort).aborted || (o.admit !== undefined && !o.admit(now))) return this.#opened(o, Promise.resolve(now))
    this.waitedMs = 0
    return this.#enter(o, now)
  }

  #scopeOptions (o: Opening): ScopeOptions {
    const lock = o.mode === 'lock'
    return { lock, owner: this.#options.owner, signal: lock ? (o.abort ?? this.#options.abort) : undefined }
  }

  /** The open's promise: a look first where asked, then the scope (queued for the lock when locked). */
  async #take (o: Opening): Promise<StateScope | null> {
    const backend = this.#home.backend
    const options = this.#scopeOptions(o)
    if (o.look === true && options.lock && backend.lock !== null && !backend.pairing.oneCall) {
      const peek = await backend.open(o.key, { lock: false })
      if (peek === null || (o.admit !== undefined && !o.admit(peek))) return null
    }
    const locked = options.lock && backend.lock !== null
    if (!locked) return await backend.open(o.key, options)
    const start = performance.now()
    this.#home.waiting[o.subject]++
    try {
      return await backend.open(o.key, options)
    } finally {
      this.#home.waiting[o.subject]--
      this.waitedMs = performance.now() - start
    }
  }

  /** The rest of {@link open}: waits for the scope, and admits or refuses it. */
  async #opened (o: Opening, opening: Promise<StateScope | null>): Promise<StateScope | null> {
    const stop = o.abort ?? this.#options.abort
    let scope
    try {
      scope = await opening
    } catch (err) {
      if (stop.aborted) throw stop.reason
      throw this.#refused(o, err)
    }
    // The backend answered: an outage it had is over.
    this.#home.answered(o.subject, this.#options.log)
    if (scope === null) return null
    if (stop.aborted) {
      // Granted just as the request was given up: its work never runs.
      await scope.close()
      throw stop.reason
    }
    if (o.admit !== undefined && !o.admit(scope)) {
      await scope.close()
      return null
    }
    return this.#enter(o, scope)
  }

  /** Logs why an open failed; the typed refusal the caller answers. */
  #refused (o: Opening, err: unknown): StateRefusedError {
    return this.#home.refused(o.subject, o.key, err, this.#options.log)
  }

  /** Holds an opened scope: sealed when a snapshot, its lost lease aborting its work. */
  #enter (o: Opening, scope: StateScope): StateScope {
    if (o.mode === 'snapshot') sealSnapshot(scope, o.subject)
    const abort = o.abort ?? this.#options.abort
    // Only a scope opened under the lock ever holds a lease (also after a wait for the client).
    if (scope.held) scope.onLost(() => { abort.abort(new LeaseLostError(o.subject)) })
    this.#entries.push({ subject: o.subject, scope, abort, members: o.member === undefined ? [] : [o.member], closed: null })
    return scope
  }

  /**
   * Lets go of one record now without writing what its work changed (a call that failed, was
   * cancelled, or will be repeated from the start): its part of the end says why.
   */
  async drop (scope: StateScope): Promise<void> {
    const entry = this.#entries.find(e => e.scope === scope && e.closed === null)
    if (entry === undefined) return
    entry.closed = await scope.abandon()
    this.#report(entry)
  }

  /**
   * Before a wait for the client: writes what every record changed (together where the pairing
   * can) and lets go of every lease, so that the record's other requests — the client's answer
   * among them — are not blocked by the wait. Resolves the outcome; one that did not keep
   * everything ends the unit (nothing more is written for it).
   */
  async suspend (): Promise<UnitOutcome> {
    if (this.#ended !== null) return this.#ended
    const parts = await this.#closeAll('commit')
    const outcome = { parts, keptBefore: this.#keptBefore }
    if (!allKept(parts)) { this.#ended = outcome; return outcome }
    if (parts.some(p => p.outcome.kind === 'kept')) this.#keptBefore = true
    return outcome
  }

  /**
   * After the wait: takes every record back in lock order (ahead of newer requests of this
   * process) and re-reads it. Rejects when one cannot be had: the records not taken back count as
   * lost, so nothing more is written for them.
   */
  async resume (): Promise<void> {
    let failed: unknown
    for (const e of this.#entries) {
      if (e.closed !== null && e.closed.status !== 'ok' && e.closed.status !== 'unchanged') continue
      e.closed = null
      // Taken back even when an earlier one was not: its scope must count as lost if it cannot be.
      await e.scope.resume().catch((err: unknown) => { failed ??= err })
    }
    if (failed !== undefined) throw failed
  }

  /**
   * {@link end} without a promise when it needs neither a backend call nor a wait (nothing was
   * changed, and the pairing lets its leases go at once: the memory pairing); `null`, having done
   * nothing, otherwise.
   */
  endNow (how: 'commit' | 'abandon'): UnitOutcome | null {
    if (this.#ended !== null) return this.#ended
    if (how !== 'commit') return null
    const entries = this.#entries
    if (entries.length === 0) return (this.#ended = NOTHING)
    if (entries.length !== 1 || entries[0].closed !== null) return null
    const e = entries[0]
    const closed = e.scope.closeNow()
    if (closed === null) return null
    e.closed = closed
    this.#report(e)
    return (this.#ended = { parts: [this.#partOf(e)], keptBefore: this.#keptBefore })
  }

  /**
   * Ends the unit: `commit` writes what each record changed — all together where the pairing can,
   * else in lock order, stopping at the first that is not kept — and lets go of every lease;
   * `abandon` writes nothing. Never rejects; a second end answers the first's outcome.
   */
  async end (how: 'commit' | 'abandon'): Promise<UnitOutcome> {
    if (this.#ended !== null) return this.#ended
    const parts = await this.#closeAll(how)
    return (this.#ended = { parts, keptBefore: this.#keptBefore })
  }

  /** Closes every record still open and reports each part. */
  async #closeAll (how: 'commit' | 'abandon'): Promise<Part[]> {
    const open = this.#entries.filter(e => e.closed === null)
    if (how === 'abandon') {
      for (const e of open) e.closed = await e.scope.abandon()
    } else {
      await this.#commit(open)
    }
    for (const e of open) this.#report(e)
    return this.#entries.map(e => this.#partOf(e))
  }

  /**
   * Writes what the records changed: one record alone (most requests) through its own close;
   * several through the pairing's write of several records at once where it has one, else in
   * lock order, the rest not written once one is not kept.
   */
  async #commit (open: Entry[]): Promise<void> {
    const writeTogether = this.#home.backend.pairing.writeTogether
    let dirty = 0
    for (const e of open) if (e.scope.handle.dirty) dirty++
    if (dirty > 1 && writeTogether !== undefined) {
      await this.#commitTogether(open)
      return
    }
    let failed = false
    for (const e of open) {
      if (failed && e.scope.handle.dirty) { e.closed = await e.scope.skip(); continue }
      e.closed = await e.scope.close()
      if (!keptStatus(e.closed.status)) failed = true
    }
  }

  /** Writes the changed records in one call of the pairing (all or none), then lets go of the others. */
  async #commitTogether (open: Entry[]): Promise<void> {
    const pairing = this.#home.backend.pairing
    const writing: Entry[] = []
    const items: WriteItem[] = []
    const lost: Array<SessionLease | null> = []
    for (const e of open) {
      if (!e.scope.handle.dirty) continue
      const item = e.scope.beginWrite()
      if ('lost' in item) { e.closed = { status: 'lost' }; lost.push(item.lost); continue }
      writing.push(e)
      items.push(item)
    }
    // A lease known lost before the write: nothing is written, the others' leases end unused.
    const results = lost.length === 0
      ? await (pairing.writeTogether as NonNullable<typeof pairing.writeTogether>).call(pairing, items)
      : await Promise.all(items.map(async i => withRelease(SKIPPED, await pairing.release(i.lease))))
    for (const l of lost) void pairing.release(l)
    writing.forEach((e, i) => { e.closed = e.scope.endWrite(results[i]) })
    for (const e of open) if (e.closed === null) e.closed = await e.scope.close()
  }

  #report (e: Entry): void {
    const closed = e.closed as CloseResult
    reportClose(e.subject, e.scope.id, closed, this.#options.log, stoppedBy(e))
  }

  #partOf (e: Entry): Part {
    return { subject: e.subject, key: e.scope.id, members: e.members, outcome: outcomeOf(e.closed ?? { status: 'unchanged' }, stoppedBy(e)) }
  }
}

/** Why an entry's work was stopped, if it was: the lease lost, the session ended, … */
function stoppedBy (e: Entry): unknown {
  return e.abort.aborted ? e.abort.reason : undefined
}

function keptStatus (status: CloseResult['status']): boolean {
  return status === 'ok' || status === 'unchanged'
}

/** Whether nothing of a unit was lost (every part kept or unchanged). */
export function allKept (parts: readonly Part[]): boolean {
  for (const p of parts) if (p.outcome.kind !== 'kept' && p.outcome.kind !== 'unchanged') return false
  return true
}

export { SessionEndedError }
