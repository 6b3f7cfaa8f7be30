/**
 * `npm run bench` — throughput, latency, CPU and memory of fastify-mcp-http against baselines
 * measured in the same run (not part of `npm test`).
 *
 *   npm run bench                         # every scenario, 5 rounds of 3 s runs, then capacity: ~15 minutes on 2 cores
 *   npm run bench -- --quick              # 2 rounds of 3 s runs: ~5 minutes
 *   npm run bench -- --scenarios modern,session --duration 10 --connections 1,50,100
 *   npm run bench -- --profile --scenarios modern   # + V8 CPU profiles of the servers
 *
 * Each server runs in its own process; the load generator (autocannon) runs here. Per block
 * (scenario × connections × sessions) every server is validated, warmed up, then measured
 * `--rounds` times in alternation (A B C A B C …); the table shows medians and each figure's ratio
 * to the block's baseline (its first row). Results go to bench/results/results.json and
 * results.md; `--docs` (or its old name `--readme`) also puts the latter into docs/performance.md
 * between `<!-- bench:start -->` and `<!-- bench:end -->` (that table is generated, not hand-typed).
 *
 * Scenarios: modern (2026-07-28 tools/call, JSON), session (2025-wire tools/call on an existing
 * session, memory store), stores (memory/file/Redis/PostgreSQL stores, lock off and on, one request at a time,
 * and at the largest connection count one session and one per connection; Redis round trips per
 * request), handles (2026-07-28 basket_add on a state handle, one for all connections and one per
 * connection, memory, Redis and PostgreSQL store + lock, against a handle-less 2026 call on the Redis
 * server; every run checks that no update was lost), sse (10 progress notifications on SSE),
 * parallel (100 parallel calls on one session with the lock on), idle (10,000 idle sessions),
 * tracing (2025-wire tools/call with the memory lock: telemetry off vs on without an SDK, and with
 * an SDK registered whose span processor does nothing, telemetry off vs on), capacity (last, after
 * the table is written: bench/capacity.ts in its own process — backend CPU per call, contention
 * across instances, record size, a Redis failover —, with `--docs` its section and charts too).
 * The Redis scenarios start a private redis-server (from PATH) on a free port. Before the first
 * block and after each, a fixed CPU loop runs alone where the servers run (bench/machine-probe.ts):
 * the results say how much the machine's own speed swung.
 */
import { spawn } from 'node:child_process'
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { buildServers } from './build.js'
import {
  ROOT, ServerProcess, pinProcesses, pinToServerCpus, countRoundTrips, hostCpu, load, median, redisCommandsProcessed, startRedis,
  type LoadResult, type PrivateRedis, type ServerKind
} from './harness.js'
import {
  BARE, HANDLES_REDIS, OURS_MEMORY, OURS_REDIS_LOCKED, SDK_V1, SDK_V2, TRACING_API, TRACING_OFF, TRACING_SDK, TRACING_SDK_OFF, addRatios, checkTargets, machine, renderMarkdown, renderText,
  type IdleResult, type ParallelResult, type Results, type Row
} from './report.js'
import { probeMachine, type MachineProbe } from './machine-probe.js'
import { createBenchDatabase, type BenchDatabase } from './postgres.js'
import { ECHO_TEXT, expectToolResult, initializeRequest, legacyCall, modernCall, openSession, post, type RequestSpec } from './requests.js'

/** Windows of the machine probe (each as long as a measured run) before the first block and after each. */
const PROBE_WINDOWS = 2
const SCENARIOS = ['modern', 'session', 'stores', 'handles', 'sse', 'parallel', 'idle', 'tracing', 'capacity'] as const
/** The generated block of docs/performance.md lies between these markers (`--docs`). */
const DOCS_PAGE = 'docs/performance.md'
const BLOCK_START = '<!-- bench:start -->'
const BLOCK_END = '<!-- bench:end -->'
type Scenario = typeof SCENARIOS[number]

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    duration: { type: 'string' },
    warmup: { type: 'string' },
    rounds: { type: 'string' },
    connections: { type: 'string' },
    scenarios: { type: 'string' },
    sessions: { type: 'string' },
    'parallel-calls': { type: 'string' },
    'handler-ms': { type: 'string' },
    'idle-sessions': { type: 'string' },
    profile: { type: 'boolean', default: false },
    before: { type: 'string' },
    'no-pin': { type: 'boolean', default: false },
    docs: { type: 'boolean', default: false },
    readme: { type: 'boolean', default: false },
    out: { type: 'string' },
    help: { type: 'boolean', default: false }
  }
})

if (args.help === true) {
  console.log(`npm run bench -- [options]
  --quick                 3 s runs, 1 s warm-up, 2 rounds (default: 3 s runs, 2 s warm-up, 5 rounds)
  --duration <s>          seconds per measured run
  --warmup <s>            seconds of warm-up per server and block
  --rounds <n>            alternating rounds per block (medians are reported)
  --connections <list>    connections for modern and session (default 1,50); stores and sse use the largest
  --scenarios <list>      ${SCENARIOS.join(',')} (default: all)
  --sessions <list>       stores scenario: one,many (default both)
  --parallel-calls <n>    parallel scenario: calls on one session (default 100)
  --handler-ms <ms>       parallel scenario: handler time (default 20)
  --idle-sessions <n>     idle scenario: sessions (default 10000)
  --no-pin                do not pin the load generator to CPU 0 and the servers to the other CPUs
  --profile               write V8 CPU profiles of the servers to <out>/profiles (see bench/profile.ts)
  --before <checkout>     also run the plugin's main rows on that checkout's lib/ (e.g. /work/main, or a
                          \`git worktree\` of the commit before a change), with this tree's bench servers,
                          alternating with the others in the same run: rows labelled "@ before"
  --docs                  also replace the block between ${BLOCK_START} and ${BLOCK_END} in ${DOCS_PAGE}
                          (and, with the capacity scenario, its section of that page and its charts)
  --readme                the old name of --docs
                          with results.md
  --out <dir>             results directory (default bench/results)`)
  process.exit(0)
}

const quick = args.quick === true
const int = (v: string | undefined, def: number, name: string): number => {
  if (v === undefined) return def
  const n = Number(v)
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number`)
  return n
}
const opts = {
  quick,
  // Many short alternating rounds rather than a few long ones: on a shared 2-core machine the
  // background load drifts, and finer alternation keeps it from landing on one server only.
  duration: int(args.duration, 3, 'duration'),
  warmup: int(args.warmup, quick ? 1 : 2, 'warmup'),
  rounds: int(args.rounds, quick ? 2 : 5, 'rounds'),
  connections: (args.connections ?? '1,50').split(',').map(s => int(s.trim(), 1, 'connections')),
  scenarios: (args.scenarios ?? SCENARIOS.join(',')).split(',').map(s => s.trim()) as Scenario[],
  sessions: (args.sessions ?? 'one,many').split(',').map(s => s.trim()) as Array<'one' | 'many'>,
  parallelCalls: int(args['parallel-calls'], 100, 'parallel-calls'),
  handlerMs: int(args['handler-ms'], 20, 'handler-ms'),
  idleSessions: int(args['idle-sessions'], 10_000, 'idle-sessions'),
  profile: args.profile === true,
  before: args.before,
  pin: args['no-pin'] !== true,
  docs: args.docs === true || args.readme === true,
  out: args.out ?? join(ROOT, 'bench', 'results')
}
for (const s of opts.scenarios) if (!(SCENARIOS as readonly string[]).includes(s)) throw new Error(`unknown scenario ${s} (one of ${SCENARIOS.join(', ')})`)
for (const s of opts.sessions) if (s !== 'one' && s !== 'many') throw new Error('--sessions takes one, many')
const maxConnections = Math.max(...opts.connections)
const profileDir = opts.profile ? join(opts.out, 'profiles') : undefined
const slug = (s: string): string => s.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '')

const log = (msg: string): void => { process.stderr.write(`${msg}\n`) }

// ─── throughput blocks ───────────────────────────────────────────────────────────────────────

interface ServerDef {
  label: string
  kind: ServerKind
  config?: object
  /** With `--before`, this server is run a second time on the before checkout's lib/. */
  compare?: boolean
  /** This is that second run (bench/.build-before). */
  before?: boolean
  /** URL path of the endpoint. */
  path?: string
  /** Whether this server talks to the private Redis (round trips are counted). */
  redis?: boolean
}

interface Block {
  scenario: Scenario
  title: string
  servers: ServerDef[]
  connections: number[]
  sessions?: Array<'one' | 'many'>
  /** Whether requests name a 2025-era session (opened per server before timing). */
  needsSession: boolean
  /**
   * What a request is about, opened per server before timing when there is one: a 2025-era
   * session (the default when `needsSession`), or a state handle. Bare routes get none.
   */
  open?: (url: string) => Promise<string>
  /** The request for a server (with the session id or handle when there is one). */
  request: (s: ServerDef, key: string | undefined) => RequestSpec
  /**
   * Counts the updates the server kept on these keys (state handles: no lost update): read before
   * and after every measured run, whose 2xx answers must equal the difference.
   */
  tally?: (url: string, keys: string[]) => Promise<number>
  /** Which servers' runs `tally` checks. */
  tallies?: (s: ServerDef) => boolean
  /** Throws unless the answer is the expected one. */
  validate: (s: ServerDef, answer: Awaited<ReturnType<typeof post>>) => void
}

interface Running { def: ServerDef, proc: ServerProcess, url: string }

/** With `--before`, each server marked `compare` gets a twin on the before checkout, right after it. */
function withBefore (defs: ServerDef[]): ServerDef[] {
  if (opts.before === undefined) return defs
  return defs.flatMap(d => d.compare === true ? [d, { ...d, label: `${d.label} @ before`, before: true, compare: false }] : [d])
}

async function startServers (defs: ServerDef[]): Promise<Running[]> {
  const out: Running[] = []
  for (const def of defs) {
    log(`  starting ${def.label}`)
    const proc = await ServerProcess.start(def.label, def.kind, def.config, { before: def.before })
    out.push({ def, proc, url: `${proc.url}${def.path ?? '/mcp'}` })
  }
  return out
}

async function stopAll (servers: Running[]): Promise<void> {
  await Promise.all(servers.map(async s => await s.proc.stop()))
}

async function runBlock (block: Block, redis: PrivateRedis | null): Promise<Row[]> {
  log(`\n== ${block.title}`)
  const servers = await startServers(withBefore(block.servers))
  const rows: Row[] = []
  try {
    for (const connections of block.connections) {
      // With one connection, one session and a session per connection are the same block.
      for (const sessions of connections === 1 && block.sessions !== undefined ? ['one' as const] : block.sessions ?? [undefined]) {
        const what = block.open === undefined ? 'session' : 'handle'
        const tag = `c=${connections}${sessions === undefined ? '' : `, ${sessions === 'one' ? `one ${what}` : `${what} per connection`}`}`
        // Sessions (or handles): one for all connections, or one per connection.
        const open = block.open ?? (block.needsSession ? openSession : undefined)
        const sids = new Map<Running, string[]>()
        for (const s of servers) {
          if (open === undefined || s.def.kind === 'bare') { sids.set(s, ['bare-has-no-session']); continue }
          const n = sessions === 'many' ? connections : 1
          const list: string[] = []
          for (let i = 0; i < n; i++) list.push(await open(s.url))
          sids.set(s, list)
        }
        // Validate every server's answer before timing.
        for (const s of servers) {
          const list = sids.get(s) as string[]
          block.validate(s.def, await post(s.url, block.request(s.def, list[0])))
        }
        const spec = (s: Running): Parameters<typeof load>[0] => {
          const list = sids.get(s) as string[]
          const req = block.request(s.def, list[0])
          return {
            url: s.url,
            headers: req.headers,
            body: req.body,
            connections,
            duration: opts.duration,
            perConnection: list.length > 1 ? (i) => block.request(s.def, list[i % list.length]) : undefined
          }
        }
        /**
         * Runs `load` and checks that every 2xx answer's update was kept (blocks with a `tally`);
         * `window` brackets the load alone (the tally's own requests stay out of the CPU window).
         */
        const counted = async (s: Running, spec: Parameters<typeof load>[0], window?: { start: () => Promise<void>, stop: () => Promise<void> }): Promise<LoadResult & { lost: number }> => {
          const keys = sids.get(s) as string[]
          const tally = block.tally !== undefined && block.tallies?.(s.def) === true ? block.tally : undefined
          const before = tally === undefined ? 0 : await tally(s.url, keys)
          await window?.start()
          const result = await load(spec)
          await window?.stop()
          // The server may have applied calls whose answers arrived after the run ended (at most one
          // per connection), never fewer than were answered 2xx.
          const kept = tally === undefined ? result.ok : await tally(s.url, keys) - before
          const lost = Math.max(0, result.ok - kept)
          if (lost > 0 || kept > result.ok + spec.connections) log(`  ${s.def.label}: ${lost} LOST UPDATES (${result.ok} answered 2xx, ${kept} kept)`)
          return { ...result, lost: kept > result.ok + spec.connections ? NaN : lost }
        }
        log(`  ${tag}: warm-up`)
        for (const s of servers) await counted(s, { ...spec(s), duration: opts.warmup })
        const perServer = new Map<Running, Array<{ load: LoadResult & { lost: number }, cpuUs: number, rss: number, otherCores: number, redisCommands?: number }>>()
        for (let round = 1; round <= opts.rounds; round++) {
          for (const s of servers) {
            let before = 0
            let after = 0
            let host0 = hostCpu()
            let host1 = host0
            let self0 = process.cpuUsage()
            let self = self0
            let cpu: Awaited<ReturnType<typeof s.proc.cpuStop>> | undefined
            const result = await counted(s, spec(s), {
              start: async () => {
                before = s.def.redis === true && redis !== null ? await redisCommandsProcessed(redis.client) : 0
                host0 = hostCpu()
                self0 = process.cpuUsage()
                await s.proc.cpuStart()
              },
              stop: async () => {
                cpu = await s.proc.cpuStop()
                self = process.cpuUsage(self0)
                host1 = hostCpu()
                after = s.def.redis === true && redis !== null ? await redisCommandsProcessed(redis.client) : 0
              }
            })
            if (cpu === undefined) throw new Error('no CPU window')
            const wall = cpu.wallMs / 1000
            // Cores busy with anything but this server and the load generator (Redis included).
            const otherCores = ((host1.busy - host0.busy) - (cpu.userUs + cpu.systemUs) / 1e6 - (self.user + self.system) / 1e6) / wall
            const entry = {
              load: result,
              cpuUs: cpu.userUs + cpu.systemUs,
              rss: cpu.rss,
              otherCores,
              redisCommands: s.def.redis === true ? (after - before - 1) / Math.max(1, result.ok) : undefined
            }
            const list = perServer.get(s) ?? []
            list.push(entry)
            perServer.set(s, list)
            const bad = result.non2xx + result.errors
            log(`  ${tag} round ${round} ${s.def.label}: ${result.reqPerSec.toFixed(0)} req/s, p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms, ` +
              `${(entry.cpuUs / Math.max(1, result.ok)).toFixed(0)} µs CPU/req (${(cpu.userUs / Math.max(1, result.ok)).toFixed(0)} user), other load ${otherCores.toFixed(2)} cores` +
              `${bad > 0 ? `, ${bad} FAILED ${JSON.stringify(result.statusCodes)}` : ''}`)
          }
        }
        if (profileDir !== undefined) {
          // One more (untimed) run per server under the V8 sampling profiler.
          for (const s of servers) {
            const file = join(profileDir, `${block.scenario}-c${connections}${sessions === undefined ? '' : `-${sessions}`}-${slug(s.def.label)}.cpuprofile`)
            await s.proc.profileStart()
            const result = await load(spec(s))
            await s.proc.profileStop(file)
            await writeFile(file.replace(/\.cpuprofile$/, '.json'), JSON.stringify({ server: s.def.label, scenario: block.scenario, connections, sessions, requests: result.ok, seconds: result.seconds, reqPerSec: result.reqPerSec }) + '\n')
            log(`  profile of ${s.def.label}: ${file} (${result.ok} requests)`)
          }
        }
        for (const [i, s] of servers.entries()) {
          const runs = perServer.get(s) ?? []
          const perRound = runs.map(r => ({
            reqPerSec: r.load.reqPerSec,
            p50: r.load.p50,
            p99: r.load.p99,
            cpuUsPerReq: r.cpuUs / Math.max(1, r.load.ok),
            rssMiB: r.rss / 2 ** 20,
            otherCores: r.otherCores
          }))
          const statusCodes: Record<string, number> = {}
          for (const r of runs) for (const [k, v] of Object.entries(r.load.statusCodes)) statusCodes[k] = (statusCodes[k] ?? 0) + v
          const row: Row = {
            scenario: block.scenario,
            title: block.title,
            connections,
            sessions,
            server: s.def.label,
            baseline: servers[0]?.def.label ?? '',
            isBaseline: i === 0,
            rounds: runs.length,
            reqPerSec: median(perRound.map(r => r.reqPerSec)),
            p50: median(perRound.map(r => r.p50)),
            p99: median(perRound.map(r => r.p99)),
            cpuUsPerReq: median(perRound.map(r => r.cpuUsPerReq)),
            rssMiB: median(perRound.map(r => r.rssMiB)),
            otherCores: median(perRound.map(r => r.otherCores)),
            failures: runs.reduce((a, r) => a + r.load.non2xx + r.load.errors, 0),
            lostUpdates: block.tallies?.(s.def) === true ? runs.reduce((a, r) => a + r.load.lost, 0) : undefined,
            statusCodes,
            ratio: { reqPerSec: NaN, p50: NaN, p99: NaN, cpuUsPerReq: NaN, rssMiB: NaN },
            perRound
          }
          if (s.def.redis === true && redis !== null) {
            row.redisCommands = median(runs.map(r => r.redisCommands ?? NaN))
            // Round trips, counted exactly: sequential requests under MONITOR (not timed).
            const n = 200
            const list = sids.get(s) as string[]
            const rt = await countRoundTrips(redis.url, async () => {
              for (let k = 0; k < n; k++) {
                const answer = await post(s.url, block.request(s.def, list[k % list.length]))
                block.validate(s.def, answer)
              }
            })
            row.redisRoundTrips = rt.total / n
            row.redisRoundTripsBy = Object.fromEntries(Object.entries(rt.byCommand).map(([k, v]) => [k, v / n]))
            log(`  ${tag} ${s.def.label}: ${row.redisRoundTrips} Redis round trips per request ${JSON.stringify(row.redisRoundTripsBy)}`)
          }
          rows.push(row)
        }
      }
    }
  } finally {
    await stopAll(servers)
  }
  return rows
}

// ─── scenario definitions ────────────────────────────────────────────────────────────────────

const echoArgs = { text: ECHO_TEXT }

function modernBlock (): Block {
  return {
    scenario: 'modern',
    title: 'modern tools/call (JSON)',
    connections: opts.connections,
    needsSession: false,
    servers: [
      { label: BARE, kind: 'bare' },
      { label: SDK_V2, kind: 'sdk-v2', config: { mode: 'json' } },
      { label: OURS_MEMORY, kind: 'ours', config: { store: 'memory' }, compare: true }
    ],
    request: () => modernCall('echo', echoArgs),
    validate: (s, answer) => expectToolResult(s.label, answer, { text: ECHO_TEXT })
  }
}

function sessionBlock (): Block {
  return {
    scenario: 'session',
    title: '2025-wire tools/call on a session',
    connections: opts.connections,
    needsSession: true,
    servers: [
      { label: BARE, kind: 'bare' },
      { label: SDK_V1, kind: 'sdk-v1' },
      { label: OURS_MEMORY, kind: 'ours', config: { store: 'memory' }, compare: true }
    ],
    request: (_s, sid) => legacyCall('echo', echoArgs, sid),
    validate: (s, answer) => expectToolResult(s.label, answer, { text: ECHO_TEXT })
  }
}

function tracingBlock (): Block {
  const ours = (tracing: string): object => ({ store: 'memory', lock: 'memory', tracing })
  return {
    scenario: 'tracing',
    title: 'telemetry cost: 2025-wire tools/call, memory store + lock',
    connections: opts.connections,
    needsSession: true,
    servers: [
      { label: TRACING_OFF, kind: 'ours', config: ours('off') },
      { label: TRACING_API, kind: 'ours', config: ours('api') },
      { label: TRACING_SDK_OFF, kind: 'ours', config: ours('sdk-off') },
      { label: TRACING_SDK, kind: 'ours', config: ours('sdk-noop') }
    ],
    request: (_s, sid) => legacyCall('echo', echoArgs, sid),
    validate: (s, answer) => expectToolResult(s.label, answer, { text: ECHO_TEXT })
  }
}

async function storesBlock (redis: PrivateRedis, dirs: string[], pgUrl: string): Promise<Block> {
  const dir = async (): Promise<string> => {
    const d = await mkdtemp(join(tmpdir(), 'mcp-bench-sessions-'))
    dirs.push(d)
    return d
  }
  return {
    scenario: 'stores',
    title: 'stores, 2025-wire tools/call',
    // One request at a time shows the CPU of the path itself; many, how it scales.
    connections: [...new Set([1, maxConnections])],
    sessions: opts.sessions,
    needsSession: true,
    servers: [
      { label: OURS_MEMORY, kind: 'ours', config: { store: 'memory' }, compare: true },
      { label: 'ours, memory store + memory lock', kind: 'ours', config: { store: 'memory', lock: 'memory' } },
      { label: 'ours, file store', kind: 'ours', config: { store: 'file', dir: await dir() } },
      { label: 'ours, file store + file lock', kind: 'ours', config: { store: 'file', lock: 'file', dir: await dir() } },
      { label: 'ours, Redis store', kind: 'ours', config: { store: 'redis', redisUrl: redis.url }, redis: true },
      { label: OURS_REDIS_LOCKED, kind: 'ours', config: { store: 'redis', lock: 'redis', redisUrl: redis.url }, redis: true, compare: true },
      { label: 'ours, PostgreSQL store', kind: 'ours', config: { store: 'postgres', pgUrl } },
      { label: 'ours, PostgreSQL store + PostgreSQL lock', kind: 'ours', config: { store: 'postgres', lock: 'postgres', pgUrl } }
    ],
    request: (_s, sid) => legacyCall('echo', echoArgs, sid),
    validate: (s, answer) => expectToolResult(s.label, answer, { text: ECHO_TEXT })
  }
}

/** The structured result of a bench `basket_*` tool (JSON answer). */
function structured (answer: Awaited<ReturnType<typeof post>>): Record<string, unknown> {
  const m = JSON.parse(answer.text) as { result?: { structuredContent?: Record<string, unknown>, isError?: boolean } }
  if (answer.status !== 200 || m.result?.structuredContent === undefined || m.result.isError === true) {
    throw new Error(`unexpected answer ${answer.status}: ${answer.text.slice(0, 300)}`)
  }
  return m.result.structuredContent
}

/**
 * State handles on the 2026-07-28 wire (issue 13): `basket_add` (read the basket's count, add one,
 * save) on one handle for every connection and on a handle per connection, against the same
 * server's handle-less `echo` (the baseline). Every run checks that the handles gained exactly one
 * item per 2xx answer.
 */
function handlesBlock (redis: PrivateRedis, pgUrl: string): Block {
  const redisConfig = { store: 'redis', lock: 'redis', redisUrl: redis.url }
  return {
    scenario: 'handles',
    title: 'state handles, 2026-wire tools/call',
    connections: [...new Set([1, maxConnections])],
    sessions: opts.sessions,
    needsSession: false,
    open: async (url) => {
      const id = structured(await post(url, modernCall('basket_create', {}))).basket
      if (typeof id !== 'string') throw new Error('basket_create returned no handle')
      return id
    },
    tally: async (url, keys) => {
      let total = 0
      for (const basket of new Set(keys)) total += Number(structured(await post(url, modernCall('basket_count', { basket }))).count)
      return total
    },
    tallies: (s) => s.label.includes('basket_add'),
    servers: [
      { label: 'ours, echo without a handle, Redis store + Redis lock', kind: 'ours', config: redisConfig, redis: true, compare: true },
      { label: 'ours, basket_add, memory store + memory lock', kind: 'ours', config: { store: 'memory', lock: 'memory' } },
      { label: HANDLES_REDIS, kind: 'ours', config: redisConfig, redis: true, compare: true },
      { label: 'ours, basket_add, PostgreSQL store + PostgreSQL lock', kind: 'ours', config: { store: 'postgres', lock: 'postgres', pgUrl } }
    ],
    request: (s, basket) => s.label.includes('basket_add')
      ? modernCall('basket_add', { basket, item: 'apple' })
      : modernCall('echo', echoArgs),
    validate: (s, answer) => expectToolResult(s.label, answer, { text: s.label.includes('basket_add') ? 'added' : ECHO_TEXT })
  }
}

function sseBlock (): Block {
  const steps = 10
  return {
    scenario: 'sse',
    title: `modern tools/call, SSE (${steps} progress notifications)`,
    connections: [maxConnections],
    needsSession: false,
    servers: [
      { label: BARE, kind: 'bare', path: '/sse' },
      { label: SDK_V2, kind: 'sdk-v2', config: { mode: 'auto' } },
      { label: OURS_MEMORY, kind: 'ours', config: { store: 'memory' }, compare: true }
    ],
    request: () => modernCall('progress', { steps }, { progressToken: 'p1' }),
    validate: (s, answer) => expectToolResult(s.label, answer, { text: `counted to ${steps}`, sse: true, progress: steps })
  }
}

// ─── parallel calls on one session ───────────────────────────────────────────────────────────

async function parallelScenario (redis: PrivateRedis | null, dirs: string[]): Promise<ParallelResult[]> {
  log('\n== parallel calls on one session, lock on')
  const variants: Array<{ variant: string, processes: number, config: () => Promise<object> }> = [
    { variant: 'memory store + memory lock, 1 process', processes: 1, config: async () => ({ store: 'memory', lock: 'memory' }) },
    {
      variant: 'file store + file lock, 2 processes',
      processes: 2,
      config: async () => {
        const d = await mkdtemp(join(tmpdir(), 'mcp-bench-sessions-'))
        dirs.push(d)
        return { store: 'file', lock: 'file', dir: d }
      }
    }
  ]
  if (redis !== null) variants.push({ variant: 'redis store + Redis lock, 2 processes', processes: 2, config: async () => ({ store: 'redis', lock: 'redis', redisUrl: redis.url }) })
  const out: ParallelResult[] = []
  const calls = opts.parallelCalls
  const handlerMs = opts.handlerMs
  for (const v of variants) {
    // Admit every call at once: the scenario measures the lock's queue, not the per-session bound
    // on open requests (`maxStreamsPerSession`, 64 by default), which would answer the calls past
    // it 429 in the one-process variant.
    const config = { ...await v.config(), maxStreamsPerSession: calls + 2 }
    const procs: ServerProcess[] = []
    try {
      for (let p = 0; p < v.processes; p++) procs.push(await ServerProcess.start(`${v.variant} #${p + 1}`, 'ours', config, {}))
      const urls = procs.map(p => `${p.url}/mcp`)
      const rounds: ParallelResult['perRound'] = []
      // One untimed round warms the servers (and the Redis scripts) up.
      for (let round = 0; round <= opts.rounds; round++) {
        const sid = await openSession(urls[0] as string)
        for (const u of urls) expectToolResult(u, await post(u, legacyCall('counter_get', {}, sid)), { text: '0' })
        const t0 = performance.now()
        const answers = await Promise.all(Array.from({ length: calls }, async (_, i) => {
          const a = await post(urls[i % urls.length] as string, legacyCall('counter_add', { delayMs: handlerMs }, sid, i + 1))
          return { ...a, at: performance.now() - t0, process: i % urls.length }
        }))
        const totalMs = performance.now() - t0
        const seen: number[] = []
        const order: Array<{ counter: number, at: number, process: number }> = []
        let status503 = 0
        let otherFailures = 0
        for (const a of answers) {
          if (a.status === 503) { status503++; continue }
          try {
            const text = (JSON.parse(a.text) as { result?: { content?: Array<{ text?: string }> } }).result?.content?.[0]?.text
            if (a.status !== 200 || text === undefined) throw new Error('bad answer')
            seen.push(Number(text))
            order.push({ counter: Number(text), at: a.at, process: a.process })
          } catch { otherFailures++ }
        }
        // Where the time goes: the gap between two consecutive holders' answers is one handler run
        // plus one lock handoff; split by whether the lock stayed in the process or moved.
        order.sort((a, b) => a.counter - b.counter)
        const same: number[] = []
        const moved: number[] = []
        for (let k = 1; k < order.length; k++) {
          const prev = order[k - 1] as typeof order[number]
          const cur = order[k] as typeof order[number]
          ;(cur.process === prev.process ? same : moved).push(cur.at - prev.at)
        }
        const mean = (xs: number[]): number => xs.length === 0 ? NaN : xs.reduce((x, y) => x + y, 0) / xs.length
        const handoffs = { sameProcess: same.length, sameGapMs: mean(same), crossProcess: moved.length, crossGapMs: mean(moved), firstAnswerMs: order[0]?.at ?? NaN }
        const final = await post(urls[0] as string, legacyCall('counter_get', {}, sid))
        const finalText = (JSON.parse(final.text) as { result?: { content?: Array<{ text?: string }> } }).result?.content?.[0]?.text
        seen.sort((a, b) => a - b)
        // No lost update: the answered calls saw 1, 2, … n in some order and the counter ends at n
        // (a refused call changes nothing; refusals are counted in their own columns).
        const serialized = seen.every((x, i) => x === i + 1) && finalText === String(seen.length)
        if (round === 0) { log(`  ${v.variant}: warm-up ${totalMs.toFixed(0)} ms`); continue }
        rounds.push({ totalMs, status503, otherFailures, serialized, handoffs })
        log(`  ${v.variant} round ${round}: ${totalMs.toFixed(0)} ms for ${calls} × ${handlerMs} ms (floor ${calls * handlerMs} ms), ${status503} × 503, ${otherFailures} other failures, ` +
          `counter ${String(finalText)}${serialized ? '' : ' LOST UPDATES'}; ` +
          `first answer after ${handoffs.firstAnswerMs.toFixed(1)} ms, ${handoffs.sameProcess} in-process handoffs of ${handoffs.sameGapMs.toFixed(1)} ms, ` +
            `${handoffs.crossProcess} cross-process of ${handoffs.crossGapMs.toFixed(1)} ms (answer to answer)`)
      }
      const totalMs = median(rounds.map(r => r.totalMs))
      out.push({
        variant: v.variant,
        processes: v.processes,
        calls,
        handlerMs,
        floorMs: calls * handlerMs,
        totalMs,
        ratio: totalMs / (calls * handlerMs),
        status503: rounds.reduce((a, r) => a + r.status503, 0),
        otherFailures: rounds.reduce((a, r) => a + r.otherFailures, 0),
        serialized: rounds.every(r => r.serialized),
        sameGapMs: median(rounds.map(r => r.handoffs.sameGapMs)),
        crossProcessHandoffs: median(rounds.map(r => r.handoffs.crossProcess)),
        crossGapMs: median(rounds.map(r => r.handoffs.crossGapMs)),
        perRound: rounds
      })
    } finally {
      await Promise.all(procs.map(async p => await p.stop()))
    }
  }
  return out
}

// ─── idle sessions ───────────────────────────────────────────────────────────────────────────

async function createSessions (url: string, n: number): Promise<number> {
  const init = initializeRequest()
  const t0 = performance.now()
  const r = await load({ url, headers: init.headers, body: init.body, connections: 10, duration: 0, amount: n })
  if (r.ok !== n) throw new Error(`creating ${n} sessions at ${url}: only ${r.ok} answered 2xx (${JSON.stringify(r.statusCodes)}, ${r.errors} errors)`)
  return (performance.now() - t0) / 1000
}

async function idleScenario (dirs: string[]): Promise<IdleResult[]> {
  log('\n== idle sessions')
  const n = opts.idleSessions
  const out: IdleResult[] = []
  const memoryCase = async (label: string, kind: ServerKind, config: object): Promise<void> => {
    const proc = await ServerProcess.start(label, kind, config, { exposeGc: true })
    try {
      // Validate the handshake, warm the path up (these sessions are ended again), then measure.
      const url = `${proc.url}/mcp`
      await openSession(url)
      const before = await proc.mem()
      if (!before.gcExposed) throw new Error('--expose-gc did not reach the server')
      const createSeconds = await createSessions(url, n)
      const after = await proc.mem()
      const count = await proc.admin<number | null>('sessions')
      out.push({
        server: label,
        sessions: n,
        createSeconds,
        heapBytesPerSession: (after.heapUsed + after.arrayBuffers - before.heapUsed - before.arrayBuffers) / n,
        rssBytesPerSession: (after.rss - before.rss) / n,
        note: `${String(count)} sessions held`
      })
      log(`  ${label}: ${out.at(-1)?.heapBytesPerSession?.toFixed(0)} heap B/session, ${out.at(-1)?.rssBytesPerSession?.toFixed(0)} RSS B/session (${String(count)} held)`)
    } finally {
      await proc.stop()
    }
  }
  await memoryCase(OURS_MEMORY, 'ours', { store: 'memory', max: n + 100 })
  await memoryCase(SDK_V1, 'sdk-v1', {})

  const dir = await mkdtemp(join(tmpdir(), 'mcp-bench-sessions-'))
  dirs.push(dir)
  const label = 'ours, file store'
  const proc = await ServerProcess.start(label, 'ours', { store: 'file', dir })
  try {
    const url = `${proc.url}/mcp`
    await openSession(url)
    const createSeconds = await createSessions(url, n)
    const scan = await proc.admin<{ ms: number, removed: number }>('store-gc')
    const aged = await proc.admin<number>('age-files')
    const removeAll = await proc.admin<{ ms: number, removed: number }>('store-gc')
    out.push({ server: label, sessions: n, createSeconds, gcScanMs: scan.ms, gcRemoveMs: removeAll.ms, gcRemoved: removeAll.removed, note: `${aged} files aged` })
    log(`  ${label}: gc() ${scan.ms.toFixed(0)} ms with none expired, ${removeAll.ms.toFixed(0)} ms removing ${removeAll.removed}`)
  } finally {
    await proc.stop()
  }
  return out
}

/** Where the generated block of docs/performance.md lies. */
function docsBlock (page: string): { start: number, end: number } {
  const start = page.indexOf(BLOCK_START)
  const end = page.indexOf(BLOCK_END)
  if (start === -1 || end < start) throw new Error(`--docs: ${DOCS_PAGE} has no ${BLOCK_START} … ${BLOCK_END} block to regenerate`)
  return { start, end }
}

// ─── main ────────────────────────────────────────────────────────────────────────────────────

async function main (): Promise<void> {
  const wants = (s: Scenario): boolean => opts.scenarios.includes(s)
  if (opts.scenarios.some(s => s !== 'capacity')) await table()
  if (wants('capacity')) await capacity()
}

/** Every scenario but capacity: the table of docs/performance.md. */
async function table (): Promise<void> {
  const started = performance.now()
  const wants = (s: Scenario): boolean => opts.scenarios.includes(s)
  const needsRedis = wants('stores') || wants('handles') || wants('parallel')
  const dirs: string[] = []
  let redis: PrivateRedis | null = null
  let database: BenchDatabase | null = null
  const results: Results = { meta: machine(), options: { ...opts, out: undefined }, rows: [], parallel: [], idle: [], targets: [] }
  if (opts.pin) results.meta.pinned = pinProcesses()
  if (profileDir !== undefined) await mkdir(profileDir, { recursive: true })
  if (opts.docs) docsBlock(await readFile(join(ROOT, DOCS_PAGE), 'utf8')) // fail before, not after, the run
  log(`compiled ${await buildServers()} files into bench/.build`)
  if (opts.before !== undefined) log(`compiled ${await buildServers(opts.before)} files of ${opts.before} into bench/.build-before`)
  try {
    if (needsRedis) {
      redis = await startRedis()
      log(`private redis-server on ${redis.url}`)
    }
    if (wants('stores') || wants('handles')) {
      database = await createBenchDatabase()
      log('PostgreSQL database of this run created')
    }
    const probe: MachineProbe = { windowMs: opts.duration * 1000, loopsPerSecond: [] }
    results.meta.probe = probe
    // The machine probed alone before the first block and after each one (see machine-probe.ts).
    // A probe that fails costs its note, not the run.
    const probed = async (): Promise<void> => {
      try {
        probe.loopsPerSecond.push(...(await probeMachine(PROBE_WINDOWS, probe.windowMs, pinToServerCpus)).loopsPerSecond)
      } catch (err) { log(`machine probe: ${(err as Error).message}`) }
    }
    const block = async (b: Block | Promise<Block>): Promise<void> => {
      results.rows.push(...await runBlock(await b, redis))
      await probed()
    }
    await probed()
    if (wants('modern')) await block(modernBlock())
    if (wants('session')) await block(sessionBlock())
    if (wants('stores') && redis !== null && database !== null) await block(storesBlock(redis, dirs, database.url))
    if (wants('handles') && redis !== null && database !== null) await block(handlesBlock(redis, database.url))
    if (wants('sse')) await block(sseBlock())
    if (wants('parallel')) results.parallel = await parallelScenario(redis, dirs)
    if (wants('idle')) results.idle = await idleScenario(dirs)
    if (wants('tracing')) await block(tracingBlock())
  } finally {
    await redis?.stop()
    await database?.drop()
    await Promise.all(dirs.map(async d => await rm(d, { recursive: true, force: true })))
  }
  addRatios(results.rows)
  results.targets = checkTargets(results)
  console.log(`\n${renderText(results)}\n`)
  await mkdir(opts.out, { recursive: true })
  const write = async (name: string, text: string): Promise<void> => {
    const path = join(opts.out, name)
    await writeFile(`${path}.tmp`, text)
    await rename(`${path}.tmp`, path)
  }
  const markdown = renderMarkdown(results)
  await write('results.json', JSON.stringify(results, null, 2) + '\n')
  await write('results.md', markdown)
  if (opts.docs) {
    const path = join(ROOT, DOCS_PAGE)
    const page = await readFile(path, 'utf8')
    const { start, end } = docsBlock(page)
    await writeFile(`${path}.tmp`, `${page.slice(0, start + BLOCK_START.length)}\n${markdown}${page.slice(end)}`)
    await rename(`${path}.tmp`, path)
    log(`regenerated the table of ${DOCS_PAGE}`)
  }
  log(`wrote ${join(opts.out, 'results.json')} and results.md in ${((performance.now() - started) / 1000).toFixed(0)} s`)
}

/** The capacity figures (bench/capacity.ts), in a process of their own: they start their own servers. */
async function capacity (): Promise<void> {
  log('\n== capacity (bench/capacity.ts)')
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bench', 'capacity.ts'), '--out', opts.out, ...(opts.docs ? ['--docs'] : [])],
    { cwd: ROOT, stdio: 'inherit' })
  const code = await new Promise<number | null>((resolve, reject) => { child.once('error', reject); child.once('exit', resolve) })
  if (code !== 0) throw new Error(`bench/capacity.ts exited with ${String(code)}`)
}

main().then(() => process.exit(0), (err: unknown) => {
  console.error(err)
  process.exit(1)
})
