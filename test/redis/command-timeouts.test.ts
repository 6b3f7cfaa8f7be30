/**
 * ioredis' `commandTimeout` for the plugin's EVALSHA commands kept by one timer per client
 * (lib/redis/command-timeouts.ts, lib/redis/evalsha-command.ts): the same rejection at the same
 * moment as ioredis' timer per command, a second request for the timeout (a resend) changing
 * nothing, and no timer made per command.
 */
import t from 'tap'
import { Redis } from 'ioredis'
import { CommandTimeouts, type TimedCommand } from '../../lib/redis/command-timeouts.js'
import { defineScripts, type RedisClientLike } from '../../lib/redis/scripts.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { sleep, until } from '../helpers/time.js'

/**
 * A command that notes when it was rejected: the tests compare that moment with the deadline, not
 * the order of two sleeps, which a loaded machine (several test files at once on two cores) reorders.
 */
interface FakeCommand extends TimedCommand { rejected: Error | null, rejectedAt: number | null, isSettled: boolean }

function command (): FakeCommand {
  return {
    prev: null,
    next: null,
    deadline: 0,
    watched: false,
    isSettled: false,
    rejected: null,
    rejectedAt: null,
    reject (err: Error) { this.rejected = err; this.rejectedAt = performance.now(); this.isSettled = true }
  }
}

/** Ms from `started` to the command's rejection (Infinity while it is not rejected). */
const rejectedAfter = (c: FakeCommand, started: number): number => c.rejectedAt === null ? Infinity : c.rejectedAt - started

/** A fresh CommandTimeouts watching two new commands, for `msA` and `msB`. */
function watchingTwo (msA: number, msB: number): { timeouts: CommandTimeouts, a: FakeCommand, b: FakeCommand } {
  const timeouts = new CommandTimeouts()
  const a = command()
  const b = command()
  timeouts.watch(a, msA)
  timeouts.watch(b, msB)
  return { timeouts, a, b }
}

t.test('an unsettled command is rejected "Command timed out" at its deadline; a settled one never', async t => {
  const started = performance.now()
  const { timeouts, a: answered, b: hung } = watchingTwo(40, 40)
  t.equal(timeouts.size, 2)
  timeouts.settled(answered)
  timeouts.settled(answered) // twice: nothing
  t.equal(timeouts.size, 1)
  await until(() => hung.rejected !== null, { what: 'the rejection' })
  t.match(hung.rejected, { message: 'Command timed out' })
  t.ok(rejectedAfter(hung, started) >= 39, `not before its deadline (${Math.round(rejectedAfter(hung, started))} ms)`)
  t.equal(answered.rejected, null)
  t.equal(timeouts.size, 0, 'nothing left watched')
})

t.test('a second request for the timeout (ioredis resends after a reconnection) keeps the first deadline', async t => {
  const timeouts = new CommandTimeouts()
  const resent = command()
  const started = performance.now()
  timeouts.watch(resent, 60)
  await sleep(30)
  // A longer timeout the second time: a deadline taken from it would fall at 630 ms or later, far
  // from the first one's 60 ms even on a loaded machine.
  timeouts.watch(resent, 600)
  t.equal(timeouts.size, 1, 'watched once')
  await until(() => resent.rejected !== null, { what: 'the rejection' })
  const at = rejectedAfter(resent, started)
  t.ok(at >= 59 && at < 400, `rejected ${Math.round(at)} ms after the first request, not 600 ms after the second`)
})

t.test('a command settled without telling (isSettled) is dropped at its deadline, not rejected', async t => {
  const timeouts = new CommandTimeouts()
  const quiet = command()
  const late = command()
  timeouts.watch(quiet, 20)
  quiet.isSettled = true
  await sleep(10)
  timeouts.watch(late, 20)
  await until(() => late.rejected !== null, { what: 'the later command\'s rejection' })
  t.equal(quiet.rejected, null, 'settled: not rejected')
  t.match(late.rejected, { message: 'Command timed out' }, 'the timer re-armed for the later deadline')
  t.equal(timeouts.size, 0)
})

t.test('a shorter timeout after a longer one (the client\'s commandTimeout changed) is kept on time', async t => {
  const started = performance.now()
  const { timeouts, a: slow, b: quick } = watchingTwo(2000, 20)
  await until(() => quick.rejected !== null, { what: 'the shorter command\'s rejection' })
  t.match(quick.rejected, { message: 'Command timed out' }, 'at its own deadline')
  t.ok(rejectedAfter(quick, started) < 2000, 'before the longer one\'s deadline')
  t.equal(slow.rejected, null)
  timeouts.settled(slow)
  t.equal(timeouts.size, 0)
})

t.test('on a real client: no timer per command, and a paused Redis times the command out as ioredis would', async t => {
  const server = await startRedisServer(t)
  const client = new Redis(server.url, { commandTimeout: 300, maxRetriesPerRequest: 0 })
  t.teardown(() => client.disconnect())
  const scripts = defineScripts(client as unknown as RedisClientLike)
  await client.ping() // connected: the next call's EVAL loads the script on this socket
  await scripts.mcpLockRelease('k', 'tok')

  const own = globalThis.setTimeout
  let timers = 0
  globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => { timers++; return own(...args) }) as typeof setTimeout
  try {
    for (let i = 0; i < 50; i++) t.equal(await scripts.mcpLockRelease('k', 'tok'), 0)
  } finally {
    globalThis.setTimeout = own
  }
  t.ok(timers <= 1, `50 commands, ${timers} timer(s) made (ioredis makes one per command)`)

  server.pause()
  const started = performance.now()
  const err = await scripts.mcpLockRelease('k', 'tok').then(() => null, (e: Error) => e)
  const after = performance.now() - started
  server.resume()
  t.match(err, { message: 'Command timed out' })
  t.ok(after >= 290 && after < 1500, `rejected after ${Math.round(after)} ms (commandTimeout 300)`)
  await sleep(50)
  t.equal(await scripts.mcpLockRelease('k', 'tok'), 0, 'the next call is answered once Redis runs again')
})
