/**
 * Tasks of one plugin instance: creating one (a slot of the principal, the lease, then the record:
 * a `tasks/get` right after the answer finds it), and what any instance answers about any task:
 * `tasks/get`, `tasks/update`, `tasks/cancel`. A task is bound to the principal that created it;
 * an id that is malformed, unknown, expired or someone else's is the same `null` (no oracle).
 *
 * A task whose runner died is found out by whoever looks next: the record says it runs, and its
 * lease can be taken. That instance then marks it `failed` under the lease it took (fenced like
 * any write), so a task is never left `working` forever.
 */
import type { Bus } from '../bus/bus.js'
import { ErrorCode, McpError } from '../jsonrpc/errors.js'
import type { LimitBackend } from '../limits/backend.js'
import { isUnconfirmed } from '../redis/replica-ack.js'
import { retryAfterSeconds } from '../limits/errors.js'
import type { KeyHold, KeyHolds } from '../state/key-holds.js'
import { SPENT_KEY } from '../sessions/held-state.js'
import type { JsonValue, SessionRecord } from '../sessions/session-store.js'
import { K, expired, isTaskId, isTerminal, mintTaskId, newRecord, pendingRequests, taskKey } from './task-record.js'
import { CHECK_INTERVAL, TaskRun } from './task-run.js'
import { shownId } from '../util/shown-id.js'

type Data = Record<string, JsonValue>

/** The `tasks` option, resolved. */
export interface TaskOptions {
  /** How long a finished task's record is kept (`ttlMs` on the wire), ms. */
  ttlMs: number
  /** The `pollIntervalMs` suggested to clients. */
  pollIntervalMs: number
  /** Tasks running at once (`working` or `input_required`) per principal (per address when anonymous). */
  maxPerPrincipal: number
}

/** What the service runs on. */
export interface TaskServiceDeps {
  /** The tasks' store, and the holds the runners keep on their keys (without a lock a dead runner is not detected). */
  holds: KeyHolds
  bus: Bus
  /** Where the per-principal slots live (the limits backend: Redis across instances). */
  slots: LimitBackend
  options: TaskOptions
  warn: (obj: Record<string, unknown>, msg: string) => void
}

/** Lifetime of a slot lease: renewed on every check of its runner. */
const SLOT_LEASE = CHECK_INTERVAL * 5

/** The error of a task whose runner stopped (its lease expired before it ended). */
export const RUNNER_LOST = { code: ErrorCode.InternalError, message: 'The instance running this task stopped before the task ended (its lease expired).' }

/** 429: the principal has as many tasks running as it may. */
export class TaskLimitError extends McpError {
  constructor (max: number, retryAfterMs: number) {
    const wait = Math.max(1, Math.ceil(retryAfterMs))
    super(ErrorCode.ServerError, `Too many tasks running for this caller (at most ${max}); retry after ${wait} ms`,
      { limit: 'tasks', max, retryAfterMs: wait }, 429, { 'retry-after': retryAfterSeconds(wait) })
    this.name = 'TaskLimitError'
  }
}

/** 503: a backend failed while a task was being created; nothing of it is left to be seen. */
function unavailable (err: unknown, warn: TaskServiceDeps['warn']): McpError {
  warn({ err }, 'task not created: a backend failed')
  return new McpError(ErrorCode.ServerError, 'Tasks cannot be created right now; retry later', undefined, 503)
}

/** See the module doc. */
export class TaskService {
  readonly options: TaskOptions
  readonly #d: TaskServiceDeps

  constructor (deps: TaskServiceDeps) {
    this.#d = deps
    this.options = deps.options
  }

  /**
   * Creates a task for `owner` (counted against `slot`, the principal or the address) and returns
   * its runner, started. Resolves only once the record is stored.
   * @throws {TaskLimitError} 429 past `maxPerPrincipal`; 503 when a backend fails; an unconfirmed
   * write (`redis/replica-ack.ts`) as it is.
   */
  async create (owner: string | null, slot: string): Promise<{ run: TaskRun, record: Data }> {
    const { holds, slots, options } = this.#d
    const store = holds.store
    const id = mintTaskId()
    const slotKey = `tasks:${slot}`
    const spec = { intervalUs: 0, burst: 0, concurrency: options.maxPerPrincipal, leaseMs: SLOT_LEASE }
    const decision = await slots.acquire(slotKey, spec, id).catch((err: unknown) => { throw unavailable(err, this.#d.warn) })
    if (!decision.ok) throw new TaskLimitError(options.maxPerPrincipal, decision.retryAfterMs)
    let hold: KeyHold | null = null
    try {
      // The lease before the record: nobody can see the task without its runner. (A fresh random
      // key: busy only if minted twice.)
      hold = await holds.tryHold(taskKey(id))
      if (hold === null) throw new Error('a new task key is held already')
      const record = newRecord(owner, slotKey, options.ttlMs, options.pollIntervalMs)
      // Counted in the store against the client's key too (its finished tasks are records it holds).
      await store.create(taskKey(id), record, { ttl: options.ttlMs + SLOT_LEASE, owner: slot })
      const run = new TaskRun(id, {
        store,
        bus: this.#d.bus,
        hold,
        ttlMs: options.ttlMs,
        renewSlot: async () => await slots.renew(slotKey, id, SLOT_LEASE),
        releaseSlot: async () => { await slots.release(slotKey, id) },
        warn: this.#d.warn
      })
      run.start()
      return { run, record }
    } catch (err) {
      await hold?.end()
      await slots.release(slotKey, id).catch(() => {})
      // Too few replicas acknowledged the lease or the record: not "unavailable", the caller's
      // answer says what is known (`protocol/unconfirmed.ts`).
      if (isUnconfirmed(err)) throw err
      throw unavailable(err, this.#d.warn)
    }
  }

  /**
   * The record of a task of `owner` as a client may see it now, or `null` (see the module doc). A
   * finished task's record is marked spent the first time its outcome is read (`held-state.ts`):
   * it stays readable, but a full memory store lets it go before any record holding state.
   */
  async get (id: unknown, owner: string | null): Promise<Data | null> {
    const record = await this.#load(id, owner)
    if (record === null) return null
    if (isTerminal(record.data[K.status]) || record.data[K.cancel] !== undefined) {
      if (record.data[SPENT_KEY] === undefined) await this.#spend(id as string)
      return record.data
    }
    return await this.#checkRunner(id as string, record.data)
  }

  /** Marks a task's record spent: best effort (a hint for eviction; the read it follows answers anyway). */
  async #spend (id: string): Promise<void> {
    await this.#d.holds.store.save(taskKey(id), { set: { [SPENT_KEY]: true }, delete: [] }).catch(() => {})
  }

  /**
   * `tasks/update`: keeps the answers to input requests the task is waiting for (others are
   * ignored, as are answers `valid` refuses) and wakes its runner. Resolves `false` when the task
   * is not found.
   */
  async update (id: unknown, owner: string | null, responses: Record<string, unknown>,
    valid: (method: string, answer: unknown) => boolean): Promise<boolean> {
    const record = await this.#load(id, owner)
    if (record === null) return false
    const data = record.data
    if (isTerminal(data[K.status]) || data[K.cancel] !== undefined) return true
    const pending = pendingRequests(data)
    const set: Data = {}
    for (const [key, answer] of Object.entries(responses)) {
      const request = pending[key] as { method?: string } | undefined
      if (request === undefined || typeof request.method !== 'string' || !valid(request.method, answer)) continue
      set[K.answer + key] = answer as JsonValue
    }
    if (Object.keys(set).length === 0) return true
    // Keys the runner never writes: no fence needed, nothing of the runner's is overwritten.
    await this.#d.holds.store.save(taskKey(id as string), { set, delete: [] })
    this.#wake(id as string, 'input')
    return true
  }

  /**
   * `tasks/cancel`: marks the task cancelled (a finished one stays as it is) and tells its runner,
   * which then ends the task (see `TaskRun`). Its slot stays taken until its handler returns: a
   * handler that ignores its signal keeps counting against its client (its runner's instance
   * renews the slot; one that died lets it expire). `false`: not found.
   */
  async cancel (id: unknown, owner: string | null): Promise<boolean> {
    const record = await this.#load(id, owner)
    if (record === null) return false
    if (isTerminal(record.data[K.status]) || record.data[K.cancel] !== undefined) return true
    // Cancelled: what the record holds is past its use (`held-state.ts`).
    await this.#d.holds.store.save(taskKey(id as string), { set: { [K.cancel]: { at: new Date().toISOString() }, [SPENT_KEY]: true }, delete: [] })
    this.#wake(id as string, 'cancel')
    return true
  }

  async #load (id: unknown, owner: string | null): Promise<SessionRecord | null> {
    if (!isTaskId(id)) return null
    const record = await this.#d.holds.store.load(taskKey(id))
    if (record === null || record.data[K.owner] !== owner) return null
    if (expired(record.data)) {
      await this.#d.holds.store.destroy(taskKey(id)).catch(() => {})
      return null
    }
    return record
  }

  /**
   * A running task whose lease is free has lost its runner: mark it failed under that lease.
   * Without a lock nothing can tell (documented).
   */
  async #checkRunner (id: string, data: Data): Promise<Data> {
    const holds = this.#d.holds
    if (!holds.locking) return data
    const hold = await holds.tryHold(taskKey(id))
    if (hold === null) return data
    try {
      const record = await this.#d.holds.store.load(taskKey(id))
      if (record === null) return data
      if (isTerminal(record.data[K.status])) return record.data
      const now = Date.now()
      const set: Data = { [K.status]: 'failed', [K.error]: RUNNER_LOST, [K.lastUpdatedAt]: new Date(now).toISOString(), [K.expiresAt]: now + this.options.ttlMs }
      const status = await hold.save({ set, delete: [K.inputRequests] }, record.version)
      if (status !== 'ok') return record.data
      this.#d.warn({ task: shownId(id) }, 'task failed: its runner stopped before it ended')
      const out = { ...record.data, ...set }
      delete out[K.inputRequests]
      return out
    } finally {
      await hold.end()
    }
  }

  #wake (id: string, what: 'cancel' | 'input'): void {
    // The record holds it already; the bus only spares the runner its next check.
    this.#d.bus.publish(`task:${id}`, { t: 'task', id, what }).catch((err: unknown) => { this.#d.warn({ err, task: shownId(id) }, 'task wake-up not published') })
  }
}
