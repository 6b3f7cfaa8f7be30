/**
 * Capacity figures for planning (issue 49), each from one command, in a few minutes on 2 cores:
 *
 *   npx tsx bench/capacity.ts [--parts backend,contention,size,failover] [--calls 2000] [--docs]
 *
 * - backend: the backend's own CPU per call (Redis: `INFO cpu` and `INFO commandstats` deltas;
 *   PostgreSQL: utime+stime from /proc/<pid>/stat of the server's backend processes) and the
 *   plugin process's CPU per call, for a 2025-wire call on a session (lock off and on) and
 *   `basket_add` on a state handle (locked); from them the calls/s one core of each serves.
 * - contention: 1, 10, 50, 100 parallel `basket_add` calls on one handle spread over 3 instances
 *   (child processes): total time ÷ the serial floor (N × one call's time alone, measured over the
 *   same 3 instances one call at a time), latency p50/p99 per instance, no lost update.
 * - size: bytes at rest per record (idle sessions and handles, for the memory, Redis and PostgreSQL
 *   stores), and a locked call's CPU and round trips on a session of 10 small keys against one of
 *   1 MiB (16 keys of 64 KiB), the call changing one small key.
 * - failover: bench/failover.ts (a Redis Sentinel group; calls per 100 ms by outcome around the
 *   primary's kill, with and without `waitReplicas`).
 *
 * Results go to bench/results/capacity.json; `--docs` writes the tables between
 * `<!-- capacity:start -->` and `<!-- capacity:end -->` of docs/performance.md and the charts to
 * docs/img/. Wall-clock figures on a shared machine: read the ratios, and the load noted with them.
 */
import { readFile, writeFile, mkdir, readdir } from 'node:fs/promises'
import { loadavg } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import pg from 'pg'
import { buildServers } from './build.js'
import { ROOT, ServerProcess, startRedis, type PrivateRedis } from './harness.js'
import { createBenchDatabase, type BenchDatabase } from './postgres.js'
import { machine } from './report.js'
import { legacyCall, modernCall, openSession, post, type RequestSpec } from './requests.js'
import { renderCapacity, type Capacity } from './capacity-report.js'
import { runFailover } from './failover.js'

const PARTS = ['backend', 'contention', 'size', 'failover'] as const
const { values: args } = parseArgs({
  options: {
    parts: { type: 'string', default: PARTS.join(',') },
    calls: { type: 'string', default: '2000' },
    records: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '3' },
    docs: { type: 'boolean', default: false },
    out: { type: 'string', default: join(ROOT, 'bench', 'results') }
  }
})
const parts = new Set(args.parts.split(',').map(s => s.trim()))
for (const p of parts) if (!(PARTS as readonly string[]).includes(p)) throw new Error(`unknown part ${p} (${PARTS.join(', ')})`)
const CALLS = Number(args.calls)
const RECORDS = Number(args.records)
const ROUNDS = Number(args.rounds)
const log = (m: string): void => { process.stderr.write(`${m}\n`) }

type Backend = 'redis' | 'postgres'

/** Sends `n` requests made by `spec(i)` to `urls[i % urls.length]`, `concurrency` at a time; throws on a non-200. */
async function drive (urls: string[], n: number, concurrency: number, spec: (i: number) => RequestSpec): Promise<void> {
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < n) {
      const i = next++
      const a = await post(urls[i % urls.length] as string, spec(i))
      if (a.status !== 200) throw new Error(`call ${i}: ${a.status} ${a.text.slice(0, 300)}`)
    }
  }))
}

// ─── backend CPU ─────────────────────────────────────────────────────────────────────────────

const TICK_US = 10_000 // 100 clock ticks per second (Linux's USER_HZ)

async function redisCpuUs (redis: PrivateRedis): Promise<{ cpuUs: number, commands: number, commandUs: number }> {
  const cpu = await redis.client.info('cpu')
  const num = (re: RegExp, text: string): number => Number(re.exec(text)?.[1] ?? NaN)
  const stats = await redis.client.info('commandstats')
  let commands = 0
  let commandUs = 0
  for (const m of stats.matchAll(/calls=(\d+),usec=(\d+)/g)) { commands += Number(m[1]); commandUs += Number(m[2]) }
  return { cpuUs: (num(/used_cpu_user:([\d.]+)/, cpu) + num(/used_cpu_sys:([\d.]+)/, cpu)) * 1e6, commands, commandUs }
}

async function pgCpuUs (admin: pg.Client, db: string): Promise<{ cpuUs: number, commits: number }> {
  const { rows } = await admin.query('SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [db])
  let ticks = 0
  for (const { pid } of rows as Array<{ pid: number }>) {
    try {
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      ticks += Number(fields[11]) + Number(fields[12]) // utime, stime (fields 14 and 15)
    } catch {} // a backend that just ended
  }
  // Write transactions, by the next transaction id (read without taking one): pg_stat_database's
  // commit counts are reported by idle backends up to 10 s late.
  const c = await admin.query('SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS n')
  return { cpuUs: ticks * TICK_US, commits: Number(c.rows[0].n) }
}

interface Target { backend: Backend, url: string, admin?: pg.Client, db?: string, redis?: PrivateRedis }

async function backendCpu (t: Target): Promise<{ cpuUs: number, ops: number }> {
  if (t.backend === 'redis') {
    const r = await redisCpuUs(t.redis as PrivateRedis)
    return { cpuUs: r.cpuUs, ops: r.commands }
  }
  const r = await pgCpuUs(t.admin as pg.Client, t.db as string)
  return { cpuUs: r.cpuUs, ops: r.commits }
}

function serverConfig (t: Target, lock: boolean): Record<string, unknown> {
  const base = t.backend === 'redis' ? { store: 'redis', redisUrl: t.url } : { store: 'postgres', pgUrl: t.url }
  return { ...base, lock: lock ? t.backend : 'none', maxStreamsPerSession: 256 }
}

async function openHandle (url: string): Promise<string> {
  const a = await post(url, modernCall('basket_create', {}))
  const id = (JSON.parse(a.text) as { result?: { structuredContent?: { basket?: string } } }).result?.structuredContent?.basket
  if (typeof id !== 'string') throw new Error(`basket_create: ${a.text.slice(0, 300)}`)
  return id
}

async function basketCount (url: string, basket: string): Promise<number> {
  const a = await post(url, modernCall('basket_count', { basket }))
  return Number((JSON.parse(a.text) as { result?: { structuredContent?: { count?: number } } }).result?.structuredContent?.count)
}

async function backendPart (targets: Target[]): Promise<Capacity['backend']> {
  const out: Capacity['backend'] = []
  const paths = [
    { path: '2025-wire call on a session, lock off', lock: false, handle: false },
    { path: '2025-wire call on a session, locked', lock: true, handle: false },
    { path: 'basket_add on a state handle, locked', lock: true, handle: true }
  ]
  for (const t of targets) {
    for (const p of paths) {
      const server = await ServerProcess.start(`${t.backend} ${p.path}`, 'ours', serverConfig(t, p.lock))
      try {
        const url = `${server.url}/mcp`
        // Four sessions or handles, one per connection: the backend's work per call, not a queue.
        const keys = await Promise.all([0, 1, 2, 3].map(async () => p.handle ? await openHandle(url) : await openSession(url)))
        const spec = (i: number): RequestSpec => p.handle
          ? modernCall('basket_add', { basket: keys[i % 4], item: 'apple' })
          : legacyCall('counter_add', { delayMs: 0 }, keys[i % 4], i + 2)
        await drive([url], Math.min(1000, CALLS), 4, spec)
        const before = await backendCpu(t)
        await server.cpuStart()
        const t0 = performance.now()
        await drive([url], CALLS, 4, spec)
        const wallMs = performance.now() - t0
        const cpu = await server.cpuStop()
        const after = await backendCpu(t)
        const backendUs = (after.cpuUs - before.cpuUs) / CALLS
        const pluginUs = (cpu.userUs + cpu.systemUs) / CALLS
        out.push({
          backend: t.backend,
          path: p.path,
          calls: CALLS,
          backendUsPerCall: backendUs,
          opsPerCall: (after.ops - before.ops) / CALLS,
          pluginUsPerCall: pluginUs,
          callsPerSecond: CALLS / (wallMs / 1000),
          backendCallsPerCore: 1e6 / backendUs,
          instanceCallsPerCore: 1e6 / pluginUs
        })
        log(`  ${t.backend}, ${p.path}: backend ${backendUs.toFixed(1)} µs/call` +
          `, plugin ${pluginUs.toFixed(0)} µs/call, ${((after.ops - before.ops) / CALLS).toFixed(2)} ${t.backend === 'redis' ? 'commands' : 'write transactions'}/call`)
      } finally {
        await server.stop()
      }
    }
  }
  return out
}

// ─── contention across instances ─────────────────────────────────────────────────────────────

const pct = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? NaN
}

async function contentionPart (targets: Target[]): Promise<Capacity['contention']> {
  const out: Capacity['contention'] = []
  for (const t of targets) {
    const procs: ServerProcess[] = []
    try {
      for (let i = 0; i < 3; i++) procs.push(await ServerProcess.start(`${t.backend} #${i + 1}`, 'ours', serverConfig(t, true)))
      const urls = procs.map(p => `${p.url}/mcp`)
      const basket = await openHandle(urls[0] as string)
      const spec = (): RequestSpec => modernCall('basket_add', { basket, item: 'apple' })
      await drive(urls, 300, 1, spec) // warm-up, every instance
      // The serial floor: one call at a time, round the three instances (each call moves the lease),
      // measured before and after each N's rounds (the machine's speed drifts) and averaged.
      const serialUnit = async (): Promise<number> => {
        const s0 = performance.now()
        await drive(urls, 100, 1, spec)
        return (performance.now() - s0) / 100
      }
      for (const n of [1, 10, 50, 100]) {
        const before = await serialUnit()
        const totals: number[] = []
        const lat: number[][] = [[], [], []]
        let lost = 0
        // At least 600 calls per size: a burst of 1 or 10 calls lasts a few ms, and one GC pause
        // or scheduler hiccup would otherwise be the figure.
        const rounds = Math.max(ROUNDS, Math.ceil(600 / n))
        for (let round = 0; round < rounds; round++) {
          const count0 = await basketCount(urls[0] as string, basket)
          const t0 = performance.now()
          const answers = await Promise.all(Array.from({ length: n }, async (_, i) => {
            const a0 = performance.now()
            const a = await post(urls[i % 3] as string, spec())
            return { ok: a.status === 200, ms: performance.now() - a0, instance: i % 3 }
          }))
          const totalMs = performance.now() - t0
          const okCount = answers.filter(a => a.ok).length
          lost += okCount - ((await basketCount(urls[0] as string, basket)) - count0)
          for (const a of answers) if (a.ok) lat[a.instance]?.push(a.ms)
          totals.push(totalMs)
        }
        const unitMs = (before + await serialUnit()) / 2
        const ratios = totals.map(ms => ms / (n * unitMs))
        const row = {
          backend: t.backend,
          parallel: n,
          serialUnitMs: unitMs,
          ratio: ratios.sort((a, b) => a - b)[Math.floor(ratios.length / 2)] as number,
          perInstance: lat.map(l => ({ calls: l.length, p50: pct(l, 0.5), p99: pct(l, 0.99) })),
          lostUpdates: lost,
          load: loadavg()[0] as number
        }
        out.push(row)
        log(`  ${t.backend}, ${n} parallel: ${row.ratio.toFixed(2)}× the serial floor (${unitMs.toFixed(2)} ms a call)` +
          `, p99 by instance ${row.perInstance.map(i => i.p99.toFixed(1)).join(' / ')} ms, lost ${lost}`)
      }
    } finally {
      await Promise.all(procs.map(async p => await p.stop()))
    }
  }
  return out
}

// ─── record size ─────────────────────────────────────────────────────────────────────────────

async function atRest (t: Target | null): Promise<number> {
  if (t === null) return NaN
  if (t.backend === 'redis') {
    const info = await (t.redis as PrivateRedis).client.info('memory')
    return Number(/used_memory:(\d+)/.exec(info)?.[1])
  }
  await (t.admin as pg.Client).query('VACUUM mcp_state').catch(() => {})
  const { rows } = await (t.admin as pg.Client).query("SELECT pg_total_relation_size('mcp_state')::bigint AS n")
  return Number(rows[0].n)
}

async function sizePart (targets: Target[]): Promise<Capacity['size']> {
  const out: Capacity['size'] = { atRest: [], perCall: [] }
  const stores: Array<Target | null> = [null, ...targets]
  for (const t of stores) {
    const name = t === null ? 'memory' : t.backend
    const config = t === null ? { store: 'memory', lock: 'memory', maxStreamsPerSession: 256 } : serverConfig(t, true)
    const server = await ServerProcess.start(`${name} size`, 'ours', config, { exposeGc: true })
    try {
      const url = `${server.url}/mcp`
      await openSession(url)
      await openHandle(url)
      for (const kind of ['session', 'handle'] as const) {
        const heap0 = (await server.mem()).heapUsed
        const rest0 = await atRest(t)
        let n = 0
        await Promise.all(Array.from({ length: 10 }, async () => {
          while (n < RECORDS) { n++; if (kind === 'session') await openSession(url); else await openHandle(url) }
        }))
        const heap1 = (await server.mem()).heapUsed
        const rest1 = await atRest(t)
        out.atRest.push({ store: name, kind, records: n, bytesPerRecord: t === null ? (heap1 - heap0) / n : (rest1 - rest0) / n })
        log(`  ${name}: ${kind} ${(t === null ? (heap1 - heap0) / n : (rest1 - rest0) / n).toFixed(0)} bytes at rest each`)
      }
      for (const shape of [{ label: '10 keys of 10 bytes', keys: 10, bytes: 10 }, { label: '1 MiB (16 keys of 64 KiB)', keys: 16, bytes: 65_536 }]) {
        const sid = await openSession(url)
        const fill = await post(url, legacyCall('blob_fill', { keys: shape.keys, bytes: shape.bytes }, sid, 2))
        if (fill.status !== 200) throw new Error(`blob_fill: ${fill.status}`)
        const calls = Math.max(100, Math.round(CALLS / 5))
        const spec = (i: number): RequestSpec => legacyCall('blob_touch', {}, sid, i + 3)
        await drive([url], 50, 1, spec)
        const b0 = t === null ? { cpuUs: NaN, ops: NaN } : await backendCpu(t)
        await server.cpuStart()
        await drive([url], calls, 1, spec)
        const cpu = await server.cpuStop()
        const b1 = t === null ? { cpuUs: NaN, ops: NaN } : await backendCpu(t)
        out.perCall.push({
          store: name,
          record: shape.label,
          pluginUsPerCall: (cpu.userUs + cpu.systemUs) / calls,
          backendUsPerCall: (b1.cpuUs - b0.cpuUs) / calls,
          opsPerCall: (b1.ops - b0.ops) / calls
        })
        log(`  ${name}, ${shape.label}: plugin ${((cpu.userUs + cpu.systemUs) / calls).toFixed(0)} µs/call, backend ${((b1.cpuUs - b0.cpuUs) / calls).toFixed(0)} µs/call`)
      }
    } finally {
      await server.stop()
    }
  }
  return out
}

// ─── main ────────────────────────────────────────────────────────────────────────────────────

async function main (): Promise<void> {
  await buildServers()
  const result: Capacity = {
    meta: { ...machine(), date: new Date().toISOString(), load: loadavg(), calls: CALLS, records: RECORDS, rounds: ROUNDS },
    backend: [],
    contention: [],
    size: { atRest: [], perCall: [] },
    failover: []
  }
  let redis: PrivateRedis | null = null
  let database: BenchDatabase | null = null
  let admin: pg.Client | null = null
  try {
    const targets: Target[] = []
    if (parts.has('backend') || parts.has('contention') || parts.has('size')) {
      redis = await startRedis()
      targets.push({ backend: 'redis', url: redis.url, redis })
      database = await createBenchDatabase()
      admin = new pg.Client({ connectionString: database.url })
      await admin.connect()
      targets.push({ backend: 'postgres', url: database.url, admin, db: new URL(database.url).pathname.slice(1) })
    }
    // A part that fails is reported and left out; the others are still written.
    const part = async (name: string, run: () => Promise<void>): Promise<void> => {
      if (!parts.has(name)) return
      log(`\n== ${name}`)
      try { await run() } catch (err) { log(`  ${name} failed, left out: ${(err as Error).stack ?? String(err)}`) }
    }
    await part('backend', async () => { result.backend = await backendPart(targets) })
    await part('contention', async () => { result.contention = await contentionPart(targets) })
    await part('size', async () => { result.size = await sizePart(targets) })
    await part('failover', async () => { result.failover = await runFailover(log) })
  } finally {
    await admin?.end().catch(() => {})
    await database?.drop()
    await redis?.stop()
  }
  result.meta.loadAfter = loadavg()
  await mkdir(args.out, { recursive: true })
  await writeFile(join(args.out, 'capacity.json'), JSON.stringify(result, null, 2) + '\n')
  const { markdown, charts } = renderCapacity(result)
  await writeFile(join(args.out, 'capacity.md'), markdown)
  console.log(markdown)
  if (args.docs) await writeDocs(markdown, charts)
}

const START = '<!-- capacity:start -->'
const END = '<!-- capacity:end -->'

async function writeDocs (markdown: string, charts: Record<string, string>): Promise<void> {
  const page = join(ROOT, 'docs', 'performance.md')
  const text = await readFile(page, 'utf8')
  const s = text.indexOf(START)
  const e = text.indexOf(END)
  if (s === -1 || e < s) throw new Error(`--docs: docs/performance.md has no ${START} … ${END} block`)
  await mkdir(join(ROOT, 'docs', 'img'), { recursive: true })
  for (const [name, svg] of Object.entries(charts)) await writeFile(join(ROOT, 'docs', 'img', name), svg)
  // Parts not run this time keep their previous text: a block per part, in the order of PARTS.
  const blocks = new Map<string, string>()
  const BLOCK = /<!-- part:(\w+) -->[\s\S]*?<!-- \/part:\1 -->/g
  for (const m of text.slice(s + START.length, e).matchAll(BLOCK)) blocks.set(m[1] as string, m[0])
  for (const m of markdown.matchAll(BLOCK)) blocks.set(m[1] as string, m[0])
  const body = `\n${PARTS.map(p => blocks.get(p)).filter(b => b !== undefined).join('\n\n')}\n`
  await writeFile(page, `${text.slice(0, s + START.length)}${body}${text.slice(e)}`)
  log(`docs/performance.md and docs/img/ (${(await readdir(join(ROOT, 'docs', 'img'))).length} charts) updated`)
}

main().then(() => process.exit(0), (err: unknown) => { console.error(err); process.exit(1) })
