/**
 * The bus contract, run against every bus (memory, Redis). A bus-specific test file calls
 * `runBusContract(t, name, factory)`; the factory returns two handles on one shared bus, as two
 * plugin instances would hold (the same MemoryBus object twice; two RedisBus on one server and
 * prefix), and registers its own cleanup with `t.teardown`.
 */
import type { Test } from 'tap'
import type { Bus, BusMessage } from '../../lib/bus/bus.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'

export type BusFactory = (t: Test) => Promise<[Bus, Bus]>

const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

export function runBusContract (t: Test, name: string, factory: BusFactory): void {
  t.test(`${name}: bus contract`, async t => {
    t.test('publish reaches the subscribers of every handle; unsubscribe stops it', async t => {
      const [a, b] = await factory(t)
      const channel = `s:${generateSessionId()}`
      const gotA: BusMessage[] = []
      const gotB: BusMessage[] = []
      const offA = await a.subscribe(channel, m => gotA.push(m))
      const offB = await b.subscribe(channel, m => gotB.push(m))
      const message: BusMessage = { t: 'notify', sid: 'x', msg: { jsonrpc: '2.0', method: 'm' } }
      await b.publish(channel, message)
      for (let i = 0; i < 100 && (gotA.length === 0 || gotB.length === 0); i++) await sleep(10)
      t.same(gotA, [message])
      t.same(gotB, [message])
      await offA()
      await a.publish(channel, message)
      for (let i = 0; i < 100 && gotB.length < 2; i++) await sleep(10)
      t.equal(gotB.length, 2)
      t.equal(gotA.length, 1, 'nothing after unsubscribe')
      await offB()
    })

    t.test('answers: implemented together', async t => {
      const [a] = await factory(t)
      t.type(a.expect, 'function')
      t.type(a.keep, 'function')
      t.type(a.forget, 'function')
    })

    t.test('an answer nobody expects is not kept', async t => {
      const [a, b] = await factory(t)
      const sid = generateSessionId()
      t.equal(await b.keep!(sid, 'srv-00000000-1', '{"x":1}', 60_000), false)
      t.equal(await a.take?.(sid, 'srv-00000000-1') ?? null, null, 'nothing to take')
    })

    t.test('an expected answer is kept once, on any handle; the expectation is per session', async t => {
      const [a, b] = await factory(t)
      const sid = generateSessionId()
      const other = generateSessionId()
      await a.expect!(sid, 'k1', 60_000)
      t.equal(await b.keep!(other, 'k1', '"forged"', 60_000), false, 'another session cannot answer it')
      t.equal(await b.keep!(sid, 'k1', '"first"', 60_000), true, 'kept on another handle')
      t.equal(await b.keep!(sid, 'k1', '"second"', 60_000), false, 'the first answer claimed it')
      if (a.take !== undefined) {
        t.equal(await a.take(sid, 'k1'), '"first"', 'the kept copy is the first answer')
        t.equal(await a.take(sid, 'k1'), null, 'taken once')
      }
      await a.forget!(sid, 'k1')
    })

    t.test('forget ends the expectation and drops a kept copy', async t => {
      const [a, b] = await factory(t)
      const sid = generateSessionId()
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
      const [a, b] = await factory(t)
      const sid = generateSessionId()
      await a.expect!(sid, 'late', 50)
      await sleep(150)
      t.equal(await b.keep!(sid, 'late', '1', 60_000), false)
    })
  })
}
