/**
 * Redis restarted mid-run under three instances whose Redis clients are ALL fail-fast (the fixture
 * server with MCP_FAIL_FAST=1: store, lock and plugin clients with LOCK_CLIENT_OPTIONS) behind the
 * proxy: every session request (tools/call, DELETE, initialize, GET, a client's answer) is refused
 * at once with a 503 JSON-RPC error; the stateless wire goes on; after the restart everything
 * works again without restarting the instances.
 */
import t from 'tap'
import { startMany } from './fixtures/harness.js'
import { askNameAcrossInstances, listChangedEverywhere, redisRestart, resumeOnAnotherInstance } from './fixtures/scenarios.js'

t.setTimeout(120_000)
const many = await startMany(t, { failFast: true })
t.comment(`redis-server + 3 fail-fast instances + proxy started in ${many.startedInMs} ms`)

t.test('Redis restarted mid-run: every session request gets 503 at once; everything works again after it', async t => {
  await redisRestart(t, many, { strict: true })
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
