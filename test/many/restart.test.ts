/**
 * Redis restarted mid-run under three demo processes (examples/server.ts) behind the proxy:
 * session requests that take the lock are refused at once with 503 (the lock's client is
 * fail-fast), the stateless wire goes on, and after the restart everything works again without
 * restarting the instances: old sessions are gone (404: Redis keeps nothing on disk), new sessions
 * work, and so do elicitation across instances, resumption and list changes (the bus re-subscribed).
 *
 * The demo's Redis clients fail fast, so requests that read the store without the lock
 * (initialize, GET, a client's answer) are refused at once too.
 */
import t from 'tap'
import { startMany } from './fixtures/harness.js'
import { askNameAcrossInstances, listChangedEverywhere, redisRestart, resumeOnAnotherInstance } from './fixtures/scenarios.js'

t.setTimeout(120_000)
const many = await startMany(t)
t.comment(`redis-server + 3 demo instances + proxy started in ${many.startedInMs} ms`)

t.test('Redis restarted mid-run: 503 during the outage, everything works again after it', async t => {
  await redisRestart(t, many, { strict: false })
})

t.test('after the restart: ask_name across instances', async t => {
  await askNameAcrossInstances(t, many, 2)
})

t.test('after the restart: a dropped stream is resumed on another instance', async t => {
  await resumeOnAnotherInstance(t, many)
})

t.test('after the restart: tools/list_changed on streams held by other instances', async t => {
  await listChangedEverywhere(t, many)
})
