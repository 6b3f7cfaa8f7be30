/**
 * Bad input and abuse across three demo instances behind the round-robin proxy:
 *
 * - a forged Last-Event-ID (another session's stream ids, garbage) replays nothing, on any
 *   instance: the GET opens a fresh stream of the caller's own session;
 * - the owner's own ids do replay, on any instance (the contrast);
 * - events of one session never reach another: GET streams of session B held on every instance see
 *   nothing of session A's progress, elicitation and resumed streams; B cannot answer or cancel
 *   A's pending elicitation by reusing its request ids; Redis keeps A's events under A's hash tag;
 * - unknown or malformed session ids are refused alike by every instance.
 */
import t from 'tap'
import { startMany } from './fixtures/harness.js'
import { advancePast } from './fixtures/scenarios.js'
import { initialize, openGet, post, readReply } from '../helpers/http-client.js'
import { eventStream, type SseEvent, SseReader } from '../helpers/sse.js'
import { sleep } from '../helpers/time.js'
import { getHeaders, headers, LEGACY, newId, type Session } from '../helpers/wire.js'

t.setTimeout(90_000)
const many = await startMany(t)
t.comment(`redis-server + 3 instances + proxy started in ${many.startedInMs} ms`)

/** Runs slow_count with progress on a session; the whole SSE response. */
async function slowCount (session: Session, steps: number, token: string): Promise<SseEvent[]> {
  const res = await fetch(many.url, {
    method: 'POST',
    headers: headers(session),
    body: JSON.stringify({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'slow_count', arguments: { steps, intervalMs: 20 }, _meta: { progressToken: token } } })
  })
  const reader = new SseReader(res)
  await reader.waitClosed(10_000)
  return reader.events
}

/** A GET through the proxy with the given Last-Event-ID, read for `ms`. */
async function getFor (session: Session, lastEventId: string, ms = 300): Promise<{ status: number, events: SseEvent[], instance: number, text?: string }> {
  const res = await fetch(many.url, {
    method: 'GET',
    headers: getHeaders(session, lastEventId)
  })
  const entry = many.proxy.log[many.proxy.log.length - 1]
  if (res.status !== 200) return { status: res.status, events: [], instance: entry.instance, text: await res.text() }
  const reader = new SseReader(res)
  await Promise.race([reader.waitClosed(ms).catch(() => {}), sleep(ms)])
  await reader.cancel()
  return { status: res.status, events: reader.events, instance: entry.instance }
}

t.test('a forged Last-Event-ID replays nothing, on any instance; the owner\'s own ids do', async t => {
  const alice = await initialize(many.url)
  const mallory = await initialize(many.url)
  const events = await slowCount(alice, 3, 'alice-1')
  const ids = events.filter(e => e.id !== undefined).map(e => e.id!)
  t.equal(ids.length, 5, 'alice\'s stream: priming, 3 progress, result')
  const aliceGet = await openGet(many.url, alice)
  const gPriming = (await aliceGet.waitFor(e => e.id !== undefined)).id!
  await aliceGet.cancel()
  const pStream = eventStream(ids[0])
  const gStream = eventStream(gPriming)

  const forged = [
    ids[0], ids[2], ids[4], gPriming, // alice's real ids
    `${pStream}_0`, `${pStream}_99999`, `${gStream}_999`, // her streams, seqs that never existed
    'garbage', '', '_1', 'p-_1', 'p-AAAAAAAAAAAAAAAA_1', 'g-AAAAAAAAAAAAAAAA_2', `${pStream}_-1`, `${pStream}_1.5`,
    `${pStream}_1_1`, `p-${'A'.repeat(200)}_1`, `../${pStream}_1`, `${pStream}_1 OR 1=1`, '0-1', '*', `x${'y'.repeat(4000)}`
  ]
  const instances = new Set<number>()
  for (const id of forged) {
    const r = await getFor(mallory, id)
    instances.add(r.instance)
    t.equal(r.status, 200, `${JSON.stringify(id.slice(0, 40))}: a GET stream of mallory's own (#${r.instance})`)
    const messages = r.events.filter(e => e.json !== undefined)
    t.same(messages, [], `${JSON.stringify(id.slice(0, 40))}: nothing replayed`)
    const withIds = r.events.filter(e => e.id !== undefined)
    t.ok(withIds.length === 1 && withIds[0].data === '' && ![pStream, gStream].includes(eventStream(withIds[0].id!)),
      `${JSON.stringify(id.slice(0, 40))}: only the priming event of a new stream`)
  }
  t.same([...instances].sort(), [0, 1, 2], 'asked of every instance')

  // The owner resumes her own finished stream on every instance: the rest, then the end.
  for (let i = 0; i < 3; i++) {
    const r = await getFor(alice, ids[1], 2000)
    t.same(r.events.filter(e => e.id !== undefined).map(e => e.id), ids.slice(2), `alice resumes her own stream on #${r.instance}: the rest of it`)
  }
})

t.test('events of one session never reach another session', async t => {
  const alice = await initialize(many.url, { capabilities: { elicitation: {} } })
  const bob = await initialize(many.url, { capabilities: { elicitation: {} } })
  // Bob and Alice hold GET streams on every instance.
  const bobGets = await Promise.all(many.servers.map(async s => await openGet(s.url, bob)))
  const aliceGets = await Promise.all(many.servers.map(async s => await openGet(s.url, alice)))
  for (const r of [...bobGets, ...aliceGets]) await r.waitFor(e => e.id !== undefined)

  // Alice: progress on a POST stream.
  const progress = await slowCount(alice, 4, 'alice-progress')
  t.equal(progress.filter(e => e.json?.method === 'notifications/progress').length, 4, 'alice got her progress')

  // Alice: an elicitation. Bob tries to answer it and to cancel it with her request ids.
  const callId = newId()
  const res = await fetch(many.url, {
    method: 'POST',
    headers: headers(alice),
    body: JSON.stringify({ jsonrpc: '2.0', id: callId, method: 'tools/call', params: { name: 'ask_name', arguments: {} } })
  })
  const call = many.proxy.log[many.proxy.log.length - 1]
  const stream = new SseReader(res)
  const request = (await stream.waitFor(e => e.json?.method === 'elicitation/create')).json!
  const forgedAnswer = await post(many.url, { jsonrpc: '2.0', id: request.id, result: { action: 'accept', content: { name: 'Mallory' } } }, bob)
  t.equal(forgedAnswer.status, 202, 'bob\'s answer is accepted as a message of HIS session (202)…')
  const forgedCancel = await post(many.url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: callId } }, bob)
  t.equal(forgedCancel.status, 202, '…and so is his cancel')
  await sleep(1500) // past the waiter's 1 s poll of the kept answers
  t.notOk(stream.messages.some(m => m.id === callId), '…but alice\'s call neither completed with bob\'s answer nor was cancelled')
  await advancePast(many, call.instance)
  const answer = await post(many.url, { jsonrpc: '2.0', id: request.id, result: { action: 'accept', content: { name: 'Alice' } } }, alice)
  t.equal(answer.status, 202)
  await stream.waitClosed(5000)
  t.same(stream.messages[stream.messages.length - 1], { jsonrpc: '2.0', id: callId, result: { content: [{ type: 'text', text: 'Hello, Alice!' }] } }, 'alice\'s own answer completes her call')

  // Alice: a dropped stream, resumed on another instance.
  const ac = new AbortController()
  const dropped = await fetch(many.url, {
    method: 'POST',
    headers: headers(alice),
    body: JSON.stringify({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'slow_count', arguments: { steps: 6, intervalMs: 50 }, _meta: { progressToken: 'alice-resume' } } }),
    signal: ac.signal
  })
  const first = new SseReader(dropped)
  const seen = await first.waitFor(e => e.json?.params?.progress === 2)
  ac.abort()
  await first.cancel()
  const resumed = await openGet(many.url, alice, seen.id)
  await resumed.waitClosed(5000)
  t.equal(resumed.messages.filter(m => m.method === 'notifications/progress').length, 4, 'alice resumed the rest of her stream')

  await sleep(300)
  for (const [i, r] of bobGets.entries()) {
    t.same(r.events.filter(e => e.json !== undefined), [], `bob's GET stream on #${i} saw nothing of alice`)
  }
  for (const [i, r] of aliceGets.entries()) {
    t.same(r.events.filter(e => e.json !== undefined), [], `alice's GET stream on #${i} got none of her request-scoped messages either`)
  }
  for (const r of [...bobGets, ...aliceGets]) await r.cancel()

  // In Redis, alice's events are under her hash tag only.
  const bobKeys = await many.admin.keys(`mcp:{${bob.sid}}:*`)
  for (const key of bobKeys.filter(k => k.includes(':ev:'))) {
    const entries = await many.admin.xrange(key, '-', '+')
    t.notOk(JSON.stringify(entries).includes('alice-'), `${key} holds nothing of alice`)
  }
  const aliceStreams = await many.admin.keys(`mcp:{${alice.sid}}:ev:*`)
  t.ok(aliceStreams.length >= 3, `alice's streams are under her own hash tag (${aliceStreams.length})`)
  t.equal(await many.admin.exists(`mcp:{${bob.sid}}:ans:${String(request.id)}`), 0, 'bob\'s forged answer was not even kept: his session never asked for it')
  t.equal(await many.admin.exists(`mcp:{${alice.sid}}:ans:${String(request.id)}`), 0, 'nor under alice\'s session')
})

t.test('unknown and malformed session ids are refused alike by every instance', async t => {
  const statuses: string[] = []
  for (let i = 0; i < 3; i++) {
    const unknown = await post(many.url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { sid: 'A'.repeat(32), version: LEGACY })
    t.equal(unknown.status, 404, 'unknown session: 404')
    t.equal(unknown.last?.error?.code, -32001)
    const malformed = await readReply(await fetch(many.url, {
      method: 'POST',
      headers: headers(null, { 'mcp-session-id': 'bad id with spaces' }),
      body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' })
    }))
    t.equal(malformed.status, 400, 'malformed session id: 400')
    const noSessionGet = await fetch(many.url, { method: 'GET', headers: { accept: 'text/event-stream', 'last-event-id': 'p-AAAAAAAAAAAA_2' } })
    await noSessionGet.arrayBuffer()
    t.equal(noSessionGet.status, 405, 'GET without a session, with a Last-Event-ID: 405')
    const badJson = await fetch(many.url, { method: 'POST', headers: headers(), body: '{"jsonrpc":' })
    t.equal(badJson.status, 400, 'invalid JSON: 400')
    t.equal((await badJson.json() as Record<string, any>).error?.code, -32700)
    statuses.push(`${unknown.status}/${malformed.status}/${noSessionGet.status}/${badJson.status}`)
  }
  const served = new Set(many.proxy.log.slice(-12).map(e => e.instance))
  t.same([...served].sort(), [0, 1, 2], 'every instance answered some of them')
  t.notOk(many.proxy.log.some(e => e.status === 500), 'no 500 anywhere in this file')
})
