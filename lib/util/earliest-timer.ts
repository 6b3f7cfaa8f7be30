/**
 * One timer for many deadlines: armed for the earliest moment anything needs, moved only for an
 * earlier one, and left armed when what it waited for is gone (it then fires once, finds nothing
 * due, and stops). Its owner walks what it holds when it fires, and arms it again for the next
 * deadline. A request at a time then costs no timer operation, where a timer per item was a large
 * part of the CPU of a locked request (lease renewals, Redis command timeouts). Imports nothing,
 * so every room may use it.
 */
import { performance } from 'node:perf_hooks'

/** See the module doc. Deadlines are on the `performance.now()` scale. */
export class EarliestTimer {
  #timer: NodeJS.Timeout | undefined
  #armedFor = Infinity
  readonly #fire: () => void
  readonly #onTimer = (): void => {
    this.#timer = undefined
    this.#armedFor = Infinity
    this.#fire()
  }

  /** `fire` runs when the timer goes off; it arms the timer again if anything is left. */
  constructor (fire: () => void) {
    this.#fire = fire
  }

  /** Makes the timer go off at `at`, unless it is armed for that moment or an earlier one already. Unref'd. */
  armFor (at: number): void {
    if (at >= this.#armedFor) return
    clearTimeout(this.#timer)
    this.#armedFor = at
    this.#timer = setTimeout(this.#onTimer, Math.max(1, Math.ceil(at - performance.now()))).unref()
  }

  /** Disarms it. */
  stop (): void {
    clearTimeout(this.#timer)
    this.#timer = undefined
    this.#armedFor = Infinity
  }
}
