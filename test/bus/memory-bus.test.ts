import t from 'tap'
import { MemoryBus } from '../../lib/bus/bus.js'
import { runBusContract } from './bus-contract.js'

runBusContract(t, 'MemoryBus', async (t) => {
  const bus = new MemoryBus()
  t.teardown(() => bus.close())
  return [bus, bus]
})

t.test('MemoryBus stores no answer (nothing can be missed in-process) and forgets what it expected', async t => {
  const bus = new MemoryBus()
  t.teardown(() => bus.close())
  t.equal((bus as { take?: unknown }).take, undefined, 'no take: a waiter never polls')
  await bus.expect('s', 'a', 60_000)
  await bus.expect('s', 'b', 60_000)
  t.equal(bus.expected, 2)
  t.equal(await bus.keep('s', 'a'), true)
  await bus.forget('s', 'b')
  t.equal(bus.expected, 0)
})
