/**
 * Time in tests: let time pass (`sleep`), or wait for something to become true (`until`).
 * Prefer `until` (or an SSE reader's `waitFor`): a fixed sleep is right only where time itself is
 * what the test is about (a ttl, a timeout), never to guess when something else has happened.
 */

/**
 * Resolves after `ms` ms; with `signal`, rejects with its reason as soon as it aborts (so a tool
 * handler that waits can be cancelled like real work).
 */
export async function sleep (ms: number, signal?: AbortSignal): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    if (signal?.aborted === true) { reject(signal.reason); return }
    const onAbort = (): void => { clearTimeout(timer); reject(signal?.reason) }
    const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

export interface UntilOptions {
  /** How long to wait in all, in ms (default 5,000: several processes may share 2 cores). */
  timeout?: number
  /** What is awaited, for the error message. */
  what?: string
  /** Pause between two checks, in ms (default 10). */
  every?: number
}

/**
 * Polls `check` until it returns true; rejects once `timeout` ms have passed without. For positive
 * conditions only: "nothing happened" is never proved by waiting for a while.
 */
export async function until (check: () => boolean | Promise<boolean>, o: UntilOptions = {}): Promise<void> {
  const deadline = Date.now() + (o.timeout ?? 5000)
  while (!await check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${o.what ?? 'a condition'}`)
    await sleep(o.every ?? 10)
  }
}

/** Whether `promise` settles (either way) within `ms`. */
export async function settlesWithin (promise: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false
  promise.then(() => { settled = true }, () => { settled = true })
  await sleep(ms)
  return settled
}
