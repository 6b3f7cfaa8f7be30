/**
 * RedisBus on a private redis-server: the bus contract with several instances (each bus its own
 * clients, as separate processes would have), then what only the Redis bus does: its channel
 * names on the wire, prefixes, kept values' keys, and what it drops instead of delivering.
 */
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { RedisBus, type BusMessage } from '../../lib/index.js'
import { Hub } from '../../lib/bus/hub.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { commandsSent } from '../helpers/redis-monitor.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { until } from '../helpers/time.js'
import { runBusContract } from './bus-contract.js'

const server = await startRedisServer(t)
const admin = new Redis(server.url)
t.teardown(() => { admin.disconnect() })
const newPrefix = (): string => `test:${randomBytes(4).toString('hex')}:`
const silent = { error () {}, warn () {}, debug () {} }

interface Warning { obj: object, msg: string }

/** A bus with its own publishing client; both closed in teardown. Warnings are collected. */
function newBus (t: Test, prefix: string, warnings: Warning[] = []): RedisBus {
  const client = new Redis(server.url)
  const bus = new RedisBus({ redis: client, prefix, log: { warn: (obj, msg) => { warnings.push({ obj, msg }) } } })
  t.teardown(async () => { await bus.close(); client.disconnect() })
  return bus
}

const contractPrefix = newPrefix()
runBusContract(t, 'RedisBus', {
  open: async (t) => newBus(t, contractPrefix),
  crossInstance: true,
  keeps: true,
  channels: (bus) => (bus as RedisBus).channels
})

const note = (text: string): BusMessage => ({ t: 'notify', sid: 's', msg: { text } })
const texts = (got: BusMessage[]): unknown[] => got.map(m => m.t === 'notify' ? m.msg.text : m.t)
const waitText = async (got: BusMessage[], text: string): Promise<void> =>
  await until(() => texts(got).includes(text), { what: `"${text}" (got ${JSON.stringify(texts(got))})` })

t.test("channel names: a session channel carries the session's hash tag, others the prefix", async t => {
  const prefix = newPrefix()
  const bus = newBus(t, prefix)
  t.equal(bus.prefix, prefix)
  t.equal(bus.channelName('s:abc'), `${prefix}{abc}:c`)
  t.equal(bus.channelName('broadcast'), `${prefix}broadcast`)
  const byDefault = new RedisBus({ redis: admin }) // its own subscriber connection: closed below
  t.equal(byDefault.prefix, 'mcp:', 'default prefix')
  await byDefault.close()
  // On the wire: a raw subscriber of that name gets what the bus publishes.
  const raw = admin.duplicate()
  t.teardown(() => { raw.disconnect() })
  const seen: string[] = []
  raw.on('message', (_channel: string, text: string) => { seen.push(text) })
  await raw.subscribe(`${prefix}{abc}:c`)
  await bus.publish('s:abc', note('wire'))
  await until(() => seen.length > 0, { what: 'the raw message' })
  t.same(seen.map(s => JSON.parse(s)), [note('wire')])
})

t.test('buses with different prefixes do not hear each other', async t => {
  const [a, b] = [newBus(t, newPrefix()), newBus(t, newPrefix())]
  const got: BusMessage[] = []
  await b.subscribe('shared', (m) => { got.push(m) })
  await a.publish('shared', note('other prefix'))
  // Redis runs commands one at a time: this PUBLISH is handled after the one above.
  await b.publish('shared', note('marker'))
  await waitText(got, 'marker')
  t.same(texts(got), ['marker'])
})

t.test('the last unsubscribe of a channel releases it in Redis too', async t => {
  const prefix = newPrefix()
  const bus = newBus(t, prefix)
  const numsub = async (): Promise<number> => Number((await admin.pubsub('NUMSUB', `${prefix}c`) as [string, string])[1])
  const offs = [await bus.subscribe('c', () => {}), await bus.subscribe('c', () => {})]
  t.equal(await numsub(), 1, 'one SUBSCRIBE for two listeners')
  await offs[0]()
  t.equal(await numsub(), 1, 'kept while a listener is left')
  await offs[1]()
  t.equal(await numsub(), 0, 'UNSUBSCRIBEd')
})

t.test('a malformed message is dropped and logged; delivery goes on', async t => {
  const prefix = newPrefix()
  const warnings: Warning[] = []
  const bus = newBus(t, prefix, warnings)
  const got: BusMessage[] = []
  await bus.subscribe('c', (m) => { got.push(m) })
  await admin.publish(`${prefix}c`, '{not json')
  await bus.publish('c', note('marker'))
  await waitText(got, 'marker')
  t.same(texts(got), ['marker'])
  t.same(warnings.map(w => w.msg), ['malformed bus message dropped'])
})

t.test('a listener that throws is logged; the others still get the message', async t => {
  const warnings: Warning[] = []
  const bus = newBus(t, newPrefix(), warnings)
  const got: BusMessage[] = []
  await bus.subscribe('c', () => { throw new Error('listener bug') })
  await bus.subscribe('c', (m) => { got.push(m) })
  await bus.publish('c', note('one'))
  await waitText(got, 'one')
  t.same(warnings.map(w => w.msg), ['bus listener failed'])
})

t.test('subscribe after close is refused', async t => {
  const bus = newBus(t, newPrefix())
  await bus.close()
  await t.rejects(bus.subscribe('c', () => {}), { message: 'bus closed' })
})

t.test("kept values live under the session's hash tag, with the ttl", async t => {
  const prefix = newPrefix()
  const bus = newBus(t, prefix)
  await bus.expect('sid-1', 'srv-1', 10_000)
  await bus.keep('sid-1', 'srv-1', 'v', 5000)
  const key = `${prefix}{sid-1}:ans:srv-1`
  t.equal(await admin.get(key), 'v')
  const pttl = await admin.pttl(key)
  t.ok(pttl > 0 && pttl <= 5000, `PX ttl (${pttl})`)
  await bus.take('sid-1', 'srv-1')
  t.equal(await admin.exists(key), 0, 'take deleted the key')
})

t.test('keys: an expectation under the session\'s hash tag with the given ttl; an answer kept no longer than it had left', async t => {
  const prefix = newPrefix()
  const bus = newBus(t, prefix)
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

t.test('a hub expects for clientRequestTimeoutMs (+1 s), delivers across instances, and leaves no key behind', async t => {
  const prefix = newPrefix()
  const a = new Hub(newBus(t, prefix), silent, { clientRequestTimeoutMs: 7_000 })
  const b = new Hub(newBus(t, prefix), silent, { clientRequestTimeoutMs: 7_000 })
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
  const hub = new Hub(newBus(t, prefix), silent, { clientRequestTimeoutMs: 60_000 })
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
