/**
 * The plugin's scripts as plain EVALSHA/EVAL commands (lib/redis/eval.ts): the same commands on
 * the wire as ioredis' defineCommand sent (EVAL first on a connection, EVALSHA after), and the
 * NOSCRIPT fallback after a SCRIPT FLUSH or a new connection.
 */
import t from 'tap'
import { once } from 'node:events'
import { Command, Redis } from 'ioredis'
import { evalshaSender } from '../../lib/redis/evalsha-command.js'
import { LuaScript, ScriptRunner } from '../../lib/redis/eval.js'
import { defineScripts, type RedisClientLike } from '../../lib/redis/scripts.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => admin.disconnect())

t.test('EVAL on a connection\'s first call, EVALSHA after; NOSCRIPT (SCRIPT FLUSH) → EVAL again', async t => {
  const client = new Redis(server.url)
  t.teardown(() => client.disconnect())
  await admin.script('FLUSH')
  const scripts = defineScripts(client as unknown as RedisClientLike)
  t.equal(defineScripts(client as unknown as RedisClientLike), scripts, 'defined once')
  await admin.set('k', 'tok')

  const first = await commandsSent(admin, async () => await scripts.mcpLockExtend('k', 'tok', 5000))
  t.equal(first.value, 1)
  t.same(first.commands, ['eval'], 'first call on the connection: EVAL loads the script')

  const next = await commandsSent(admin, async () => await scripts.mcpLockExtend('k', 'tok', 5000))
  t.equal(next.value, 1)
  t.same(next.commands, ['evalsha'], 'then EVALSHA')

  await admin.script('FLUSH')
  const flushed = await commandsSent(admin, async () => await scripts.mcpLockExtend('k', 'tok', 5000))
  t.equal(flushed.value, 1, 'the call still answers after SCRIPT FLUSH')
  t.same(flushed.commands, ['evalsha', 'eval'], 'EVALSHA answered NOSCRIPT, sent again as EVAL')
  const reloaded = await commandsSent(admin, async () => await scripts.mcpLockExtend('k', 'tok', 5000))
  t.same(reloaded.commands, ['evalsha'], 'loaded again: EVALSHA')

  // Another script, never sent on this connection: EVAL, whatever the server's cache holds.
  const release = await commandsSent(admin, async () => await scripts.mcpLockRelease('k', 'tok'))
  t.equal(release.value, 1)
  t.equal(await admin.exists('k'), 0, 'and it ran')
  t.same(release.commands, ['eval'])
})

t.test('a new connection (reconnect) starts with EVAL again; script errors other than NOSCRIPT are not retried', async t => {
  const client = new Redis(server.url)
  t.teardown(() => client.disconnect())
  const scripts = defineScripts(client as unknown as RedisClientLike)
  await scripts.mcpLockRelease('gone', 'tok')
  const before = client.stream
  const ready = once(client, 'ready')
  client.disconnect(true) // and reconnect: a new socket
  await ready
  t.not(client.stream, before, 'a new socket')
  const again = await commandsSent(admin, async () => await scripts.mcpLockRelease('gone', 'tok'))
  t.equal(again.value, 0)
  t.same(again.commands, ['eval'], 'new socket: EVAL')

  await admin.hset('h', 'f', 'v') // GET on a hash: WRONGTYPE inside the script
  const failed = await commandsSent(admin, async () => await scripts.mcpLockRelease('h', 'tok').then(() => null, (err: Error) => err))
  t.match(failed.value, { message: /WRONGTYPE/ }, 'the script\'s error rejects the call')
  t.same(failed.commands, ['evalsha'], 'sent once')
})

/** The commands `fn` made `admin`'s server run (script bodies aside), each with its arguments. */
async function argsSent (fn: () => Promise<unknown>): Promise<string[][]> {
  const monitor = await admin.monitor()
  const seen: string[][] = []
  monitor.on('monitor', (_time: string, args: string[], source: string) => { if (source !== 'lua') seen.push(args.map(String)) })
  try {
    await new Promise(resolve => setTimeout(resolve, 100))
    await fn()
    await new Promise(resolve => setTimeout(resolve, 100))
    return [...seen]
  } finally {
    monitor.disconnect()
  }
}

/** Counts the calls of the client's own `evalsha()` (the runner's fallback). */
function countEvalsha (client: Redis): { calls: number } {
  const counter = { calls: 0 }
  const own = client.evalsha.bind(client) as (...args: unknown[]) => Promise<unknown>
  ;(client as unknown as { evalsha: (...args: unknown[]) => Promise<unknown> }).evalsha = async (...args) => { counter.calls++; return await own(...args) }
  return counter
}

t.test('EVALSHA goes out as the client\'s own Command, without evalsha() (and its per-argument flat), with the same arguments on the wire', async t => {
  const client = new Redis(server.url)
  t.teardown(() => client.disconnect())
  const scripts = defineScripts(client as unknown as RedisClientLike)
  await admin.set('direct', 'tok')
  t.equal(await scripts.mcpLockExtend('direct', 'tok', 5000), 1, 'EVAL first (loads the script)')
  const counter = countEvalsha(client)
  const sent = await argsSent(async () => { t.equal(await scripts.mcpLockExtend('direct', 'tok', 7000), 1) })
  t.equal(counter.calls, 0, 'evalsha() not called')
  t.equal(sent.length, 1)
  const [name, sha, ...rest] = sent[0]
  t.equal(name.toLowerCase(), 'evalsha')
  t.match(sha, /^[0-9a-f]{40}$/)
  t.same(rest, ['1', 'direct', 'tok', '7000'], 'numbers stringified as ioredis does')
  // What evalsha() itself sends for the same call.
  const own = await argsSent(async () => { await client.evalsha(sha, 1, 'direct', 'tok', 7000) })
  t.same(own, sent, 'the same command as evalsha() sends')
  t.ok(await admin.pttl('direct') > 5000, 'and it ran')
  // A rejection (WRONGTYPE inside the script) reaches the caller.
  await admin.hset('direct-hash', 'f', 'v')
  await scripts.mcpLockRelease('direct-hash', 'tok').catch(() => {}) // EVAL on first use
  await t.rejects(scripts.mcpLockRelease('direct-hash', 'tok'), /WRONGTYPE/)
})

t.test('the RESP text of a command is the text ioredis\' own toWritable makes of it, multi-byte arguments included', async t => {
  const client = new Redis(server.url)
  t.teardown(() => client.disconnect())
  const send = evalshaSender(client)
  if (send === null) throw new Error('a plain client has a sender')
  const sha = await client.script('LOAD', 'return ARGV') as string
  const written: string[] = []
  const own = client.sendCommand
  client.sendCommand = function (this: Redis, command: Command, stream?: unknown) {
    const text = (command as unknown as { toWritable: () => string }).toWritable()
    t.equal(text, Command.prototype.toWritable.call(command, null as never), `as ioredis writes ${JSON.stringify(command.args).slice(0, 80)}`)
    written.push(text)
    return own.call(this, command, stream as never)
  } as typeof own
  const cases: Array<Array<string | number>> = [
    ['key', 'plain', 7000],
    ['k', '', '0', 'é', '€ and 😀', '{"text":"naïve – ✓"}', 'x'.repeat(70_000)],
    ['{sid}:s', '\r\n$3\r\nbad\r\n', '*1\r\n'],
    // Either side of the ready-made joints (below 256 bytes) and heads (below 64 parts).
    ['k', 'a'.repeat(255), 'b'.repeat(256), 'é'.repeat(128)],
    // One non-ASCII character in a long ASCII text, and a lone surrogate (3 bytes in UTF-8).
    ['k', `${'a'.repeat(300)}é`, 'z', 'x\ud800y'],
    Array.from({ length: 60 }, (_, i) => `a${i}`), // 63 parts with EVALSHA, its SHA and the key count
    Array.from({ length: 61 }, (_, i) => i) // 64
  ]
  for (const args of cases) {
    // What Redis keeps of a text is its UTF-8 (a lone surrogate comes back as U+FFFD).
    t.same(await send(sha, 1, args), args.slice(1).map(a => Buffer.from(String(a)).toString()), 'Redis read back every argument whole')
  }
  t.equal(written.length, cases.length)
})

t.test('a client whose evalsha() builds another command keeps evalsha(): keyPrefix, showFriendlyErrorStack, enableAutoPipelining', async t => {
  for (const options of [{ keyPrefix: 'pre:' }, { showFriendlyErrorStack: true }, { enableAutoPipelining: true }]) {
    const client = new Redis(server.url, options)
    t.teardown(() => client.disconnect())
    const scripts = defineScripts(client as unknown as RedisClientLike)
    const key = `fallback-${Object.keys(options)[0]}`
    const stored = 'keyPrefix' in options ? `pre:${key}` : key
    await admin.set(stored, 'tok')
    await scripts.mcpLockExtend(key, 'tok', 5000) // EVAL first
    const counter = countEvalsha(client)
    t.equal(await scripts.mcpLockExtend(key, 'tok', 9000), 1, `${JSON.stringify(options)}: the key the client means (${stored})`)
    t.equal(counter.calls, 1, `${JSON.stringify(options)}: through evalsha()`)
    t.ok(await admin.pttl(stored) > 5000)
  }
})

t.test('run() never throws: a client that throws instead of rejecting gives a rejection; NOSCRIPT falls back to EVAL', async t => {
  const calls: string[] = []
  let evalsha: () => Promise<unknown> = () => { throw new Error('thrown by evalsha') }
  const client = {
    stream: {},
    evalsha: () => { calls.push('evalsha'); return evalsha() },
    eval: async () => { calls.push('eval'); return 'by eval' }
  }
  const runner = new ScriptRunner(client, new LuaScript('return 1', 0))
  t.equal(await runner.run([]), 'by eval', 'a connection\'s first call: EVAL')
  let pending: Promise<unknown> | undefined
  t.doesNotThrow(() => { pending = runner.run([]) })
  await t.rejects(pending as Promise<unknown>, /thrown by evalsha/)
  evalsha = async () => { throw new Error('NOSCRIPT No matching script') }
  t.equal(await runner.run([]), 'by eval', 'NOSCRIPT: EVAL again')
  evalsha = async () => 'by evalsha'
  t.equal(await runner.run([]), 'by evalsha')
  t.same(calls, ['eval', 'evalsha', 'evalsha', 'eval', 'evalsha'])
})
