/**
 * An instance SIGKILLed mid-call (three demo processes, lease TTL 1 s, behind the proxy):
 *
 * - 10 clients keep adding to one session through the proxy while instance B runs a handler of
 *   that session (a slow_count holding the session's lease) and is SIGKILLed;
 * - no acknowledged update is lost: every counter_add answered 200 is in the final counter, and
 *   the only unacknowledged ones are those the proxy answered 502 (B died under them);
 * - B's lease outlives it, then expires after the TTL: the waiting requests get through on A and C;
 * - the proxy skips the dead instance (connection refused), so B's sessions go on elsewhere.
 */
import t from 'tap'
import { lockKey, startMany } from './fixtures/harness.js'
import { callTool, counterIn, counterOf, initialize } from '../helpers/http-client.js'
import { SseReader } from '../helpers/sse.js'
import { until } from '../helpers/time.js'
import { headers, newId } from '../helpers/wire.js'

t.setTimeout(90_000)
const many = await startMany(t, { env: { MCP_LOCK_TTL_MS: '1000', MCP_LOCK_TIMEOUT_MS: '10000' } })
t.comment(`redis-server + 3 instances + proxy started in ${many.startedInMs} ms`)

t.test('an instance SIGKILLed mid-call: no acknowledged update lost, its lease expires, its sessions go on', async t => {
  const [, B] = many.servers
  // A session that so far only B has served.
  const bSession = await initialize(B.url)
  t.equal(counterIn(await callTool(B.url, bSession, 'counter_add', { by: 5 })), 5, 'a session served by B only')

  const shared = await initialize(many.url)
  const acked: Array<{ counter: number, at: number }> = []
  const failures: Array<{ status: number, text: string }> = []
  const errors: string[] = []
  let killedAt = Infinity
  const loops = Promise.all(Array.from({ length: 10 }, async () => {
    for (let i = 0; i < 15; i++) {
      try {
        const r = await callTool(many.url, shared, 'counter_add', { delayMs: 10 })
        const counter = counterIn(r)
        if (r.status === 200 && typeof counter === 'number') acked.push({ counter, at: performance.now() })
        else failures.push({ status: r.status, text: r.text })
      } catch (err) {
        errors.push(String(err))
      }
    }
  }))

  await until(() => acked.length >= 20, { timeout: 10_000, what: 'the first 20 increments' })
  // B runs a handler of the session: it holds the session's lease while it reports progress.
  const ac = new AbortController()
  const res = await fetch(B.url, {
    method: 'POST',
    headers: headers(shared),
    body: JSON.stringify({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'slow_count', arguments: { steps: 100, intervalMs: 50 }, _meta: { progressToken: 'doomed' } } }),
    signal: ac.signal
  })
  const doomed = new SseReader(res)
  await doomed.waitFor(e => e.json?.method === 'notifications/progress', 10_000)
  const ackedBeforeKill = acked.length
  await B.kill()
  killedAt = performance.now()
  const pttl = await many.admin.pttl(lockKey(shared.sid))
  t.ok(pttl > 0 && pttl <= 1000, `B's lease outlives it (PTTL ${pttl} ms)`)
  await doomed.waitClosed(5000).catch(() => {})
  t.ok(doomed.closed, 'the client of B\'s call lost its stream')
  ac.abort()

  await loops
  const firstAfter = acked.find(a => a.at > killedAt)
  const recovered = firstAfter === undefined ? Infinity : firstAfter.at - killedAt
  t.comment(`acked ${acked.length} (${ackedBeforeKill} before the kill), failed ${failures.length} (${failures.map(f => f.status).join(',')}), errors ${errors.length}; ` +
    `first ack ${Math.round(recovered)} ms after the kill`)
  // The proxy answers 502 for a request B died under; a connection error would only come from B
  // dying between the response headers and the body (counted as unacknowledged too).
  t.ok(errors.length <= 1, `at most a stray connection error (${errors.join('; ') || 'none'})`)
  t.ok(failures.every(f => f.status === 502), 'the only failures are 502s of requests B died under (no 500, no 503)')
  t.ok(recovered < 3000, `the session went on within about the lease TTL after the kill (${Math.round(recovered)} ms)`)

  const counters = acked.map(a => a.counter)
  t.equal(new Set(counters).size, counters.length, 'every acknowledged increment saw a different value')
  const final = await counterOf(many.url, shared)
  t.ok(final >= acked.length, `no acknowledged update lost: final ${final} >= ${acked.length} acknowledged`)
  const unacknowledged = failures.length + errors.length
  t.ok(final <= acked.length + unacknowledged, `nothing counted that was not sent: final ${final} <= ${acked.length} + ${unacknowledged} unacknowledged`)
  t.ok(Math.max(...counters) <= final, 'no acknowledged value above the final counter')

  const diedUnder = many.proxy.log.filter(e => e.instance === 1 && e.status === 502)
  t.equal(diedUnder.length, failures.length, 'the 502s were requests in flight on B')
  t.ok(many.proxy.dead.has(1), 'the proxy marked B dead')
  t.ok(many.proxy.log.some(e => e.skipped.includes(1) && e.status === 200), 'and sent later requests elsewhere')

  // B's own session goes on through A and C.
  t.equal(counterIn(await callTool(many.url, bSession, 'counter_add', { by: 1 })), 6, 'a session only B had served goes on elsewhere, state intact')
  t.equal(counterIn(await callTool(many.url, bSession, 'counter_add', { by: 1 })), 7, 'and again')
  await until(async () => await many.admin.exists(lockKey(shared.sid)) === 0, { timeout: 3000 }).catch(() => {})
  t.equal(await many.admin.exists(lockKey(shared.sid)), 0, 'no lease left behind')
})
