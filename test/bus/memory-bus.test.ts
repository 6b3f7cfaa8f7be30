import t from 'tap'
import { MemoryBus } from '../../lib/index.js'
import { runBusContract } from './bus-contract.js'

runBusContract(t, 'MemoryBus', {
  open: async (t) => {
    const bus = new MemoryBus()
    t.teardown(() => bus.close())
    return bus
  },
  crossInstance: false,
  keeps: false,
  channels: (bus) => (bus as MemoryBus).channels,
  // MemoryBus unsubscribes with EventEmitter.off(listener), which a stale call repeats on the
  // same listener's newer subscription; RedisBus remembers that the call was made.
  todo: { staleUnsubscribe: 'MemoryBus: a repeated unsubscribe call removes a newer subscription of the same listener' }
})

t.test('two memory buses are separate worlds (one process each)', async t => {
  const [a, b] = [new MemoryBus(), new MemoryBus()]
  t.teardown(async () => { await a.close(); await b.close() })
  const got: string[] = []
  await a.subscribe('c', () => { got.push('a') })
  await b.subscribe('c', () => { got.push('b') })
  await a.publish('c', { t: 'ended', sid: 's' })
  // In-process delivery is done once the event loop has turned.
  await new Promise(resolve => setImmediate(resolve))
  t.same(got, ['a'])
})

t.test('MemoryBus stores no answer (nothing can be missed in-process) and forgets what it expected', async t => {
  const bus = new MemoryBus()
  t.teardown(() => bus.close())
  await bus.expect('s', 'a', 60_000)
  await bus.expect('s', 'b', 60_000)
  t.equal(bus.expected, 2)
  t.equal(await bus.keep('s', 'a'), true)
  await bus.forget('s', 'b')
  t.equal(bus.expected, 0)
})
