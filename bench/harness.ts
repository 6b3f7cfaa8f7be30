/**
 * The driver's machinery: server processes (one per server, plain `node` on the compiled servers
 * of bench/.build, talked to over IPC), a private `redis-server`, the load generator (autocannon's programmatic
 * API, with latencies kept at full resolution) and Redis round-trip counting (MONITOR).
 */
import { fork, spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { availableParallelism, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'

export const ROOT = fileURLToPath(new URL('../', import.meta.url))
/** The compiled servers (see build.ts: `buildServers()` runs first); `before` servers run on another checkout's lib/. */
const serversDir = (before: boolean): string => join(ROOT, 'bench', before ? '.build-before' : '.build', 'bench', 'servers')

/**
 * CPU placement (Linux, 2 or more CPUs, `taskset` on PATH): the driver and its load generator on
 * CPU 0, every server on the other CPUs. Unpinned, the scheduler sometimes puts a server and the
 * load generator on one core and sometimes not, and the same server's CPU per request then swings
 * by a third from round to round; pinned, every server meets the same placement.
 */
export const PINNABLE = process.platform === 'linux' && availableParallelism() >= 2 &&
  spawnSync('taskset', ['-V'], { stdio: 'ignore' }).status === 0
const SERVER_CPUS = `1-${availableParallelism() - 1}`
let pinning = false

/** Pins this process (the load generator) to CPU 0 and servers started from now on to the others. */
export function pinProcesses (): boolean {
  if (!PINNABLE) return false
  pinning = taskset(process.pid, '0')
  return pinning
}

/** Moves a child process (all its threads) to the servers' CPUs when the bench pins (see {@link pinProcesses}). */
export function pinToServerCpus (pid: number | undefined): boolean {
  return pinning && taskset(pid, SERVER_CPUS)
}

function taskset (pid: number | undefined, cpus: string): boolean {
  if (pid === undefined) return false
  // -a: every thread of the process (libuv's pool and V8's helpers included).
  return spawnSync('taskset', ['-a', '-cp', cpus, String(pid)], { stdio: 'ignore' }).status === 0
}

export type ServerKind = 'bare' | 'ours' | 'sdk-v2' | 'sdk-v1'

export interface StartOptions {
  /** `--expose-gc` (memory measurements). */
  exposeGc?: boolean
  /** Run the server on the `--before` checkout's lib/ (bench/.build-before). */
  before?: boolean
}

export interface CpuWindow {
  userUs: number
  systemUs: number
  wallMs: number
  rss: number
  heapUsed: number
}

/** A running server process. */
export class ServerProcess {
  readonly label: string
  readonly kind: ServerKind
  readonly port: number
  readonly #child: ChildProcess
  #next = 1
  readonly #pending = new Map<number, { resolve: (v: Record<string, unknown>) => void, reject: (e: Error) => void }>()
  #exited = false
  readonly #exit: Promise<void>

  private constructor (label: string, kind: ServerKind, child: ChildProcess, port: number) {
    this.label = label
    this.kind = kind
    this.#child = child
    this.port = port
    this.#exit = new Promise(resolve => child.once('exit', () => {
      this.#exited = true
      for (const p of this.#pending.values()) p.reject(new Error(`server ${label} exited`))
      this.#pending.clear()
      resolve()
    }))
    child.on('message', (raw) => {
      const m = raw as { id?: number, ok?: boolean, error?: string }
      if (m.id === undefined) return
      const p = this.#pending.get(m.id)
      if (p === undefined) return
      this.#pending.delete(m.id)
      if (m.ok === true) p.resolve(m as Record<string, unknown>)
      else p.reject(new Error(`${label}: ${m.error ?? 'admin command failed'}`))
    })
  }

  get pid (): number { return this.#child.pid ?? -1 }
  get url (): string { return `http://127.0.0.1:${this.port}` }

  static async start (label: string, kind: ServerKind, config: object = {}, opts: StartOptions = {}): Promise<ServerProcess> {
    const execArgv: string[] = []
    if (opts.exposeGc === true) execArgv.push('--expose-gc')
    const child = fork(join(serversDir(opts.before === true), `${kind}.js`), [], {
      cwd: ROOT,
      execArgv,
      env: { ...process.env, BENCH_SERVER: JSON.stringify(config) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc']
    })
    liveChildren.add(child)
    child.once('exit', () => liveChildren.delete(child))
    // A forked child inherits the driver's CPU 0: move it (threads are still few before it is ready).
    pinToServerCpus(child.pid)
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`${label} did not start in 60 s`)) }, 60_000)
      child.on('message', function onReady (raw) {
        const m = raw as { type?: string, port?: number }
        if (m.type !== 'ready') return
        clearTimeout(timer)
        child.off('message', onReady)
        resolve(m.port as number)
      })
      child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${label} exited with ${String(code)} before it was ready`)) })
    })
    return new ServerProcess(label, kind, child, port)
  }

  async #send (cmd: string, extra: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    if (this.#exited) throw new Error(`server ${this.label} has exited`)
    const id = this.#next++
    return await new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject })
      this.#child.send({ id, cmd, ...extra })
    })
  }

  async cpuStart (): Promise<void> { await this.#send('cpu-start') }
  async cpuStop (): Promise<CpuWindow> { return await this.#send('cpu-stop') as unknown as CpuWindow }
  async mem (): Promise<{ rss: number, heapUsed: number, external: number, arrayBuffers: number, gcExposed: boolean }> {
    return await this.#send('mem') as never
  }

  /** Starts the V8 sampling profiler in the server (inspector), `intervalUs` between samples. */
  async profileStart (intervalUs = 200): Promise<void> { await this.#send('prof-start', { arg: intervalUs }) }
  /** Stops it and has the server write the `.cpuprofile` to `path`. */
  async profileStop (path: string): Promise<void> { await this.#send('prof-stop', { arg: path }) }

  async admin<T = unknown> (name: string, arg?: unknown): Promise<T> {
    return (await this.#send('admin', { name, arg })).value as T
  }

  /** Asks the server to close and exit (writes its CPU profile), SIGKILL after 10 s. */
  async stop (): Promise<void> {
    if (this.#exited) return
    const timer = setTimeout(() => this.#child.kill('SIGKILL'), 10_000)
    try { await this.#send('exit') } catch {}
    await this.#exit
    clearTimeout(timer)
  }
}

const liveChildren = new Set<ChildProcess>()
process.on('exit', () => { for (const c of liveChildren) c.kill('SIGKILL') })

export async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => {
        if (typeof address === 'object' && address !== null) resolve(address.port)
        else reject(new Error('no port'))
      })
    })
  })
}

// ─── Redis ───────────────────────────────────────────────────────────────────────────────────

export interface PrivateRedis {
  url: string
  port: number
  /** A plain client of the driver's own (INFO, FLUSHALL). */
  client: Redis
  stop (): Promise<void>
}

/** Starts a private `redis-server` (binary from PATH) on a free port, without persistence. */
export async function startRedis (): Promise<PrivateRedis> {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' })
  if (probe.error !== undefined || probe.status !== 0) throw new Error('redis-server was not found on PATH (needed by the Redis scenarios)')
  const dir = await mkdtemp(join(tmpdir(), 'mcp-bench-redis-'))
  const port = await freePort()
  const proc = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--dir', dir, '--daemonize', 'no', '--protected-mode', 'no', '--loglevel', 'warning'
  ], { stdio: ['ignore', 'pipe', 'pipe'] })
  liveChildren.add(proc)
  proc.once('exit', () => liveChildren.delete(proc))
  // Redis serves the server under test, not the load generator: it may run on any CPU.
  if (pinning) taskset(proc.pid, `0-${availableParallelism() - 1}`)
  proc.stdout.resume()
  proc.stderr.resume()
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: (n) => n > 50 ? null : 100 })
  const deadline = Date.now() + 10_000
  for (;;) {
    try { await client.connect(); await client.ping(); break } catch (err) {
      if (Date.now() > deadline) { proc.kill('SIGKILL'); throw new Error('private redis-server did not start', { cause: err }) }
      client.disconnect()
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    client,
    stop: async () => {
      client.disconnect()
      if (proc.exitCode === null) {
        const exited = new Promise(resolve => proc.once('exit', resolve))
        proc.kill('SIGTERM')
        await Promise.race([exited, new Promise(resolve => setTimeout(resolve, 5000))])
        if (proc.exitCode === null) proc.kill('SIGKILL')
      }
      await rm(dir, { recursive: true, force: true })
    }
  }
}

/** `total_commands_processed` (it counts the commands scripts run, too). */
export async function redisCommandsProcessed (client: Redis): Promise<number> {
  const info = await client.info('stats')
  const m = /total_commands_processed:(\d+)/.exec(info)
  return m === null ? 0 : Number(m[1])
}

/**
 * Counts the commands clients send to Redis (round trips; a script's own calls are not counted)
 * while `work` runs, by name, with MONITOR on a separate connection.
 */
export async function countRoundTrips (url: string, work: () => Promise<void>): Promise<{ total: number, byCommand: Record<string, number> }> {
  const monitorClient = new Redis(url)
  monitorClient.on('error', () => {})
  const monitor = await monitorClient.monitor()
  // ioredis' MONITOR parser can lose track under a flood of commands ("Command queue state
  // error"): the count is then incomplete, but the run must go on.
  monitor.on('error', () => {})
  const byCommand: Record<string, number> = {}
  let total = 0
  let counting = false
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (!counting || source === 'lua') return
    const name = String(args[0]).toLowerCase()
    byCommand[name] = (byCommand[name] ?? 0) + 1
    total++
  })
  // MONITOR output lags a little behind the commands: settle before and after.
  await new Promise(resolve => setTimeout(resolve, 100))
  counting = true
  try {
    await work()
    await new Promise(resolve => setTimeout(resolve, 300))
  } finally {
    counting = false
    monitor.disconnect()
    monitorClient.disconnect()
  }
  return { total, byCommand }
}

// ─── load ────────────────────────────────────────────────────────────────────────────────────

export interface LoadSpec {
  url: string
  headers: Record<string, string>
  body: string
  connections: number
  /** Seconds (ignored with `amount`). */
  duration: number
  /** Total requests instead of a duration. */
  amount?: number
  /**
   * Per-connection request (one session or one state handle per connection): its headers and
   * body; called once per connection.
   */
  perConnection?: (index: number) => { headers: Record<string, string>, body: string }
}

export interface LoadResult {
  requests: number
  ok: number
  non2xx: number
  errors: number
  timeouts: number
  seconds: number
  reqPerSec: number
  p50: number
  p99: number
  mean: number
  statusCodes: Record<string, number>
}

function percentile (sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p / 100 * sorted.length) - 1))
  return sorted[i] as number
}

/** One autocannon run; latencies of 2xx responses are kept at full (sub-ms) resolution. */
export async function load (spec: LoadSpec): Promise<LoadResult> {
  const latencies: number[] = []
  let index = 0
  const opts: autocannon.Options = {
    url: spec.url,
    method: 'POST',
    headers: spec.headers,
    body: spec.body,
    connections: spec.connections,
    pipelining: 1,
    timeout: 30
  }
  if (spec.amount !== undefined) opts.amount = spec.amount
  else opts.duration = spec.duration
  if (spec.perConnection !== undefined) {
    const per = spec.perConnection
    opts.setupClient = (client) => {
      const req = per(index++)
      client.setHeadersAndBody(req.headers, req.body)
    }
  }
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(opts, (err, res) => { if (err !== null && err !== undefined) reject(err); else resolve(res) })
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      if (statusCode >= 200 && statusCode < 300) latencies.push(responseTime)
    })
  })
  const sorted = Float64Array.from(latencies).sort()
  const sum = latencies.reduce((a, b) => a + b, 0)
  const statusCodes: Record<string, number> = {}
  for (const [code, v] of Object.entries(result.statusCodeStats ?? {})) statusCodes[code] = v.count ?? 0
  const ok = result['2xx']
  return {
    requests: result.requests.total,
    ok,
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    seconds: result.duration,
    reqPerSec: ok / result.duration,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    mean: latencies.length === 0 ? NaN : sum / latencies.length,
    statusCodes
  }
}

export function median (values: number[]): number {
  const v = values.filter(x => Number.isFinite(x)).sort((a, b) => a - b)
  if (v.length === 0) return NaN
  const mid = Math.floor(v.length / 2)
  return v.length % 2 === 1 ? v[mid] as number : ((v[mid - 1] as number) + (v[mid] as number)) / 2
}

/** Busy and total CPU time of the whole host so far, in seconds (Linux `/proc/stat`; zeros elsewhere). */
export function hostCpu (): { busy: number, total: number } {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? ''
    const f = line.trim().split(/\s+/).slice(1).map(Number)
    const idle = (f[3] ?? 0) + (f[4] ?? 0)
    const total = f.slice(0, 8).reduce((a, b) => a + b, 0)
    return { busy: (total - idle) / 100, total: total / 100 }
  } catch {
    return { busy: 0, total: 0 }
  }
}

export const sleep = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))
