/**
 * The running side of one task, on the instance that accepted it. It holds the task's lease from
 * the configured lock (taken before the record existed, renewed by the lock, released after the
 * last write) and every write it makes is fenced by that lease: an instance whose lease ran out
 * cannot overwrite what another one decided (the task `failed` because its runner looked dead).
 *
 * It listens on the bus channel of the task for what other instances tell it (a cancellation, an
 * answer to an input request) and, because pub/sub is only a wake-up, also re-reads the record on a
 * timer; the record is the truth. It renews the principal's task slot until its handler has
 * returned and its end is written, whichever comes last: a handler that ignores a cancellation
 * runs on after the task is `cancelled`, and keeps counting against its client until it returns
 * (else create + cancel cycles would run any number of them).
 */
import type { Bus, BusMessage } from '../bus/bus.js'
import type { KeyHold } from '../state/key-holds.js'
import type { JsonValue, SessionStore } from '../sessions/session-store.js'
import { K, isTerminal, taskKey } from './task-record.js'
import { shownId } from '../util/shown-id.js'

/** How often the runner re-reads its record (cancellation and answers also arrive by bus at once). */
export const CHECK_INTERVAL = 2000

/** The least time between two `statusMessage` writes. */
const NOTE_INTERVAL = 1000

/** Why a task's handler was aborted. */
export class TaskAbortError extends Error {
  /** `cancelled`: the client cancelled it; `lost`: its lease or record is gone. */
  readonly kind: 'cancelled' | 'lost'
  constructor (kind: 'cancelled' | 'lost', message: string) {
    super(message)
    this.name = 'TaskAbortError'
    this.kind = kind
  }
}

/** How a task ended: its tool result, or a JSON-RPC error. */
export type TaskOutcome = { result: Record<string, unknown> } | { error: { code: number, message: string, data?: unknown } }

/** The end of a cancelled task (its record's cancellation mark makes it `cancelled`; the error is not shown). */
const CANCELLED: TaskOutcome = { error: { code: -32603, message: 'The task was cancelled' } }

/** What a run needs from the service that made it. */
export interface TaskRunDeps {
  store: SessionStore
  bus: Bus
  /** The hold on the task's key: its writes are fenced by its lease (none without a lock). */
  hold: KeyHold
  ttlMs: number
  /** Renews the principal's task slot (false: it is gone); called on the check timer until the slot is given back. */
  renewSlot: () => Promise<boolean>
  /** Gives the slot back. */
  releaseSlot: () => Promise<void>
  warn: (obj: Record<string, unknown>, msg: string) => void
}

interface Pending {
  method: string
  params: Record<string, unknown>
  resolve: (answer: Record<string, unknown>) => void
  reject: (err: unknown) => void
}

/** See the module doc. */
export class TaskRun {
  readonly id: string
  readonly key: string
  readonly #d: TaskRunDeps
  readonly #controller = new AbortController()
  readonly #pending = new Map<string, Pending>()
  /** Input requests written to the record and not answered yet. */
  readonly #asked = new Set<string>()
  #serial: Promise<unknown> = Promise.resolve()
  #timer: NodeJS.Timeout | null = null
  #unsubscribe: Promise<(() => Promise<void>) | null> = Promise.resolve(null)
  #flushing = false
  #done = false
  /** The write of the task's end, once `finish`, `stop` or a cancellation started it. */
  #finished: Promise<void> | null = null
  /** The slot was given back (once). */
  #slotFreed = false
  /** The progress message waiting to be written, and when the last one was. */
  #note: string | null = null
  #lastNote = 0

  constructor (id: string, deps: TaskRunDeps) {
    this.id = id
    this.key = taskKey(id)
    this.#d = deps
    const signal = deps.hold.signal
    if (signal !== null) {
      const lost = (): void => { if (!this.#done) this.#abort(new TaskAbortError('lost', 'the task lease was lost')) }
      if (signal.aborted) lost()
      else signal.addEventListener('abort', lost, { once: true })
    }
  }

  /** Aborted when the client cancels the task, or its lease is lost. */
  get signal (): AbortSignal { return this.#controller.signal }

  /** Starts listening for cancellations and answers. */
  start (): void {
    this.#unsubscribe = this.#d.bus.subscribe(`task:${this.id}`, (m) => { this.#onMessage(m) })
      .catch((err: unknown) => { this.#d.warn({ err, task: shownId(this.id) }, 'task bus subscription failed; relying on the check timer'); return null })
    this.#timer = setInterval(() => { this.#tick() }, CHECK_INTERVAL)
    this.#timer.unref()
  }

  /**
   * Asks the client (an input request under the handler's `key`): the task turns `input_required`
   * with it, and the promise resolves with the answer `tasks/update` brings, on any instance.
   * Requests made in the same turn are written together.
   */
  async ask (key: string, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (this.#controller.signal.aborted) throw this.#controller.signal.reason
    if (this.#pending.has(key)) throw new TypeError(`input request "${key}" is already pending`)
    return await new Promise((resolve, reject) => {
      this.#pending.set(key, { method, params, resolve, reject })
      if (!this.#flushing) {
        this.#flushing = true
        setImmediate(() => {
          this.#flushing = false
          // A store that fails here fails the asks: the handler sees the error, the task ends failed.
          this.#queue(async () => { await this.#flush() }).catch((err: unknown) => {
            this.#d.warn({ err, task: shownId(this.id) }, 'task input requests not written')
            this.#abort(new TaskAbortError('lost', 'the input requests could not be written'))
          })
        })
      }
    })
  }

  /**
   * Progress of the task, shown as `statusMessage` (best effort): at most one write per
   * {@link NOTE_INTERVAL}, the latest message winning, so a handler reporting often costs little.
   */
  async note (message: string): Promise<void> {
    if (this.#done) return
    const first = this.#note === null
    this.#note = message.slice(0, 1024)
    if (!first) return
    const wait = Math.max(0, this.#lastNote + NOTE_INTERVAL - Date.now())
    setTimeout(() => {
      const text = this.#note
      this.#note = null
      this.#lastNote = Date.now()
      if (text === null || this.#done) return
      void this.#queue(async () => { await this.#write({ [K.statusMessage]: text }) }).catch(() => {})
    }, wait).unref()
  }

  /**
   * The handler returned with `outcome` (or none runs): writes how the task ended (a cancellation
   * mark wins) unless its end was written already, lets go of the lease, and gives the slot back.
   * Only the first end writes; every call resolves once that write is over.
   */
  async finish (outcome: TaskOutcome): Promise<void> {
    await this.#endWith(outcome)
    await this.#freeSlot()
  }

  /**
   * Ends the task now, whatever its handler does (this instance is shutting down): the handler's
   * `ctx.signal` aborts with `reason`, and `outcome` is written as the task's end unless the
   * handler's own end is already being written (then that one is awaited). The slot is given
   * back: the instance stops serving, its handler's work with it.
   */
  async stop (reason: Error, outcome: TaskOutcome): Promise<void> {
    this.#abort(reason)
    await this.#endWith(outcome)
    await this.#freeSlot()
  }

  /** The end written once: `outcome`, unless an end was already being written. */
  async #endWith (outcome: TaskOutcome): Promise<void> {
    this.#finished ??= this.#end(outcome)
    await this.#finished
  }

  /** Gives the slot back (once) and stops renewing it. */
  async #freeSlot (): Promise<void> {
    if (this.#slotFreed) return
    this.#slotFreed = true
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
    await this.#d.releaseSlot().catch(() => {})
  }

  async #end (outcome: TaskOutcome): Promise<void> {
    this.#done = true
    for (const p of this.#pending.values()) p.reject(new TaskAbortError('lost', 'the task ended'))
    this.#pending.clear()
    try {
      await this.#queue(async () => {
        const record = await this.#d.store.load(this.key)
        // Gone, or ended by someone else (marked failed while this runner was stalled): theirs stands.
        if (record === null || isTerminal(record.data[K.status])) return
        const cancelled = record.data[K.cancel] !== undefined
        const now = Date.now()
        const set: Record<string, JsonValue> = { [K.lastUpdatedAt]: new Date(now).toISOString(), [K.expiresAt]: now + this.#d.ttlMs }
        if (cancelled) {
          set[K.status] = 'cancelled'
        } else if ('result' in outcome) {
          set[K.status] = 'completed'
          set[K.result] = outcome.result as JsonValue
        } else {
          set[K.status] = 'failed'
          set[K.error] = outcome.error as JsonValue
        }
        // The end and the lease's release in one step where the backends can: an instance that
        // reads the end finds the task's key free.
        const status = await this.#d.hold.finish({ set, delete: [K.inputRequests] }, record.version)
        if (status !== 'ok') this.#abort(new TaskAbortError('lost', `the task could not be written (${status})`))
      })
    } catch (err) {
      this.#d.warn({ err, task: shownId(this.id) }, 'the end of a task could not be written; it turns failed once its lease expires')
    } finally {
      // The slot is given back by `finish` (the handler returned) or `stop`: a handler still
      // running keeps it, renewed by the timer.
      await this.#d.hold.end()
      const unsubscribe = await this.#unsubscribe
      await unsubscribe?.().catch(() => {})
    }
  }

  #abort (reason: Error): void {
    if (this.#controller.signal.aborted) return
    // Cancellation is the client's doing, a shutdown this instance's; anything else means it lost the task.
    if (reason instanceof TaskAbortError && reason.kind === 'lost') this.#d.warn({ task: shownId(this.id), reason: reason.message }, 'task runner stops: it lost the task')
    this.#controller.abort(reason)
    for (const p of this.#pending.values()) p.reject(reason)
    this.#pending.clear()
  }

  #onMessage (m: BusMessage): void {
    if (m.t !== 'task' || m.id !== this.id) return
    if (m.what === 'cancel') this.#cancelled()
    void this.#queue(async () => { await this.#check() }).catch(() => {})
  }

  /**
   * The client cancelled the task: the handler's signal aborts, and the task ends now — written
   * `cancelled`, its lease given back — whether or not the handler stops; its slot stays taken
   * until the handler returns. What the handler does afterwards is refused (`note` and `ask` are
   * no-ops or throw; its result is dropped by `finish`, which writes only once).
   */
  #cancelled (): void {
    this.#abort(new TaskAbortError('cancelled', 'the task was cancelled'))
    void this.#endWith(CANCELLED)
  }

  #tick (): void {
    this.#d.renewSlot().catch(() => {})
    if (this.#done) return
    void this.#queue(async () => { await this.#check() }).catch((err: unknown) => { this.#d.warn({ err, task: shownId(this.id) }, 'task check failed') })
  }

  /** Runs `fn` after the runner's earlier reads and writes: its writes never overtake each other. */
  async #queue<T> (fn: () => Promise<T>): Promise<T> {
    const next = this.#serial.then(fn, fn)
    this.#serial = next.catch(() => {})
    return await next
  }

  /** Writes the input requests asked since the last flush. */
  async #flush (): Promise<void> {
    if (this.#done) return
    const requests: Record<string, JsonValue> = {}
    for (const [key, p] of this.#pending) {
      requests[key] = { method: p.method, params: p.params as JsonValue }
      this.#asked.add(key)
    }
    if (Object.keys(requests).length === 0) return
    await this.#write({ [K.status]: 'input_required', [K.inputRequests]: requests })
  }

  /** Re-reads the record: a cancellation mark, answers to pending input requests. */
  async #check (): Promise<void> {
    if (this.#done) return
    const record = await this.#d.store.load(this.key)
    if (record === null) { this.#abort(new TaskAbortError('lost', 'the task record is gone')); return }
    const data = record.data
    if (data[K.cancel] !== undefined) { this.#cancelled(); return }
    if (isTerminal(data[K.status])) { this.#abort(new TaskAbortError('lost', 'the task was ended elsewhere')); return }
    const answered: string[] = []
    for (const key of this.#asked) {
      const answer = data[K.answer + key]
      if (answer === undefined) continue
      answered.push(key)
      this.#asked.delete(key)
      const p = this.#pending.get(key)
      this.#pending.delete(key)
      p?.resolve(answer as Record<string, unknown>)
    }
    if (answered.length === 0) return
    const left: Record<string, JsonValue> = {}
    const requests = (data[K.inputRequests] ?? {}) as Record<string, JsonValue>
    for (const key of this.#asked) left[key] = requests[key] ?? null
    const set: Record<string, JsonValue> = { [K.lastUpdatedAt]: new Date().toISOString() }
    if (this.#asked.size > 0) set[K.inputRequests] = left
    else set[K.status] = 'working'
    await this.#save(set, [...answered.map(k => K.answer + k), ...(this.#asked.size > 0 ? [] : [K.inputRequests])], record.version)
  }

  async #write (set: Record<string, JsonValue>): Promise<void> {
    const record = await this.#d.store.load(this.key)
    if (record === null) { this.#abort(new TaskAbortError('lost', 'the task record is gone')); return }
    if (isTerminal(record.data[K.status])) { this.#abort(new TaskAbortError('lost', 'the task was ended elsewhere')); return }
    await this.#save({ ...set, [K.lastUpdatedAt]: new Date().toISOString() }, [], record.version)
  }

  /** A fenced save; a refusal means someone else decided about this task: the handler is stopped. */
  async #save (set: Record<string, JsonValue>, del: string[], version: number): Promise<void> {
    const status = await this.#d.hold.save({ set, delete: del }, version)
    if (status !== 'ok') this.#abort(new TaskAbortError('lost', `the task could not be written (${status})`))
  }
}
