/**
 * bench/capacity.ts's results as Markdown (the capacity block of docs/performance.md, one
 * `<!-- part:x -->` section per part, so a part run alone replaces only its own) and SVG charts.
 */
import type { FailoverRun } from './failover.js'
import { barChart, lineChart } from './svg.js'

export interface Capacity {
  meta: Record<string, unknown> & { date: string, load: number[], loadAfter?: number[], calls: number, records: number, rounds: number }
  backend: Array<{
    backend: string
    path: string
    calls: number
    backendUsPerCall: number
    /** Redis: commands (scripts' own included); PostgreSQL: write transactions (transaction ids taken). */
    opsPerCall: number
    pluginUsPerCall: number
    callsPerSecond: number
    backendCallsPerCore: number
    instanceCallsPerCore: number
  }>
  contention: Array<{
    backend: string
    parallel: number
    serialUnitMs: number
    ratio: number
    perInstance: Array<{ calls: number, p50: number, p99: number }>
    lostUpdates: number
    load: number
  }>
  size: {
    atRest: Array<{ store: string, kind: string, records: number, bytesPerRecord: number }>
    perCall: Array<{ store: string, record: string, pluginUsPerCall: number, backendUsPerCall: number, opsPerCall: number }>
  }
  failover: FailoverRun[]
}

const n0 = (v: number): string => Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : '–'
const n1 = (v: number): string => Number.isFinite(v) ? v.toFixed(1) : '–'
const n2 = (v: number): string => Number.isFinite(v) ? v.toFixed(2) : '–'
const round2 = (v: number): number => Number(v.toPrecision(2))
const NAME: Record<string, string> = { redis: 'Redis', postgres: 'PostgreSQL', memory: 'memory' }

/** Per-instance load the planning figures assume (locked calls/s each instance sends). */
export const PLANNING_LOAD = 500

function backendPart (c: Capacity, charts: Record<string, string>): string[] {
  if (c.backend.length === 0) return []
  const locked = (b: string): Capacity['backend'][number] | undefined => c.backend.find(r => r.backend === b && r.path.includes('handle'))
  const lines = [
    '<!-- part:backend -->',
    '### What one backend core serves',
    '',
    `Measured by \`npx tsx bench/capacity.ts --parts backend\` (${c.meta.date.slice(0, 10)}, ${String(c.meta.cores)} × ${String(c.meta.cpu)}` +
      `, load average ${n1(c.meta.load[0] as number)} at the start): ` +
      `${n0(c.backend[0]?.calls ?? NaN)} calls per row, 4 at a time on 4 sessions or handles of one instance, after a warm-up. The backend's CPU is its own account: ` +
      "Redis's `used_cpu_user + used_cpu_sys` (INFO cpu), PostgreSQL's utime + stime of the instance's backend processes (/proc/<pid>/stat, 10 ms ticks); " +
      "neither counts the kernel's loopback work on the client side, nor PostgreSQL's WAL writer and checkpointer. The plugin's is the instance process's `process.cpuUsage()`.",
    '',
    '| backend | path | backend µs/call | ops/call | calls/s per backend core | plugin µs/call | calls/s per instance core |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: |',
    ...c.backend.map(r => `| ${NAME[r.backend] ?? r.backend} | ${r.path} | ${n1(r.backendUsPerCall)} | ${n2(r.opsPerCall)}` +
      ` | ${n0(r.backendCallsPerCore)} | ${n0(r.pluginUsPerCall)} | ${n0(r.instanceCallsPerCore)} |`),
    '',
    '"ops/call": Redis commands run per call (the scripts\' own `redis.call`s included; 2 round trips), ' +
      'PostgreSQL write transactions per call (transaction ids taken; 2 statements, each its own transaction).',
    '',
    '**Planning.** Assumptions: the backend does nothing else; a core at 100 % (leave headroom: plan for 50–70 %); ' +
      `each instance sends ${PLANNING_LOAD} locked calls/s; the figures are this 2-core VM's, on loopback.`,
    ''
  ]
  for (const b of ['redis', 'postgres']) {
    const r = locked(b)
    if (r === undefined) continue
    lines.push(`- One ${NAME[b]} core: about **${n0(round2(r.backendCallsPerCore))} locked calls/s**; one instance core: about ${n0(round2(r.instanceCallsPerCore))}. ` +
      `So one ${NAME[b]} core feeds about ${n1(r.backendCallsPerCore / r.instanceCallsPerCore)} instances running flat out,` +
        ` or ${n0(r.backendCallsPerCore / PLANNING_LOAD)} instances at ${PLANNING_LOAD} calls/s each; ` +
      (b === 'redis'
        ? 'past that, shard the keys over a Redis Cluster (a session\'s or handle\'s keys share one hash tag, so they stay on one shard).'
        : 'past that, give PostgreSQL more cores (each connection is its own backend process, so the work spreads over cores), or move the state to Redis.'))
  }
  lines.push('')
  charts['capacity-backend.svg'] = barChart({
    title: 'CPU per call: the backend and the plugin instance',
    yLabel: 'µs of CPU per call',
    groups: c.backend.map(r => `${NAME[r.backend] ?? r.backend}: ${r.path.replace('2025-wire call on a session', 'session').replace(' on a state handle', '')}`),
    series: [{ name: 'backend', values: c.backend.map(r => r.backendUsPerCall) }, { name: 'plugin instance', values: c.backend.map(r => r.pluginUsPerCall) }]
  })
  lines.push('![CPU per call: the backend and the plugin instance](img/capacity-backend.svg)', '', '<!-- /part:backend -->')
  return lines
}

/** What the largest N's rows say against the goal (≤ 1.1× the floor; no instance's p99 over 2× another's). */
/** `date, cores × cpu` of the run, for each part's first line. */
function when (c: Capacity): string {
  return `${c.meta.date.slice(0, 10)}, ${String(c.meta.cores)} × ${String(c.meta.cpu)}`
}

function contentionReading (rows: Capacity['contention']): string[] {
  const top = Math.max(...rows.map(r => r.parallel))
  const lost = rows.reduce((n, r) => n + r.lostUpdates, 0)
  const said = rows.filter(r => r.parallel === top).map(r => {
    const p99 = r.perInstance.map(i => i.p99).filter(Number.isFinite)
    const spread = Math.max(...p99) / Math.min(...p99)
    return `${NAME[r.backend] ?? r.backend} ${n2(r.ratio)}× the floor, the slowest instance's p99 ${n2(spread)}× the fastest's`
  })
  return [
    `Reading it: at ${top} parallel calls, ${said.join('; ')} (goal: at most 1.1× and 2×). The serial floor moves the lease at ` +
      'every call, which costs more than a call that finds the lease where it is (the N = 1 row sends every call to instance 1); parallel ' +
      'calls overlap their HTTP and JSON work with their wait for the lock, so the lock adds little beyond serializing them. ' +
      `${lost === 0 ? 'Every update was kept' : `${lost} updates answered ok were lost`}. ` +
      'What limits one hot handle is its serial rate (one ÷ one call\'s time), whatever the number of instances: spread the work ' +
      'over several handles or sessions.'
  ]
}

function contentionPart (c: Capacity, charts: Record<string, string>): string[] {
  if (c.contention.length === 0) return []
  const lines = [
    '<!-- part:contention -->',
    '### The lock under contention across instances',
    '',
    `\`npx tsx bench/capacity.ts --parts contention\` (${when(c)}): N parallel \`basket_add\` calls on one state handle, sent round-robin to 3 instances (child processes) ` +
      `on one Redis or PostgreSQL; the median of ${c.meta.rounds} rounds or more (at least 600 calls for each N). ` +
      'The serial floor is N × one call\'s time alone, measured on the same 3 instances one call at a time ' +
      '(each call then moves the lease to another instance), 100 calls before and 100 after each N\'s rounds, averaged. ' +
      'Latency is per call as the client sees it (waiting for the lock included), per instance.',
    '',
    '| backend | N | one call alone (ms) | total ÷ serial floor | p50 / p99 ms, instance 1 | instance 2 | instance 3 | lost updates | load avg |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...c.contention.map(r => `| ${NAME[r.backend] ?? r.backend} | ${r.parallel} | ${n2(r.serialUnitMs)} | ${n2(r.ratio)}` +
      ` | ${r.perInstance.map(i => `${n1(i.p50)} / ${n1(i.p99)}`).join(' | ')} | ${r.lostUpdates} | ${n1(r.load)} |`),
    '',
    ...contentionReading(c.contention),
    ''
  ]
  charts['capacity-contention.svg'] = lineChart({
    title: 'Parallel calls on one handle over 3 instances',
    xLabel: 'parallel calls (N)',
    yLabel: 'total time ÷ serial floor',
    yMin: 0,
    series: ['redis', 'postgres'].filter(b => c.contention.some(r => r.backend === b)).map(b => ({
      name: NAME[b] as string,
      points: c.contention.filter(r => r.backend === b).map(r => [r.parallel, r.ratio] as [number, number])
    }))
  })
  lines.push('![Parallel calls on one handle over 3 instances: total time ÷ serial floor](img/capacity-contention.svg)', '', '<!-- /part:contention -->')
  return lines
}

function sizePart (c: Capacity): string[] {
  if (c.size.atRest.length === 0 && c.size.perCall.length === 0) return []
  return [
    '<!-- part:size -->',
    '### Record size',
    '',
    `\`npx tsx bench/capacity.ts --parts size\` (${when(c)}). Bytes at rest per idle record, over ${n0(c.meta.records)} records made through the plugin: ` +
      'the memory store\'s as the instance\'s heap growth after a full GC, Redis\'s as `used_memory` growth, PostgreSQL\'s as the growth of ' +
      '`pg_total_relation_size` of the state table (its index included, after VACUUM). A session record holds its handshake (client info, capabilities); a handle `{ count: 0 }`.',
    '',
    '| store | record | bytes each | 10,000 of them |',
    '| --- | --- | ---: | ---: |',
    ...c.size.atRest.map(r => `| ${NAME[r.store] ?? r.store} | ${r.kind} | ${n0(r.bytesPerRecord)} | ${n1(r.bytesPerRecord * 10_000 / 1_048_576)} MiB |`),
    '',
    'A locked 2025-wire call that changes one small key, on a session of 10 keys of 10 bytes and on one of 1 MiB (16 keys of 64 KiB), one call at a time:',
    '',
    '| store | record | plugin µs/call | backend µs/call | ops/call |',
    '| --- | --- | ---: | ---: | ---: |',
    ...c.size.perCall.map(r => `| ${NAME[r.store] ?? r.store} | ${r.record} | ${n0(r.pluginUsPerCall)} | ${n1(r.backendUsPerCall)} | ${n2(r.opsPerCall)} |`),
    '',
    'The save writes only the changed key (flat), but every locked call reads and decodes the whole record, so its cost grows with the record: ' +
      'keep large data out of session and handle state (a resource, a blob store) and the state to what a call needs.',
    '',
    '<!-- /part:size -->'
  ]
}

/** `ok / refused / unknown` summed over the bins from the kill on. */
function afterKill (bins: Capacity['failover'][number]['bins']): string {
  const from = bins.filter(b => b.atMs >= 0)
  const sum = (k: 'ok' | 'refused' | 'unknown'): number => from.reduce((n, b) => n + b[k], 0)
  return `${sum('ok')} / ${sum('refused')} / ${sum('unknown')}`
}

function failoverPart (c: Capacity, charts: Record<string, string>): string[] {
  if (c.failover.length === 0) return []
  const lost = c.failover.reduce((n, r) => n + r.acknowledgedLost, 0)
  const lines = [
    '<!-- part:failover -->',
    '### A Redis primary dies',
    '',
    `\`npx tsx bench/capacity.ts --parts failover\` (${when(c)}): a primary, a replica and 3 sentinels on loopback (down-after 1 s), two instances through Sentinel, ` +
      '5 loops of appends (40 ms apart) on one handle and one session; the primary is killed (SIGKILL) at 0. Calls are counted by the 100 ms in which they ended: ' +
      'ok, refused (nothing written: a 503 or a tool error that says so) or unknown (a timeout, a broken connection, a save that may have run).',
    '',
    '| run | calls | first success after the kill (s) | after the kill: ok / refused / unknown | acknowledged appends lost |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...c.failover.map(r => `| ${r.variant} | ${r.calls} | ${n1(r.firstSuccessMs / 1000)} | ${afterKill(r.bins)} | ${r.acknowledgedLost} |`),
    '',
    'Reading it: the blip is Sentinel noticing the loss (down-after) and promoting the replica, then the instances reconnecting; ' +
      'meanwhile calls are refused (503 with Retry-After, or the tool\'s error saying nothing was written), and ' +
      `${lost === 0 ? 'no call answered ok was lost' : `${lost} appends answered ok were lost`}. ` +
      'With `waitReplicas: 1` and the group\'s only replica promoted, no replica is left to acknowledge a write: every write is refused until one attaches ' +
      '(the old primary back as a replica, or a second replica that Sentinel points at the new primary) — the price of the promise that a write ' +
      'answered ok survives the loss of its primary. Run two replicas when writes must go on through a failover with acknowledgement.',
    ''
  ]
  c.failover.forEach((r, i) => {
    const name = `capacity-failover-${i + 1}.svg`
    charts[name] = lineChart({
      title: `Calls per 100 ms around the primary's kill (${r.variant})`,
      xLabel: 'ms from the kill',
      yLabel: 'calls ended per 100 ms',
      steps: true,
      yMin: 0,
      marks: [{ x: 0, label: 'kill' }, ...(Number.isFinite(r.firstSuccessMs) ? [{ x: Math.round(r.firstSuccessMs), label: 'first success' }] : [])],
      series: (['ok', 'refused', 'unknown'] as const).map(o => ({ name: o, points: r.bins.map(b => [b.atMs, b[o]] as [number, number]) }))
    })
    lines.push(`![Calls per 100 ms around the primary's kill, ${r.variant}](img/${name})`, '')
  })
  lines.push('<!-- /part:failover -->')
  return lines
}

/** The Markdown block and the charts (file name → SVG text). */
export function renderCapacity (c: Capacity): { markdown: string, charts: Record<string, string> } {
  const charts: Record<string, string> = {}
  const lines = [...backendPart(c, charts), '', ...contentionPart(c, charts), '', ...sizePart(c), '', ...failoverPart(c, charts)]
  return { markdown: `${lines.join('\n').replace(/\n{3,}/g, '\n\n').trim()}\n`, charts }
}
