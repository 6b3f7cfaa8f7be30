/**
 * The order of a logical SSE stream's writes (lib/bus/server-stream.ts): a stream that is not
 * resumable writes each event at once (no promise chain per event), and a resumable one keeps
 * every write, synchronous or not, behind the log writes enqueued before it. The log is the real
 * MemoryEventLog, made slow the way a Redis log is (each append resolves a turn later); the sink
 * records what reaches the connection, in order.
 */
import t from 'tap'
import { MemoryEventLog } from '../../lib/bus/event-log.js'
import type { EventSink } from '../../lib/bus/event-sink.js'
import { ServerStream } from '../../lib/bus/server-stream.js'

/** A connection that records its writes. */
class RecordingSink implements EventSink {
  readonly writes: string[] = []
  closed = false
  event (id: string | null, data: string): boolean {
    this.writes.push(`${id === null ? '' : `${id.replace(/^.*_/, '#')} `}${data}`)
    return true
  }

  comment (text: string): void { this.writes.push(`: ${text}`) }
  end (retryMs?: number): void { this.writes.push(`end ${String(retryMs)}`); this.closed = true }
  onClose (): void {}
}

/** A memory log whose appends take a turn, as a network round trip does. */
class SlowLog extends MemoryEventLog {
  override async append (sessionId: string, streamId: string, data: string): Promise<string | null> {
    await new Promise(resolve => setImmediate(resolve))
    return await super.append(sessionId, streamId, data)
  }
}

const logger = { warn: () => {} }

t.test('a stream that is not resumable writes each event at once, without ids', async t => {
  const stream = new ServerStream({ sessionId: '', kind: 'p', log: new MemoryEventLog(), logger, resumable: false })
  const sink = new RecordingSink()
  stream.attach(sink)
  stream.send({ n: 1 })
  t.same(sink.writes, ['{"n":1}'], 'written before send() returned')
  stream.send({ n: 2 })
  stream.end()
  t.same(sink.writes, ['{"n":1}', '{"n":2}', 'end undefined'])
})

t.test('a resumable stream keeps a later synchronous write behind the log writes before it', async t => {
  const log = new SlowLog()
  const stream = new ServerStream({ sessionId: 's1', kind: 'p', log, logger, resumable: true })
  const sink = new RecordingSink()
  stream.attach(sink)
  stream.prime()
  stream.send({ n: 1 })
  stream.send({ n: 2 })
  // Closing the connection (closeSSEStream) is synchronous work: it waits for both events.
  stream.disconnect(500)
  t.same(sink.writes, [], 'nothing written before the log answered')
  await stream.flushed()
  t.equal(sink.writes.length, 4)
  t.match(sink.writes[0], /^#\d+ $/, 'the priming event')
  t.match(sink.writes.slice(1), [/^#\d+ \{"n":1\}$/, /^#\d+ \{"n":2\}$/], 'both events, logged, in order')
  t.equal(sink.writes[3], 'end 500', 'then the connection closes with retry')
})
