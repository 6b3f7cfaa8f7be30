/**
 * The failover timeline of bench/capacity.ts (`--parts failover`): a Redis primary + replica + 3
 * sentinels on loopback (down-after 1 s, test/helpers/redis-sentinel.ts), two demo processes
 * through Sentinel, and appends going on (3 `basket_add` and 2 `counter_add` loops, 40 ms apart,
 * as the history test's) when the primary is killed (SIGKILL). Every call is recorded by when it
 * ended and its outcome: ok, refused (nothing written) or unknown (a timeout, a broken connection,
 * a save that may have run). Run without and with `waitReplicas: 1`. Reported: calls per 100 ms by
 * outcome around the kill, the time from the kill to the first success of a call started after
 * it, and acknowledged appends missing afterwards.
 */
import { DEMO_ENTRY, startServer, type ServerProcess } from '../test/helpers/processes.js'
import { initialize, modernSend, readReply, send, type Reply } from '../test/helpers/http-client.js'
import { newId, rpc, type Session } from '../test/helpers/wire.js'
import { startSentinelDeployment } from '../test/helpers/redis-sentinel.js'

type Outcome = 'ok' | 'refused' | 'unknown'
interface Op { kind: 'basket' | 'counter', item: string, start: number, end: number, outcome: Outcome }

export interface FailoverRun {
  variant: string
  /** 100 ms bins from -1 s to +BINS_AFTER: counts by outcome of the calls that ended in each. */
  bins: Array<{ atMs: number, ok: number, refused: number, unknown: number }>
  firstSuccessMs: number
  calls: number
  acknowledgedLost: number
}

const CALL_TIMEOUT = 8000
const BIN = 100
const BEFORE_MS = 1000
const AFTER_MS = 7000
const sleep = async (ms: number): Promise<void> => { await new Promise(resolve => setTimeout(resolve, ms)) }

/** Refusals that say nothing was written (as the history test's). */
const NOTHING_WRITTEN = [
  'still being processed', 'lock was lost', 'lock is unavailable', 'could not be confirmed by enough replicas: nothing was done'
]

function classify (reply: Reply | undefined): Outcome {
  if (reply === undefined) return 'unknown'
  const result = reply.last?.result
  if (reply.status === 200 && result !== undefined && result.isError !== true) return 'ok'
  const message = String(reply.last?.error?.message ?? result?.content?.[0]?.text ?? reply.status)
  return NOTHING_WRITTEN.some(m => message.includes(m)) ? 'refused' : 'unknown'
}

async function eventually<T> (fn: () => Promise<T | undefined>): Promise<T> {
  const deadline = performance.now() + 60_000
  for (;;) {
    const v = await fn().catch(() => undefined)
    if (v !== undefined) return v
    if (performance.now() > deadline) throw new Error('failover bench: no success within 60 s')
    await sleep(200)
  }
}

async function oneRun (variant: string, env: Record<string, string>, cleanups: Array<() => unknown>): Promise<FailoverRun> {
  const t = { teardown: (fn: () => unknown) => { cleanups.push(fn) } }
  const deployment = await startSentinelDeployment(t, { downAfterMs: 1000 })
  await deployment.awaitSettled()
  const demoEnv = {
    MCP_STORE: 'redis',
    MCP_LOCK: 'redis',
    MCP_LOCK_TTL_MS: '1000',
    MCP_LOCK_TIMEOUT_MS: '3000',
    MCP_REDIS_SENTINELS: deployment.sentinelList,
    MCP_REDIS_MASTER: deployment.masterName,
    MCP_STATE_SECRET: 'failover-bench-secret',
    ...env
  }
  const procs: ServerProcess[] = await Promise.all([startServer(t, DEMO_ENTRY, demoEnv), startServer(t, DEMO_ENTRY, demoEnv)])
  const urls = procs.map(p => p.url)
  const basket = await eventually(async () => {
    const r = await readReply(await modernSend(urls[0] as string, rpc('tools/call', { name: 'basket_create', arguments: {} })))
    return r.last?.result?.structuredContent?.basket as string | undefined
  })
  const session: Session = await eventually(async () => await initialize(urls[0] as string))
  const ops: Op[] = []
  const run = { stopped: false }
  let next = 0
  const call = async (kind: Op['kind'], item: string): Promise<void> => {
    const url = urls[next++ % urls.length] as string
    const start = performance.now()
    let reply: Reply | undefined
    try {
      const signal = AbortSignal.timeout(CALL_TIMEOUT)
      reply = kind === 'basket'
        ? await readReply(await modernSend(url, rpc('tools/call', { name: 'basket_add', arguments: { basket, item } }), { signal }))
        : await readReply(await send(url, { jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name: 'counter_add', arguments: { by: 1 } } }, session, { signal }))
    } catch {}
    ops.push({ kind, item, start, end: performance.now(), outcome: classify(reply) })
  }
  const workers = [
    ...[0, 1, 2].map(async w => { for (let i = 0; !run.stopped; i++) { await call('basket', `b-${w}-${i}`); await sleep(40) } }),
    ...[0, 1].map(async w => { for (let i = 0; !run.stopped; i++) { await call('counter', `c-${w}-${i}`); await sleep(40) } })
  ]
  await sleep(1500)
  const { primary } = await deployment.roles()
  const killAt = performance.now()
  await primary.kill()
  await deployment.awaitPromotion(primary.port)
  await primary.start()
  await sleep(Math.max(0, killAt + AFTER_MS - performance.now()))
  run.stopped = true
  await Promise.all(workers)
  await deployment.awaitSettled(60_000)
  const items = await eventually(async () => {
    const r = await readReply(await modernSend(urls[0] as string, rpc('tools/call', { name: 'basket_get', arguments: { basket } })))
    return r.last?.result?.structuredContent?.items as string[] | undefined
  })
  const kept = new Set(items)
  const bins: FailoverRun['bins'] = []
  for (let at = -BEFORE_MS; at < AFTER_MS; at += BIN) {
    const inBin = ops.filter(op => op.end - killAt >= at && op.end - killAt < at + BIN)
    bins.push({ atMs: at, ok: inBin.filter(o => o.outcome === 'ok').length, refused: inBin.filter(o => o.outcome === 'refused').length, unknown: inBin.filter(o => o.outcome === 'unknown').length })
  }
  const first = ops.filter(op => op.outcome === 'ok' && op.start >= killAt).sort((a, b) => a.end - b.end)[0]
  return {
    variant,
    bins,
    firstSuccessMs: first === undefined ? NaN : first.end - killAt,
    calls: ops.length,
    acknowledgedLost: ops.filter(op => op.kind === 'basket' && op.outcome === 'ok' && !kept.has(op.item)).length
  }
}

/** Both runs; every process they started is stopped before this resolves. */
export async function runFailover (log: (m: string) => void): Promise<FailoverRun[]> {
  const out: FailoverRun[] = []
  for (const [variant, env] of [['without waitReplicas', {}], ['waitReplicas 1', { MCP_REDIS_WAIT_REPLICAS: '1', MCP_REDIS_WAIT_TIMEOUT_MS: '300' }]] as const) {
    const cleanups: Array<() => unknown> = []
    try {
      const run = await oneRun(variant, env, cleanups)
      log(`  ${variant}: first success ${run.firstSuccessMs.toFixed(0)} ms after the kill, ${run.calls} calls, ${run.acknowledgedLost} acknowledged appends lost`)
      out.push(run)
    } finally {
      for (const fn of cleanups.reverse()) await Promise.resolve(fn()).catch(() => {})
    }
  }
  return out
}
