/**
 * The one bounded wait of the plugin's shutdown paths: a close, a drain or a release may wait for
 * work that hangs (a Redis that stopped answering, a handler that ignores its signal), but only so
 * long. Imports nothing, so every room may use it.
 */

/**
 * Resolves `true` once `work` has settled (fulfilled or rejected), `false` after `ms`; never
 * rejects. `keepAlive: false` unrefs the timer: a close that must not hold the process open by
 * itself. A drain keeps it (the default), or the process could exit before its deadline.
 */
export async function settleWithin (work: Promise<unknown>, ms: number, { keepAlive = true } = {}): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<boolean>(resolve => {
    timer = setTimeout(() => { resolve(false) }, ms)
    if (!keepAlive) timer.unref()
  })
  try {
    return await Promise.race([work.then(() => true, () => true), late])
  } finally {
    clearTimeout(timer)
  }
}
