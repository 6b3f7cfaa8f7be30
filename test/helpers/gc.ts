/**
 * V8's full garbage collection, for tests that measure the heap or check that something can be
 * collected: `--expose-gc` is turned on at run time and `gc` taken from a fresh context (the
 * test runner does not start Node with the flag).
 */
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

/** Runs a full collection (twice: what the first one's finalizers freed goes too). */
export function fullGc (): void {
  gc()
  gc()
}

/**
 * Whether what `ref` points to is gone after a full collection, given a turn of the event loop
 * first (V8 keeps a WeakRef's target until the end of the job that made or read it).
 */
export async function collected (ref: WeakRef<object>): Promise<boolean> {
  await new Promise(resolve => setImmediate(resolve))
  fullGc()
  return ref.deref() === undefined
}
