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
import { sleep } from '../helpers/time.js'

interface FakeCommand extends TimedCommand { rejected: Error | null, isSettled: boolean }

function command (): FakeCommand {
  return {
    prev: null,
    next: null,
    deadline: 0,
    watched: false,
    isSettled: false,
    rejected: null,
    reject (err: Error) { this.rejected = err; this.isSettled = true }
  }
}

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
  const { timeouts, a: answered, b: hung } = watchingTwo(40, 40)
  t.equal(timeouts.size, 2)
  timeouts.settled(answered)
  timeouts.settled(answered) // twice: nothing
  t.equal(timeouts.size, 1)
  await sleep(20)
  t.equal(hung.rejected, null, 'not before its deadline')
  await sleep(60)
  t.match(hung.rejected, { message: 'Command timed out' })
  t.equal(answered.rejected, null)
  t.equal(timeouts.size, 0, 'nothing left watched')
})

t.test('a second request for the timeout (ioredis resends after a reconnection) keeps the first deadline', async t => {
  const timeouts = new CommandTimeouts()
  const resent = command()
  const started = performance.now()
  timeouts.watch(resent, 60)
  await sleep(30)
  timeouts.watch(resent, 60)
  t.equal(timeouts.size, 1, 'watched once')
  while (resent.rejected === null && performance.now() - started < 500) await sleep(5)
  const at = performance.now() - started
  t.ok(at >= 55 && at < 85, `rejected ${Math.round(at)} ms after the first request, not 60 ms after the second`)
})

t.test('a command settled without telling (isSettled) is dropped at its deadline, not rejected', async t => {
  const timeouts = new CommandTimeouts()
  const quiet = command()
  const late = command()
  timeouts.watch(quiet, 20)
  quiet.isSettled = true
  await sleep(10)
  timeouts.watch(late, 20)
  await sleep(60)
  t.equal(quiet.rejected, null, 'settled: not rejected')
  t.match(late.rejected, { message: 'Command timed out' }, 'the timer re-armed for the later deadline')
  t.equal(timeouts.size, 0)
})

t.test('a shorter timeout after a longer one (the client\'s commandTimeout changed) is kept on time', async t => {
  const { timeouts, a: slow, b: quick } = watchingTwo(400, 20)
  await sleep(80)
  t.match(quick.rejected, { message: 'Command timed out' }, 'at its own deadline')
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
