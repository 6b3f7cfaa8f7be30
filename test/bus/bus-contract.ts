/**
 * The bus contract (lib/bus/bus.ts), run against every bus (memory, Redis). A bus-specific test
 * file calls `runBusContract(t, name, options)`; `open` builds a fresh bus and registers its own
 * cleanup with `t.teardown`.
 *
 * "Nothing arrived" is never proved by waiting a while: after the message that must not arrive, a
 * marker is published on the same channel (or, for the memory bus, the event loop turns once), and
 * only once the marker has arrived is the absence asserted. That relies on delivery in publish
 * order on one channel, which the first test asserts.
 */
import { randomBytes } from 'node:crypto'
import type { Test } from 'tap'
import type { Bus, BusMessage } from '../../lib/index.js'
import { sleep, until } from '../helpers/time.js'

export interface BusContractOptions {
  /** A fresh bus, closed at the end of the test. */
  open: (t: Test) => Promise<Bus>
  /**
   * Buses from separate `open` calls reach each other (other instances on one backend: Redis).
   * Without it each bus is a world of its own (MemoryBus), and every check runs on one bus.
   */
  crossInstance: boolean
  /**
   * The bus keeps a copy of an expected answer (`take`), for a waiter that missed its publish; a
   * bus that cannot lose a publish (in-process) need not.
   */
  keeps: boolean
  /** Channels the bus listens to (both buses expose `channels`: it must return to 0). */
  channels: (bus: Bus) => number
  /**
   * Known defects, reported as tap `todo` (run and shown, not failing the suite) until lib fixes
   * them: the reason for each.
   */
  todo?: {
    /** A second call of an unsubscribe function ends a newer subscription of the same listener. */
    staleUnsubscribe?: string
  }
}

/** How long a wait for a delivery may take (Redis servers and test processes share 2 cores). */
const DELIVERY = 5000

/** A name no other test uses, for channels and session ids (the Redis contract shares one server and prefix). */
const unique = (name: string): string => `${name}-${randomBytes(4).toString('hex')}`

/** A message that says which channel and which step it is. */
const note = (text: string): BusMessage => ({ t: 'notify', sid: 'contract', msg: { jsonrpc: '2.0', method: 'notifications/test', params: { text } } })

/** The `text` of a message made by `note` (undefined for any other). */
const textOf = (m: BusMessage): unknown => m.t === 'notify' ? (m.msg.params as { text?: unknown } | undefined)?.text : undefined

/** What a listener received, with a way to wait for a message. */
class Inbox {
  readonly got: BusMessage[] = []
  readonly listener = (m: BusMessage): void => { this.got.push(m) }
  get texts (): unknown[] { return this.got.map(textOf) }
  async waitFor (text: string): Promise<void> {
    await until(() => this.texts.includes(text), { timeout: DELIVERY, what: `"${text}" (got ${JSON.stringify(this.texts)})` })
  }
}

/** One message of every shape the plugin sends, to check they arrive as sent. */
const EVERY_KIND: BusMessage[] = [
  { t: 'answer', sid: 's1', msg: { jsonrpc: '2.0', id: 'srv-1', result: { action: 'accept', content: { name: 'Ada ✓' } } } },
  { t: 'cancel', sid: 's1', requestId: 7 },
  { t: 'cancel', sid: 's1', requestId: 'seven' },
  { t: 'notify', sid: 's1', msg: { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: [1, null, 'x'] } } },
  { t: 'subs', sid: 's1', uris: ['test://a', 'test://b'] },
  { t: 'event', sid: 's1', streamId: 'stream-1', id: 'stream-1_2', data: '{"jsonrpc":"2.0"}\n' },
  { t: 'streamEnd', sid: 's1', streamId: 'stream-1' },
  { t: 'getStream', sid: 's1', claim: 'claim-1' },
  { t: 'ended', sid: 's1' },
  { t: 'broadcast', kind: 'tools', msg: { jsonrpc: '2.0', method: 'notifications/tools/list_changed' } },
  { t: 'resource', uri: 'test://a' }
]

export function runBusContract (t: Test, name: string, options: BusContractOptions): void {
  t.test(`${name}: bus contract`, async t => {
    deliveryChecks(t, options)
    unsubscribeChecks(t, options)
    unsubscribeEdgeChecks(t, options)
    activeOnResolveChecks(t, options)
    answerChecks(t, options)
    if (options.keeps) keepChecks(t, options)
    else {
      t.test('keeps no copy: no take (a waiter never polls)', async t => {
        const bus = await options.open(t)
        t.equal(bus.take, undefined)
      })
    }
    closeChecks(t, options)
  })
}

/** What most checks start from: a publishing bus and a subscribing one, a fresh channel, two inboxes. */
interface Scene { pub: Bus, sub: Bus, c: string, a: Inbox, b: Inbox }

/** A scene; the subscribing bus is another instance where the bus reaches one, else the same bus. */
async function scene (t: Test, options: BusContractOptions, name: string): Promise<Scene> {
  const pub = await options.open(t)
  const sub = options.crossInstance ? await options.open(t) : pub
  return { pub, sub, c: unique(name), a: new Inbox(), b: new Inbox() }
}

function deliveryChecks (t: Test, options: BusContractOptions): void {
  t.test('every subscriber of a channel gets every message, as sent, in publish order', async t => {
    const { pub, sub, c, a, b } = await scene(t, options, 'all')
    const inboxes = [a, b, new Inbox()]
    await sub.subscribe(c, inboxes[0].listener)
    await sub.subscribe(c, inboxes[1].listener)
    // The publisher's own subscriber too (another instance's and this one's both listen).
    await pub.subscribe(c, inboxes[2].listener)
    for (const m of EVERY_KIND) await pub.publish(c, m)
    await pub.publish(c, note('end'))
    for (const inbox of inboxes) await inbox.waitFor('end')
    for (const [i, inbox] of inboxes.entries()) t.same(inbox.got, [...EVERY_KIND, note('end')], `subscriber ${i + 1}`)
  })

  t.test('a message reaches the subscribers of its channel only', async t => {
    const { pub, sub, c: base } = await scene(t, options, 'only')
    // Names that a careless mapping would mix up: a prefix of another, and session channels.
    const names = [base, `${base}x`, `s:${base}`, `s:${base}x`, `x${base}`]
    const inboxes = new Map(names.map(n => [n, new Inbox()]))
    for (const [n, inbox] of inboxes) await sub.subscribe(n, inbox.listener)
    for (const n of names) await pub.publish(n, note(`for ${n}`))
    // Published after every other message: once it is in, anything misrouted would be too.
    for (const n of names) await pub.publish(n, note('marker'))
    for (const [n, inbox] of inboxes) {
      await inbox.waitFor('marker')
      t.same(inbox.texts, [`for ${n}`, 'marker'], n)
    }
  })

  t.test('publishing to a channel nobody listens to is fine', async t => {
    const bus = await options.open(t)
    await bus.publish(unique('nobody'), note('lost'))
    t.equal(options.channels(bus), 0)
  })
}

function unsubscribeChecks (t: Test, options: BusContractOptions): void {
  t.test('unsubscribe stops delivery to that listener only', async t => {
    const { pub, sub, c, a: gone, b: stays } = await scene(t, options, 'unsub')
    const unsubscribe = await sub.subscribe(c, gone.listener)
    await sub.subscribe(c, stays.listener)
    await pub.publish(c, note('before'))
    await gone.waitFor('before')
    await unsubscribe()
    await pub.publish(c, note('after'))
    await pub.publish(c, note('marker'))
    await stays.waitFor('marker')
    t.same(gone.texts, ['before'], 'nothing after unsubscribe')
    t.same(stays.texts, ['before', 'after', 'marker'], 'the other listener still gets everything')
  })

  t.test('unsubscribe is idempotent: a second call changes nothing', async t => {
    const { pub, sub, c, a: gone, b: stays } = await scene(t, options, 'twice')
    const unsubscribe = await sub.subscribe(c, gone.listener)
    const unsubscribeOther = await sub.subscribe(c, stays.listener)
    await unsubscribe()
    await unsubscribe()
    t.equal(options.channels(sub), 1, 'the channel is still subscribed for the other listener')
    await pub.publish(c, note('one'))
    await stays.waitFor('one')
    await unsubscribeOther()
    await unsubscribeOther()
    t.equal(options.channels(sub), 0, 'released once the last listener left')
    // The channel can be subscribed again after the double calls.
    const again = new Inbox()
    await sub.subscribe(c, again.listener)
    await pub.publish(c, note('two'))
    await again.waitFor('two')
    t.same([gone.texts, stays.texts, again.texts], [[], ['one'], ['two']])
  })
}

function unsubscribeEdgeChecks (t: Test, options: BusContractOptions): void {
  t.test('a stale unsubscribe does not end a newer subscription of the same listener', async t => {
    const { pub, sub, c, a: inbox, b: witness } = await scene(t, options, 'stale')
    const first = await sub.subscribe(c, inbox.listener)
    await first()
    await sub.subscribe(c, inbox.listener)
    await first() // the first subscription's function, called again
    // Subscribed after the stale call, so it hears the channel whatever that call did.
    await sub.subscribe(c, witness.listener)
    await pub.publish(c, note('still'))
    await witness.waitFor('still')
    t.same(inbox.texts, ['still'], 'the newer subscription still delivers', { todo: options.todo?.staleUnsubscribe })
  })

  t.test('channels: counted once however many listeners, back to 0 when all left', async t => {
    const bus = await options.open(t)
    const [a, b] = [unique('count-a'), unique('count-b')]
    const offs = [await bus.subscribe(a, () => {}), await bus.subscribe(a, () => {}), await bus.subscribe(b, () => {})]
    t.equal(options.channels(bus), 2)
    await offs[0]()
    t.equal(options.channels(bus), 2, 'a still has a listener')
    await offs[1]()
    t.equal(options.channels(bus), 1)
    await offs[2]()
    t.equal(options.channels(bus), 0)
  })
}

function activeOnResolveChecks (t: Test, options: BusContractOptions): void {
  t.test('subscribe resolves once active: a publish right after it is delivered', async t => {
    const { pub, sub } = await scene(t, options, 'active')
    const inboxes: Inbox[] = []
    for (let i = 0; i < 20; i++) {
      const c = unique(`active-${i}`)
      const inbox = new Inbox()
      inboxes.push(inbox)
      await sub.subscribe(c, inbox.listener)
      await pub.publish(c, note(`m${i}`))
    }
    for (const [i, inbox] of inboxes.entries()) await inbox.waitFor(`m${i}`)
    t.pass('all 20 delivered')
  })

  t.test('a second subscriber of a channel being subscribed resolves once active too', async t => {
    const { pub, sub, c, a: first, b: second } = await scene(t, options, 'joining')
    const subscribing = sub.subscribe(c, first.listener)
    await sub.subscribe(c, second.listener)
    await pub.publish(c, note('right after'))
    await subscribing
    await first.waitFor('right after')
    await second.waitFor('right after')
    t.same([first.texts, second.texts], [['right after'], ['right after']])
  })

  t.test('unsubscribe then subscribe at once: the new subscription is active', async t => {
    const { pub, sub, c, a: old, b: fresh } = await scene(t, options, 'resubscribe')
    const off = await sub.subscribe(c, old.listener)
    const leaving = off()
    await sub.subscribe(c, fresh.listener)
    await leaving
    await pub.publish(c, note('after'))
    await fresh.waitFor('after')
    t.same(old.texts, [], 'the old listener got nothing')
    t.equal(options.channels(sub), 1)
  })
}

/** Client answers: only an answer the server expects (for that session) is accepted, once. */
function answerChecks (t: Test, options: BusContractOptions): void {
  t.test('answers: expect, keep and forget come together', async t => {
    const bus = await options.open(t)
    t.type(bus.expect, 'function')
    t.type(bus.keep, 'function')
    t.type(bus.forget, 'function')
  })

  t.test('an answer nobody expects is not accepted (nor kept)', async t => {
    const bus = await options.open(t)
    const sid = unique('sid')
    t.equal(await bus.keep!(sid, 'srv-00000000-1', '{"x":1}', 60_000), false)
    t.equal(await bus.take?.(sid, 'srv-00000000-1') ?? null, null, 'nothing to take')
  })

  t.test('an expected answer is accepted once, on any instance; the expectation is per session', async t => {
    const a = await options.open(t)
    const b = options.crossInstance ? await options.open(t) : a
    const [sid, other] = [unique('sid'), unique('sid')]
    await a.expect!(sid, 'k1', 60_000)
    t.equal(await b.keep!(other, 'k1', '"forged"', 60_000), false, 'another session cannot answer it')
    t.equal(await b.keep!(sid, 'k1', '"first"', 60_000), true, 'accepted (on another instance where the bus has them)')
    t.equal(await b.keep!(sid, 'k1', '"second"', 60_000), false, 'the first answer claimed it')
    if (options.keeps) {
      t.equal(await a.take!(sid, 'k1'), '"first"', 'the kept copy is the first answer')
      t.equal(await a.take!(sid, 'k1'), null, 'taken once')
    }
    await a.forget!(sid, 'k1')
  })

  t.test('forget ends the expectation and drops a kept copy', async t => {
    const a = await options.open(t)
    const b = options.crossInstance ? await options.open(t) : a
    const sid = unique('sid')
    await a.expect!(sid, 'gone', 60_000)
    await a.forget!(sid, 'gone')
    t.equal(await b.keep!(sid, 'gone', '1', 60_000), false, 'not expected after forget')
    await a.expect!(sid, 'kept', 60_000)
    t.equal(await b.keep!(sid, 'kept', '2', 60_000), true)
    await a.forget!(sid, 'kept')
    t.equal(await a.take?.(sid, 'kept') ?? null, null, 'the kept copy is gone too')
    await a.forget!(sid, 'never-expected') // harmless
  })

  t.test('an expectation ends after its ttl', async t => {
    const bus = await options.open(t)
    const sid = unique('sid')
    await bus.expect!(sid, 'late', 50)
    await bus.expect!(sid, 'later', 10_000)
    await sleep(300) // the ttl itself is under test: time must pass
    t.equal(await bus.keep!(sid, 'late', '1', 60_000), false, 'expired')
    t.equal(await bus.keep!(sid, 'later', '2', 60_000), true, 'a longer ttl is still there')
  })
}

/** The kept copy of an accepted answer, for a waiter that missed the publish. */
function keepChecks (t: Test, options: BusContractOptions): void {
  t.test('keep then take: the value once, then null', async t => {
    const bus = await options.open(t)
    const sid = unique('sid')
    await bus.expect!(sid, 'srv-1', 10_000)
    await bus.keep!(sid, 'srv-1', '{"answer":1}', 10_000)
    t.equal(await bus.take!(sid, 'srv-1'), '{"answer":1}')
    t.equal(await bus.take!(sid, 'srv-1'), null, 'take deleted it')
    t.equal(await bus.take!(sid, 'never-kept'), null)
  })

  t.test('kept values are per session and key', async t => {
    const bus = await options.open(t)
    const [s1, s2] = [unique('sid'), unique('sid')]
    for (const [sid, key] of [[s1, 'k'], [s2, 'k'], [s1, 'k2']]) await bus.expect!(sid, key, 10_000)
    await bus.keep!(s1, 'k', 'one', 10_000)
    await bus.keep!(s2, 'k', 'two', 10_000)
    await bus.keep!(s1, 'k2', 'three', 10_000)
    t.equal(await bus.take!(s2, 'k'), 'two')
    t.equal(await bus.take!(s1, 'k2'), 'three')
    t.equal(await bus.take!(s1, 'k'), 'one')
  })

  if (options.crossInstance) {
    t.test('a value kept on one instance is taken on another, once', async t => {
      const [a, b] = [await options.open(t), await options.open(t)]
      const sid = unique('sid')
      await b.expect!(sid, 'srv-9', 10_000)
      await a.keep!(sid, 'srv-9', 'kept on a', 10_000)
      t.equal(await b.take!(sid, 'srv-9'), 'kept on a')
      t.equal(await a.take!(sid, 'srv-9'), null)
    })
  }

  t.test('a kept value expires after its ttl', async t => {
    const bus = await options.open(t)
    const sid = unique('sid')
    await bus.expect!(sid, 'short', 10_000)
    await bus.expect!(sid, 'long', 10_000)
    await bus.keep!(sid, 'short', 'short-lived', 100)
    await bus.keep!(sid, 'long', 'long-lived', 10_000)
    await sleep(400) // the ttl itself is under test: time must pass
    t.equal(await bus.take!(sid, 'short'), null, 'expired')
    t.equal(await bus.take!(sid, 'long'), 'long-lived', 'a longer ttl is still there')
  })
}

function closeChecks (t: Test, options: BusContractOptions): void {
  t.test('close stops delivery and releases every channel; closing twice is fine', async t => {
    const closing = await options.open(t)
    const peer = options.crossInstance ? await options.open(t) : undefined
    const c = unique('close')
    const silenced = new Inbox()
    const witness = new Inbox()
    await closing.subscribe(c, silenced.listener)
    await closing.subscribe(unique('close-other'), silenced.listener)
    if (peer !== undefined) await peer.subscribe(c, witness.listener)
    await closing.close()
    t.equal(options.channels(closing), 0, 'no channel left')
    await (peer ?? closing).publish(c, note('after close'))
    if (peer !== undefined) {
      await peer.publish(c, note('marker'))
      await witness.waitFor('marker')
      t.same(witness.texts, ['after close', 'marker'], 'the open instance got both')
    } else {
      // In-process delivery is done once the event loop has turned.
      await new Promise(resolve => setImmediate(resolve))
    }
    t.same(silenced.texts, [], 'the closed bus delivered nothing')
    await closing.close()
    t.pass('closed twice')
  })
}
