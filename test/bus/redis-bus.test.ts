import t from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { RedisBus } from '../../lib/bus/redis-bus.js'
import { Hub } from '../../lib/bus/hub.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { runBusContract } from './bus-contract.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => { admin.disconnect() })
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`
const silent = { error () {}, warn () {}, debug () {} }

/** A RedisBus on its own client (an instance of the plugin), closed in teardown. */
function busOn (t: { teardown (fn: () => unknown): void }, prefix: string): RedisBus {
  const client = new Redis(server.url)
  const bus = new RedisBus({ redis: client, prefix })
  t.teardown(async () => { await bus.close(); client.disconnect() })
  return bus
}

runBusContract(t, 'RedisBus', async (t) => {
  const prefix = newPrefix()
  return [busOn(t, prefix), busOn(t, prefix)]
})

t.test('keys: an expectation under the session\'s hash tag with the given ttl; an answer kept no longer than it had left', async t => {
  const prefix = newPrefix()
  const bus = busOn(t, prefix)
  const sid = generateSessionId()
  await bus.expect(sid, 'srv-0a0b0c0d-1', 5_000)
  const pttl = await admin.pttl(`${prefix}{${sid}}:exp:srv-0a0b0c0d-1`)
  t.ok(pttl > 4_000 && pttl <= 5_000, `expectation PTTL ${pttl}`)
  t.equal(await bus.keep(sid, 'srv-0a0b0c0d-1', '"answer"', 60_000), true)
  t.equal(await admin.exists(`${prefix}{${sid}}:exp:srv-0a0b0c0d-1`), 0, 'the expectation was claimed')
  const kept = await admin.pttl(`${prefix}{${sid}}:ans:${'srv-0a0b0c0d-1'}`)
  t.ok(kept > 0 && kept <= 5_000, `kept for what the expectation had left (${kept} ms), not the 60 s asked`)
  await bus.forget(sid, 'srv-0a0b0c0d-1')
  t.same(await admin.keys(`${prefix}*`), [], 'nothing left after forget')
})

t.test('a hub expects for clientRequestTimeout (+1 s), delivers across instances, and leaves no key behind', async t => {
  const prefix = newPrefix()
  const a = new Hub(busOn(t, prefix), silent, { clientRequestTimeout: 7_000 })
  const b = new Hub(busOn(t, prefix), silent, { clientRequestTimeout: 7_000 })
  t.teardown(async () => { await a.close(0); await b.close(0) })
  const sid = generateSessionId()
  const id = a.answers.nextId()
  const { answer } = a.answers.wait(sid, id)
  await a.topics.ready(sid) // what client-requests awaits before sending the request
  const pttl = await admin.pttl(`${prefix}{${sid}}:exp:${id}`)
  t.ok(pttl > 7_000 && pttl <= 8_000, `expectation PTTL ${pttl}: the timeout and a second`)
  t.equal(await b.answers.deliver(sid, { jsonrpc: '2.0', id, result: { ok: 1 } }, 7_000), true, 'delivered on the other instance')
  t.same(await answer, { jsonrpc: '2.0', id, result: { ok: 1 } })
  t.equal(await b.answers.deliver(sid, { jsonrpc: '2.0', id, result: { ok: 2 } }, 7_000), false, 'a second answer is dropped')
  for (let i = 0; i < 50 && (await admin.keys(`${prefix}*`)).length > 0; i++) await new Promise(resolve => setTimeout(resolve, 20))
  t.same(await admin.keys(`${prefix}*`), [], 'expectation and kept answer deleted once delivered')

  // Given up (timeout, cancel): nothing left either.
  const late = a.answers.nextId()
  const w = a.answers.wait(sid, late)
  await a.topics.ready(sid)
  t.equal(await admin.exists(`${prefix}{${sid}}:exp:${late}`), 1)
  w.answer.catch(() => {})
  w.cancel(new Error('timed out'))
  for (let i = 0; i < 50 && (await admin.keys(`${prefix}*`)).length > 0; i++) await new Promise(resolve => setTimeout(resolve, 20))
  t.same(await admin.keys(`${prefix}*`), [], 'the expectation of a wait that ended is deleted')
  t.equal(await b.answers.deliver(sid, { jsonrpc: '2.0', id: late, result: {} }, 7_000), false, 'an answer after it is dropped')
  t.same(await admin.keys(`${prefix}*`), [], 'and not kept')
})

t.test('answers nobody waits for: not kept; ids never minted cost no Redis round trip', async t => {
  const prefix = newPrefix()
  const hub = new Hub(busOn(t, prefix), silent, { clientRequestTimeout: 60_000 })
  t.teardown(() => hub.close(0))
  const sid = generateSessionId()
  const big = 'x'.repeat(1024 * 1024)
  const foreign = [1, 2, 'abc', '', 'srv-', 'srv-xyz-1', 'srv-0a0b0c0d-0', `srv-0a0b0c0d-1${'0'.repeat(40)}`, null, { a: 1 }]
  const { commands } = await commandsSent(admin, async () => {
    for (const id of foreign) t.equal(await hub.answers.deliver(sid, { jsonrpc: '2.0', id, result: { big } }, 60_000), false)
  })
  t.same(commands.filter(c => c !== 'ping'), [], `no command sent for ids never minted (${commands.join(',')})`)
  const minted = Array.from({ length: 20 }, (_, i) => `srv-deadbeef-${i + 1}`)
  const sent = await commandsSent(admin, async () => {
    for (const id of minted) t.equal(await hub.answers.deliver(sid, { jsonrpc: '2.0', id, result: { big } }, 60_000), false)
  })
  t.equal(sent.commands.filter(c => c === 'evalsha' || c === 'eval').length, 20, 'one script call each…')
  t.equal(sent.commands.filter(c => c === 'publish').length, 0, '…and nothing published')
  t.same(await admin.keys(`${prefix}*`), [], '20 unexpected 1 MiB answers: 0 keys kept')
})
