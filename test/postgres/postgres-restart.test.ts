/**
 * The database restarted under a running app (a private cluster of this test, stopped and
 * started): a request in flight is not told its change was kept unless it was; requests while the
 * database is down get a 503 with Retry-After at once; once it is back the app serves again,
 * without being restarted.
 */
import t from 'tap'
import { registerDemoTools } from '../../examples/demo-tools.js'
import pg from 'pg'
import { startPrivateCluster } from '../helpers/postgres.js'
import { until } from '../helpers/time.js'
import { build, call, initialize, request } from '../helpers/handshake-app.js'

t.setTimeout(120_000)
const cluster = await startPrivateCluster(t)

const counterOf = (res: Record<string, any>): number => res.result?.structuredContent?.counter

t.test('a restart mid-request, requests while down, and recovery', async t => {
  const app = await build(t, { postgres: cluster.url }, m => { registerDemoTools(m) })
  await app.ready()
  const session = await initialize(app)
  t.equal(counterOf(await call(app, session, 'tools/call', { name: 'counter_add', arguments: {} })), 1)

  // In flight: the lease is held, the handler waits 500 ms; the database stops meanwhile.
  const inFlight = request(app, session, 'tools/call', { name: 'counter_add', arguments: { delayMs: 500 } })
  await new Promise(resolve => setTimeout(resolve, 150))
  await cluster.stop()
  const res = await inFlight
  t.not(res.statusCode, 200, `the call in flight is not told its change was kept (${res.statusCode})`)

  const started = performance.now()
  const down = await request(app, session, 'tools/call', { name: 'counter_add', arguments: {} })
  t.comment(`answered in ${Math.round(performance.now() - started)} ms while the database was down`)
  t.equal(down.statusCode, 503, 'a request while the database is down: 503')
  t.equal(down.headers['retry-after'], '1', 'with Retry-After')
  t.match(down.json(), { error: { code: -32000 } })

  await cluster.start()
  // The releases that failed while it was down are retried: the session is not left busy for a
  // whole lease ttl (30 s by default) by the lease of the call that was cut.
  const admin = new pg.Client({ connectionString: cluster.url })
  await admin.connect()
  t.teardown(() => admin.end())
  const live = async (): Promise<number> =>
    (await admin.query('SELECT count(*)::int AS n FROM mcp_leases WHERE expires_at > clock_timestamp()')).rows[0].n
  await until(async () => await live() === 0, { timeout: 5000, what: 'the lease rows of failed releases to be deleted' })
  t.pass('no lease row left behind by the releases that failed')
  const mark = performance.now()
  const healed = await call(app, session, 'tools/call', { name: 'counter_add', arguments: {} })
  t.comment(`healed call took ${Math.round(performance.now() - mark)} ms`)
  t.equal(counterOf(healed), 2, 'back without an app restart; what was not told kept was not kept')
})
