/**
 * Waiting, shared by the three locks: the default and validation of acquire timeouts, backoff with
 * jitter between polls of a busy backend, and a delay that any of several signals can cut short.
 */

/** Default acquire timeout of every lock (ms). */
export const DEFAULT_LOCK_TIMEOUT = 30_000

/**
 * Validates a timeout in milliseconds (`Infinity` allowed).
 * @throws {RangeError} "<name> must be greater than or equal to 0."
 */
export function checkTimeout (value: unknown, name = 'timeout'): number {
  if (typeof value !== 'number' || !(value >= 0)) {
    throw new RangeError(`${name} must be greater than or equal to 0.`)
  }
  return value
}

/** Exponential backoff with full jitter: a random delay in [0, min(cap, base * 2^attempt)). */
export function fullJitter (attempt: number, base: number, cap: number): number {
  return Math.random() * Math.min(cap, base * 2 ** Math.min(attempt, 30))
}

/** Waits `ms`, or rejects with the reason of the first of `signals` to abort. */
export function delay (ms: number, ...signals: Array<AbortSignal | undefined>): Promise<void> {
  return new Promise((resolve, reject) => {
    for (const signal of signals) {
      if (signal?.aborted === true) {
        reject(signal.reason)
        return
      }
    }
    const done = (): void => {
      clearTimeout(timer)
      for (const signal of signals) signal?.removeEventListener('abort', onAbort)
    }
    const onAbort = function (this: AbortSignal): void {
      done()
      reject(this.reason)
    }
    const timer = setTimeout(() => {
      done()
      resolve()
    }, ms)
    for (const signal of signals) signal?.addEventListener('abort', onAbort, { once: true })
  })
}
