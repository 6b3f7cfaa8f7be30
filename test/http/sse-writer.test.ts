/**
 * The one SSE writer (lib/http/sse-writer.ts), observed as bytes on a raw socket: a real Fastify
 * app on 127.0.0.1:0 whose route hands each new SseWriter to the test, and a node:http client per
 * stream. Covers the status line and headers (hook headers kept, extra headers, sent before any
 * event), framing of events and comments, keep-alive comments (interval, unref'd, stopped when the
 * connection closes), `end()` with and without `retry`, `onClose`/`closed` on both sides' close,
 * the slow-reader bound (connection destroyed, `event()` false from then on, one warn line with
 * the `what` context), and corking (a burst spanning microtasks and nextTicks leaves in one write).
 */
import t from 'tap'
import http, { type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import Fastify from 'fastify'
import { MAX_BUFFERED_BYTES, SseWriter } from '../../lib/http/sse-writer.js'
import { closedOnServer, nextTick, nextTurn, serve } from './fixtures/sse-harness.js'

t.test('status 200 and headers, sent before any event', async t => {
  const s = await serve(t)
  // Client.open resolves on the response headers; nothing has been written yet: they were flushed.
  const { client, server } = await s.open({ session: 'sid-1' })
  const h = client.res.headers
  t.equal(client.res.statusCode, 200)
  t.equal(h['content-type'], 'text/event-stream')
  t.match(h['cache-control'], /^no-cache\b/)
  t.equal(h['x-accel-buffering'], 'no')
  t.equal(h['x-from-hook'], 'kept', 'a header set by an onRequest hook is kept')
  t.equal(h['mcp-session-id'], 'sid-1', 'the extra headers option')
  t.equal(client.text, '', 'no body yet')
  t.equal(server.writer.closed, false)
  server.writer.end()
})

t.test('headers and the frames of the first turn leave in one socket write', async t => {
  const s = await serve(t)
  const { client, server } = await s.open({ first: 'hello' })
  await client.until(c => c.text.includes('hello'), 'the first frame')
  t.equal(client.res.headers['content-type'], 'text/event-stream')
  t.equal(client.text, 'data: hello\n\n')
  t.equal(server.writes.length, 1, 'one socket write for the headers and the frame')
  server.writer.end()
})

t.test('framing: data-only events, events with an id, comments; end() without retry', async t => {
  const s = await serve(t)
  const { client, server } = await s.open()
  const w = server.writer
  t.equal(w.event(null, '{"a":1}'), true)
  t.equal(w.event('7', 'x'), true)
  w.comment('hello')
  w.end()
  t.equal(w.closed, true, 'closed as soon as end() is called')
  await client.until(c => c.ended, 'the end of the stream')
  t.equal(client.text, 'data: {"a":1}\n\nid: 7\ndata: x\n\n: hello\n\n', 'exact bytes, no retry field')
  t.equal(w.closed, true)
})

t.test('end(retryMs) writes retry (a whole, non-negative number) then ends', async t => {
  const s = await serve(t)
  for (const [retry, field] of [[1500.7, 'retry: 1500\n\n'], [-5, 'retry: 0\n\n'], [0, 'retry: 0\n\n']] as const) {
    const { client, server } = await s.open()
    server.writer.event('1', 'last')
    server.writer.end(retry)
    await client.until(c => c.ended, 'the end of the stream')
    t.equal(client.text, `id: 1\ndata: last\n\n${field}`, `end(${retry})`)
    t.equal(server.writer.event('2', 'late'), false, 'nothing written after the end')
    server.writer.comment('late')
    server.writer.end(10)
    t.equal(client.text, `id: 1\ndata: last\n\n${field}`)
  }
})

t.test('onClose and closed: when the server ends the stream', async t => {
  const s = await serve(t)
  const { client, server } = await s.open()
  const w = server.writer
  let calls = 0
  w.onClose(() => { calls++ })
  const closing = closedOnServer(w)
  w.end()
  await closing
  await client.until(c => c.ended, 'the end of the stream')
  t.equal(calls, 1)
  t.equal(w.closed, true)
  let late = 0
  w.onClose(() => { late++ })
  t.equal(late, 1, 'registered after the close: called at once')
})

t.test('onClose and closed: when the client disconnects', async t => {
  const s = await serve(t)
  const { client, server } = await s.open()
  const w = server.writer
  t.equal(w.event(null, 'first'), true)
  await client.until(c => c.text.includes('first'), 'the first event')
  const closing = closedOnServer(w)
  client.disconnect()
  await closing
  t.equal(w.closed, true)
  t.equal(w.event(null, 'after'), false, 'event() reports the connection unusable')
  let late = 0
  w.onClose(() => { late++ })
  t.equal(late, 1)
})

t.test('keep-alive comments at the interval, unref\'d, and stopped when the connection closes', async t => {
  const s = await serve(t)
  const interval = 30
  // The writer's interval timer, caught as it is made (the route runs in this process).
  const made: NodeJS.Timeout[] = []
  const realSetInterval = globalThis.setInterval
  globalThis.setInterval = ((fn: () => void, ms?: number) => {
    const timer = realSetInterval(fn, ms)
    if (ms === interval) made.push(timer)
    return timer
  }) as typeof setInterval
  let opened
  try {
    opened = await s.open({ keepAlive: String(interval) })
  } finally {
    globalThis.setInterval = realSetInterval
  }
  const { client, server } = opened
  t.equal(made.length, 1, 'one keep-alive timer')
  t.equal(made[0].hasRef(), false, 'it does not hold the process open')

  await client.until(c => c.keepAlives.length >= 3, 'three keep-alive comments')
  t.match(client.text, /^(: keep-alive\n\n)+$/, 'nothing but keep-alive comments')
  // The n-th comment cannot leave before n intervals (timers round by a millisecond at most); a
  // loaded machine may only make them later, so no upper bound.
  const since = client.keepAlives.map(at => at - server.at)
  for (let n = 1; n <= 3; n++) t.ok(since[n - 1] >= n * interval - 3, `comment ${n} after ${n} intervals (${since.join(', ')} ms)`)

  // Count what the timer still tries once the connection is gone.
  const w = server.writer
  let afterClose = 0
  const comment = w.comment.bind(w)
  w.comment = (text: string) => { if (w.closed) afterClose++; comment(text) }
  const control = await s.open({ keepAlive: String(interval) })
  const closing = closedOnServer(w)
  client.disconnect()
  await closing
  // Positive signal that several intervals went by: the control stream got three more comments.
  const seen = control.client.keepAlives.length
  await control.client.until(c => c.keepAlives.length >= seen + 3, 'three keep-alives on the control stream')
  t.equal(afterClose, 0, 'the closed stream\'s timer is stopped')
  t.equal(made[0].hasRef(), false)
  control.server.writer.end()
})

t.test('keepAlive 0 (or absent) writes no keep-alive', async t => {
  const s = await serve(t)
  const none = await s.open({ keepAlive: '0' })
  const absent = await s.open()
  const control = await s.open({ keepAlive: '20' })
  await control.client.until(c => c.keepAlives.length >= 3, 'three keep-alives on the control stream')
  t.equal(none.client.text, '')
  t.equal(absent.client.text, '')
  for (const o of [none, absent, control]) o.server.writer.end()
})

t.test('a burst written in one turn (across nextTicks and microtasks) leaves in one socket write', async t => {
  const s = await serve(t)
  const { client, server } = await s.open()
  const socket = server.raw.socket as Socket & { _write: (...a: unknown[]) => void, _writev: (...a: unknown[]) => void }
  const writes: string[] = []
  const realWrite = socket._write
  const realWritev = socket._writev
  socket._write = function (this: Socket, ...args: unknown[]) { writes.push('write'); return realWrite.apply(this, args) }
  socket._writev = function (this: Socket, ...args: unknown[]) { writes.push('writev'); return realWritev.apply(this, args) }

  // One chunk of the chunked encoding for the whole turn, not one per frame.
  const chunks: unknown[] = []
  const realResWrite = server.raw.write
  server.raw.write = function (this: ServerResponse, ...args: unknown[]) {
    chunks.push(args[0]); return realResWrite.apply(this, args as Parameters<ServerResponse['write']>)
  } as ServerResponse['write']
  const w = server.writer
  w.event('1', 'progress')
  // Node corks a chunked response only until the next tick: hops past it stay in the burst here.
  await nextTick()
  w.event('2', 'more')
  await Promise.resolve()
  await nextTick()
  w.event('3', 'result')
  await client.until(c => c.text.includes('result'), 'the last frame')
  t.equal(client.text, 'id: 1\ndata: progress\n\nid: 2\ndata: more\n\nid: 3\ndata: result\n\n', 'all frames, in order')
  t.same(writes, ['writev'], 'one socket write for the three frames')
  t.equal(chunks.length, 1, 'handed to the response as one chunk')

  // The next turn starts a new burst.
  writes.length = 0
  await nextTurn()
  w.event('4', 'later')
  await client.until(c => c.text.includes('later'), 'the next frame')
  t.equal(writes.length, 1)
  w.end()
})

for (const lazy of [false, true]) {
  t.test(`a reader that stops reading is disconnected once the buffer passes the bound${lazy ? ' (context made when logged)' : ''}`, async t => {
    const s = await serve(t)
    const { client, server } = await s.open({ name: 'slow', session: 'sid-slow', ...(lazy ? { lazy: '1' } : {}) })
    const w = server.writer
    let closedCalls = 0
    w.onClose(() => { closedCalls++ })
    const closing = closedOnServer(w)
    await nextTurn()
    // The client stops reading: the kernel buffers fill, then the server's.
    client.res.pause()
    client.res.socket?.pause()

    const frame = 'x'.repeat(64 * 1024)
    let written = 0
    let accepted = true
    let destroyedBefore = false
    // One frame per turn, as a stream producing events would; well past the bound if need be.
    while (written < 16 * MAX_BUFFERED_BYTES) {
      destroyedBefore = server.raw.destroyed
      accepted = w.event(null, frame)
      if (!accepted) break
      written += frame.length
      await nextTurn()
    }
    t.equal(accepted, false, `the writer gave up (after ${written} bytes)`)
    t.equal(destroyedBefore, false, 'the write that passed the bound is the one that reports false')
    t.ok(written >= MAX_BUFFERED_BYTES - frame.length, 'not before the bound was reached')
    t.equal(server.raw.destroyed, true, 'the connection is destroyed')
    t.equal(w.closed, true)
    for (let i = 0; i < 3; i++) t.equal(w.event(null, 'more'), false, 'event() stays false')
    w.comment('more')
    w.end(1000)

    const warns = s.logs.filter(l => l.msg === 'SSE reader too slow; closing its connection')
    t.equal(warns.length, 1, 'one warn line')
    t.match(warns[0], { level: 40, stream: 'slow', sessionId: 'sid-slow' }, 'with the what context')
    if (lazy) t.equal(server.whatCalls(), 1, 'the context was made for the line, once')
    await closing
    t.equal(closedCalls, 1, 'onClose fired')
    // Reading again, the client drains what the kernel held and then sees the connection end
    // before the stream did.
    client.res.socket?.resume()
    client.res.resume()
    await client.until(c => c.closed, 'the client connection to close')
    t.equal(client.ended, false, 'cut off, not a finished response')
  })
}

t.test('one frame larger than the bound reaches a reader that keeps up', async t => {
  const s = await serve(t)
  const { server, client } = await s.open()
  const big = 'x'.repeat(MAX_BUFFERED_BYTES + 1024 * 1024)
  t.equal(server.writer.event(null, big), true, 'written')
  t.equal(server.writer.event(null, 'after'), true, 'and the next frame too, in the same turn')
  server.writer.end()
  await client.until(c => c.ended, 'the end of the stream')
  t.equal(client.text, `data: ${big}\n\ndata: after\n\n`, 'every byte arrived')
  t.same(s.logs, [], 'nobody was taken for a slow reader')
})

t.test('a writer made on a connection that closed meanwhile starts no keep-alive timer', async t => {
  const app = Fastify({ forceCloseConnections: true })
  t.teardown(async () => { await app.close() })
  let made: SseWriter | undefined
  const gone = new Promise<void>(resolve => {
    app.get('/late', async (request, reply) => {
      // The request is served slowly (a store, a lock): the client leaves meanwhile.
      await new Promise(resolve => request.raw.socket.once('close', resolve))
      const realSetInterval = globalThis.setInterval
      let intervals = 0
      globalThis.setInterval = ((...args: Parameters<typeof setInterval>) => { intervals++; return realSetInterval(...args) }) as typeof setInterval
      try {
        made = new SseWriter(reply, { keepAlive: 10, logger: app.log })
      } finally {
        globalThis.setInterval = realSetInterval
      }
      t.equal(intervals, 0, 'no interval was started')
      resolve()
    })
  })
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const req = http.get(`${url}/late`, { agent: false })
  req.on('error', () => {})
  setTimeout(() => { req.destroy() }, 50)
  await gone
  t.equal(made?.closed, true)
  let fired = false
  made?.onClose(() => { fired = true })
  t.equal(fired, true, 'onClose fires at once')
})
