/**
 * How the tests count Redis round trips: the commands clients sent while a piece of work ran, seen
 * through MONITOR (commands run inside Lua scripts are left out: they cost no round trip).
 */
import type { Redis } from 'ioredis'
import { sleep } from './time.js'

/** Runs `fn` under MONITOR on `redis` (a connection of its own); the command names, lower case. */
export async function commandsSent<T> (redis: Redis, fn: () => Promise<T>): Promise<{ value: T, commands: string[] }> {
  const monitor = await redis.monitor()
  const commands: string[] = []
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source !== 'lua') commands.push(String(args[0]).toLowerCase())
  })
  try {
    await sleep(100) // MONITOR starts reporting a little after it is on
    const value = await fn()
    await sleep(100)
    // A copy: the monitor connection closes after this returns, and a command of the caller's
    // sent meanwhile may still be reported on it (a later `redis.exists(...)` was seen here).
    return { value, commands: [...commands] }
  } finally {
    monitor.removeAllListeners('monitor')
    monitor.disconnect()
  }
}
