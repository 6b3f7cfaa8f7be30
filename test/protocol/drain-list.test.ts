/**
 * The drain's list of running POSTs (an intrusive list, `drain.ts`): entering and leaving in any
 * order keeps the count and the members right, and a POST that leaves twice (forced at the
 * deadline, then released by its wire) leaves once. The drain's behaviour on a server:
 * drain.test.ts.
 */
import t from 'tap'
import type { ServerResponse } from 'node:http'
import { Drain, type DrainedPost } from '../../lib/protocol/drain.js'
import type { Exchange } from '../../lib/protocol/exchange.js'

const body = { ok: true as const, batch: false, messages: [] }
const silent = { info () {}, warn () {} } as never

/** An exchange whose connection records `Connection: close` (what the drain does to each running POST). */
function exchange (closed: Set<number>, n: number): Exchange {
  const connection = { headersSent: false, setHeader () { closed.add(n) } } as unknown as ServerResponse
  return { request: {} as never, connection, channel: () => { throw new Error('unused') }, stream: () => { throw new Error('unused') }, empty () {} }
}

t.test('enter and leave in any order; leaving twice leaves once', async (t) => {
  const drain = new Drain(1000)
  const closed = new Set<number>()
  const posts: DrainedPost[] = [0, 1, 2, 3].map(n => drain.enter(exchange(closed, n), body))
  t.equal(drain.inflight, 4)
  drain.left(posts[2])
  drain.left(posts[2])
  t.equal(drain.inflight, 3, 'the second leave of the same POST changes nothing')
  drain.left(posts[3])
  t.equal(drain.inflight, 2)
  // The drain reaches the POSTs still running (and only those): each gets Connection: close.
  const stopped = drain.drain(0, silent)
  t.same([...closed].sort(), [0, 1])
  drain.left(posts[0])
  drain.left(posts[0])
  drain.left(posts[1])
  t.equal(drain.inflight, 0)
  t.equal(await stopped, 0, 'no POST left to stop once all left')
})
