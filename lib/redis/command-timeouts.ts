/**
 * ioredis' `commandTimeout` for the EVALSHA commands `eval.ts` builds, kept by one timer per client
 * instead of a timer per command.
 *
 * Why: on a client with `commandTimeout` (every client the plugin makes: 500 ms, fail fast)
 * ioredis arms a `setTimeout` for each command it sends, clears it on the reply and then deletes
 * the property that held it; with one request at a time Node also makes and drops its timer list
 * for that duration on each command: a visible share of a locked request's two scripts
 * (docs/performance.md).
 *
 * The same contract as ioredis' timer: a command still unsettled `ms` after ioredis first asked
 * for its timeout (when it was written or queued) is rejected with ioredis' own error, "Command
 * timed out"; asking again (ioredis does when it resends a command after a reconnection) changes
 * nothing. One {@link EarliestTimer}: when it fires, what is due is rejected and it is armed for
 * the earliest deadline left.
 */
import { performance } from 'node:perf_hooks'
import { EarliestTimer } from '../util/earliest-timer.js'
import { LinkedList, type Linked } from '../util/linked-list.js'

/** A command the timeouts watch: an ioredis `Command`, with the fields this module adds. */
export interface TimedCommand extends Linked<TimedCommand> {
  /** When it times out (`performance.now()` scale); 0 until ioredis asks for its timeout. */
  deadline: number
  /** Whether it is in the list. */
  watched: boolean
  /** ioredis 6 (`isSettled`) and 5 (`isResolved`): whether it was answered (or rejected). */
  readonly isSettled?: boolean
  readonly isResolved?: boolean
  reject: (err: Error) => void
}

/** The commands of one client waiting for a reply, oldest first (see the module doc). */
export class CommandTimeouts {
  readonly #waiting = new LinkedList<TimedCommand>()
  readonly #timer = new EarliestTimer(() => { this.#tick() })

  /** Starts the timeout of `command` (ioredis' `setTimeout(ms)`), unless it was started already. */
  watch (command: TimedCommand, ms: number): void {
    if (command.deadline !== 0) return
    command.deadline = performance.now() + ms
    command.watched = true
    this.#waiting.push(command)
    this.#timer.armFor(command.deadline)
  }

  /** Stops watching `command` (it settled); nothing if it is not watched. */
  settled (command: TimedCommand): void {
    if (!command.watched) return
    command.watched = false
    this.#waiting.remove(command)
  }

  /** Commands watched (for tests). */
  get size (): number {
    return this.#waiting.size
  }

  #tick (): void {
    const now = performance.now()
    let next = Infinity
    // The whole list (the commands in flight): deadlines are in order unless the client's
    // commandTimeout was changed meanwhile.
    for (let c = this.#waiting.head; c !== null;) {
      const after = c.next
      if (c.deadline > now) {
        next = Math.min(next, c.deadline)
      } else {
        this.settled(c)
        if (c.isSettled !== true && c.isResolved !== true) c.reject(new Error('Command timed out'))
      }
      c = after
    }
    if (next !== Infinity) this.#timer.armFor(next)
  }
}
