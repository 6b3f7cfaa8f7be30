/**
 * RequestAbort: a request's cancellation whose AbortSignal is made only on demand, and which
 * watches the response's connection without a listener until a signal is asked for.
 */
import t from 'tap'
import { EventEmitter } from 'node:events'
import type { ServerResponse } from 'node:http'
import { RequestAbort } from '../../lib/protocol/request-abort.js'

/** A response stand-in: `destroyed` and the 'close' event are all RequestAbort looks at. */
function fakeResponse (): ServerResponse & { close: () => void } {
  const res = new EventEmitter() as EventEmitter & { destroyed: boolean, close: () => void }
  res.destroyed = false
  res.close = () => { res.destroyed = true; res.emit('close') }
  return res as unknown as ServerResponse & { close: () => void }
}

t.test('the signal is made on demand and follows abort(), before or after it was made', async (t) => {
  const a = new RequestAbort()
  t.equal(a.aborted, false)
  const early = a.signal
  t.equal(early.aborted, false)
  a.abort(new Error('stop'))
  t.equal(early.aborted, true)
  t.equal((early.reason as Error).message, 'stop')
  const b = new RequestAbort()
  b.abort('why')
  t.equal(b.signal.aborted, true, 'made after the abort: already aborted')
  t.equal(b.signal.reason, 'why')
  b.abort('again')
  t.equal(b.reason, 'why', 'the first reason stays')
})

t.test('followers abort with their leader until unlinked', async (t) => {
  const leader = new RequestAbort()
  const one = new RequestAbort()
  const two = new RequestAbort()
  leader.follow(one)
  const unlink = leader.follow(two)
  unlink()
  leader.abort('gone')
  t.equal(one.aborted, true)
  t.equal(one.reason, 'gone')
  t.equal(two.aborted, false, 'unlinked before the abort')
  const late = new RequestAbort()
  leader.follow(late)
  t.equal(late.aborted, true, 'following an aborted leader aborts at once')
})

t.test('a watched response: no listener until a signal is asked for; aborted when the client leaves unanswered', async (t) => {
  const res = fakeResponse()
  const answer = { done: false, resumable: false }
  const a = new RequestAbort()
  a.watch(res, answer)
  t.equal(res.listenerCount('close'), 0, 'nothing registered for a handler that never reads the signal')
  res.destroyed = true
  t.equal(a.aborted, true, 'a closed connection is seen by polling')

  const res2 = fakeResponse()
  const b = new RequestAbort()
  b.watch(res2, answer)
  const signal = b.signal
  t.equal(res2.listenerCount('close'), 1, 'a signal asked for: the listener is added')
  res2.close()
  t.equal(signal.aborted, true, 'the signal aborts when the connection closes')
  b.unwatch()
  t.equal(res2.listenerCount('close'), 0, 'unwatch removes it')
})

t.test('a response already answered, or resumable, is not a client that went away', async (t) => {
  for (const answer of [{ done: true, resumable: false }, { done: false, resumable: true }]) {
    const res = fakeResponse()
    const a = new RequestAbort()
    a.watch(res, answer)
    res.close()
    t.equal(a.aborted, false, JSON.stringify(answer))
  }
})

t.test('a follower asking for its signal arms its leader\'s watch', async (t) => {
  const res = fakeResponse()
  const leader = new RequestAbort()
  leader.watch(res, { done: false, resumable: false })
  const follower = new RequestAbort()
  leader.follow(follower)
  const signal = follower.signal
  t.equal(res.listenerCount('close'), 1)
  res.close()
  t.equal(signal.aborted, true, 'the follower\'s handler sees the client go')
  t.equal(leader.aborted, true)
})
