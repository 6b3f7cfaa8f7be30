/**
 * Three demo processes (examples/server.ts: Redis store, Redis lock, Redis bus and event log) on
 * one private redis-server, behind a round-robin proxy without sticky sessions.
 */
import t from 'tap'
import { startMany } from './fixtures/harness.js'
import { askNameAcrossInstances, listChangedEverywhere, parallelCounter, resumeOnAnotherInstance } from './fixtures/scenarios.js'

t.setTimeout(120_000)
const many = await startMany(t)
t.comment(`redis-server + 3 instances + proxy started in ${many.startedInMs} ms`)

t.test('ask_name: the elicitation goes out on A, the answer lands on B, the call completes', async t => {
  await askNameAcrossInstances(t, many)
})

t.test('a stream dropped mid-call is resumed on another instance: every event once, in order, then the result', async t => {
  await resumeOnAnotherInstance(t, many)
})

t.test('a tool added on A: tools/list_changed once on a GET stream on B and a listen stream on C', async t => {
  await listChangedEverywhere(t, many)
})

t.test('200 parallel counter_add from 10 clients across 3 instances end at exactly 200', async t => {
  await parallelCounter(t, many)
})
