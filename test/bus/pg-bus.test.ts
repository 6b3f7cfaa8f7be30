/**
 * PgBus on a database of its own: the bus contract with several instances (each bus its own
 * pool, as separate processes would have), then what only this bus does: large messages through
 * a table in order, channel names, and a listening connection lost and made again.
 */
import t, { type Test } from 'tap'
import { PgBus } from '../../lib/bus/pg-bus.js'
import type { BusMessage } from '../../lib/bus/bus.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { until } from '../helpers/time.js'
import { runBusContract } from './bus-contract.js'

const db = await createTestDatabase(t)

function newBus (t: Test, prefix = 'bus_'): PgBus {
  const bus = new PgBus({ pool: db.pool({ max: 3 }), prefix, log: { warn () {} } })
  t.teardown(() => bus.close())
  return bus
}

runBusContract(t, 'PgBus', {
  open: async (t) => newBus(t),
  crossInstance: true,
  keeps: true,
  channels: (bus) => (bus as PgBus).channels
})

const note = (text: string): BusMessage => ({ t: 'notify', sid: 's', msg: { text } })
const texts = (got: BusMessage[]): unknown[] => got.map(m => m.t === 'notify' ? m.msg.text : m.t)

t.test('messages too large for a NOTIFY arrive whole and in publish order', async t => {
  const one = newBus(t)
  const two = newBus(t)
  const got: BusMessage[] = []
  await two.subscribe('s:big', m => { got.push(m) })
  const big = 'x'.repeat(2 ** 20)
  await one.publish('s:big', note('small-1'))
  await one.publish('s:big', note(big))
  await one.publish('s:big', note('small-2'))
  await until(() => got.length === 3, { what: 'three messages' })
  t.same(texts(got), ['small-1', big, 'small-2'])
})

t.test('channel names: an identifier of the prefix, whatever the bus channel', async t => {
  const bus = newBus(t)
  const name = bus.channelName(`s:${'z'.repeat(500)}"; drop table x`)
  t.match(name, /^bus_c[0-9a-f]{20}$/)
  t.not(bus.channelName('s:a'), bus.channelName('s:b'))
})

t.test('a lost listening connection is made again and LISTENs again', async t => {
  const one = newBus(t)
  const two = newBus(t)
  const got: BusMessage[] = []
  await two.subscribe('broadcast', m => { got.push(m) })
  await db.terminateBackends()
  await until(() => !two.listening, { what: 'the loss seen' })
  await until(() => two.listening, { timeout: 10_000, what: 'connected again' })
  await until(async () => { await one.publish('broadcast', note('after')).catch(() => {}); return texts(got).includes('after') }, { timeout: 10_000, what: 'delivery after the restart' })
  t.pass('delivered')
})
