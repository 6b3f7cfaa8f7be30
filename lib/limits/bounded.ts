/** The bounded wait of a limit check on a shared backend (Redis, PostgreSQL). */

/** A check that did not answer within the backend's `timeout`. */
export class LimitBackendTimeoutError extends Error {
  constructor (ms: number) {
    super(`The limit backend did not answer within ${ms} ms`)
    this.name = 'LimitBackendTimeoutError'
  }
}

/**
 * `work`, or a {@link LimitBackendTimeoutError} after `ms` (0: unbounded); a `work` that answers
 * after that hands its answer to `late` (which gives back a lease nobody will use).
 */
export async function bounded<T> (work: Promise<T>, ms: number, late: (value: T) => void): Promise<T> {
  if (ms === 0) return await work
  let timer: NodeJS.Timeout | undefined
  let timedOut = false
  const expired = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => { timedOut = true; reject(new LimitBackendTimeoutError(ms)) }, ms)
  })
  try {
    return await Promise.race([work, expired])
  } finally {
    clearTimeout(timer)
    if (timedOut) work.then(late, () => {})
  }
}
