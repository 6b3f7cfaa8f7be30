/**
 * Instructions per request of one bench server, counted by valgrind's callgrind: repeatable on a
 * busy machine where wall-clock CPU figures swing by half, so the way to compare one path before
 * and after a change. User-space instructions only (the kernel's share of a socket write is not in
 * them); JIT-compiled JavaScript is counted but not named.
 *
 *   npx tsx bench/instructions.ts --config '{"store":"redis","lock":"redis"}' [--requests 2000] [--before /work/main]
 *   npx tsx bench/instructions.ts --config '{"store":"memory"}' --request modern
 *   npx tsx bench/instructions.ts --request sse [--server bare] [--keep cg.out]
 *
 * `--request sse` is the sse scenario's request (a 2026-07-28 `progress` call with 10 progress
 * notifications, answered on SSE); `--server bare` runs bench/servers/bare.ts instead, whose
 * `POST /sse` writes the same events straight to the socket (the ceiling), and whose `POST /mcp`
 * answers the JSON requests (`modern`, `session`) with a fixed result. `--keep` copies the
 * window's dump for `callgrind_annotate`. `--request handle` is `basket_add` on one state handle
 * (the 2026 wire's locked path; use it with a Redis store and lock). `--request record-small` and
 * `--request record-1mib` are `blob_touch` (one small key changed) on a session of 10 keys of 10 bytes
 * and of 16 keys of 64 KiB: how a request's cost grows with its record.
 *
 * `--connections N` keeps N requests in flight at once (warm-up and window alike; fetch's pool
 * opens a connection for each), as the bench's c=50 rows do: what only concurrency costs (more
 * live sessions, timers, GC of objects that survive while others run) shows up per request. `--request session` then opens a session per
 * connection unless `--sessions one` (all connections on one session, the bench's "one session").
 *
 * The server (bench/servers/ours.ts, compiled as `npm run bench` does) runs under
 * `valgrind --tool=callgrind`; after a warm-up of `--warmup` requests the
 * counters are zeroed, `--requests` more are sent (one at a time, or `--connections` at a time),
 * and the dump's total is divided by them (`instructionsPerRequest`: every thread; `mainThreadPerRequest`: the thread that runs the
 * JavaScript, steadier from run to run). A Redis config gets a private redis-server. `--keep`
 * copies the main thread's dump. `slowLiteralsPerRequest` flags a run whose count is not the
 * code's (see `SLOW_LITERAL` in bench/callgrind-dump.ts): anything above 0, run it again.
 */
import { spawn, spawnSync } from 'node:child_process'
import { copyFile, readFile, readdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { buildServers } from './build.js'
import { callsTo, SLOW_LITERAL } from './callgrind-dump.js'
import { ROOT, startRedis } from './harness.js'
import { loadArgOptions, loadFromArgs, loadSpecs, sendLoad } from './load.js'

const { values: args } = parseArgs({
  options: {
    config: { type: 'string', default: '{"store":"memory"}' },
    requests: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '1500' },
    before: { type: 'string' },
    keep: { type: 'string' },
    ...loadArgOptions(1)
  }
})

const requests = Number(args.requests)
const warmup = Number(args.warmup)
const config = JSON.parse(args.config) as Record<string, unknown>
const { load, connections } = loadFromArgs(args)

async function main (): Promise<void> {
  await buildServers()
  if (args.before !== undefined) await buildServers(args.before)
  const redis = config.store === 'redis' || config.lock === 'redis' ? await startRedis() : null
  const dir = await mkdtemp(join(tmpdir(), 'mcp-callgrind-'))
  try {
    if (redis !== null) config.redisUrl = redis.url
    config.commandTimeout ??= 60_000
    const build = args.before === undefined ? '.build' : '.build-before'
    const child = spawn('valgrind', ['--tool=callgrind', '--smc-check=all-non-file', '--separate-threads=yes',
      `--callgrind-out-file=${join(dir, 'cg.%p')}`, process.execPath, join(ROOT, 'bench', build, 'bench', 'servers', `${args.server}.js`)], {
      cwd: ROOT,
      env: { ...process.env, BENCH_SERVER: JSON.stringify(config) },
      stdio: ['ignore', 'inherit', 'pipe', 'ipc']
    })
    child.stderr?.resume()
    const port = await new Promise<number>((resolve, reject) => {
      child.on('message', (m: { type?: string, port?: number }) => { if (m.type === 'ready') resolve(m.port as number) })
      child.once('exit', (code) => reject(new Error(`server exited ${String(code)}`)))
    })
    const specs = await loadSpecs(`http://127.0.0.1:${port}`, connections, load)
    await sendLoad(warmup, specs)
    const control = (flag: string): void => {
      const r = spawnSync('callgrind_control', [flag, String(child.pid)], { encoding: 'utf8' })
      if (r.status !== 0) throw new Error(`callgrind_control ${flag}: ${r.stderr}`)
    }
    control('--zero')
    await sendLoad(requests, specs)
    control('--dump=window')
    child.kill('SIGKILL')
    // One dump per thread (`cg.<pid>.<part>-<thread>`): the window's are those triggered by it.
    // Thread 1 runs the JavaScript; the others are V8's background compiler and GC helpers, whose
    // share still moves with how far optimization got in the warm-up.
    const dumps = (await readdir(dir)).filter(f => f.startsWith('cg.'))
    let total = 0
    let main = NaN
    let slowLiterals = NaN
    for (const f of dumps) {
      const text = await readFile(join(dir, f), 'utf8')
      if (!/^desc: Trigger: .*window/m.test(text)) continue
      const m = /^summary:\s+(\d+)/m.exec(text) ?? /^totals:\s+(\d+)/m.exec(text)
      if (m === null) continue
      total += Number(m[1])
      if (/-0*1$/.test(f)) {
        main = Number(m[1])
        slowLiterals = callsTo(text, SLOW_LITERAL) / requests
        if (args.keep !== undefined) await copyFile(join(dir, f), args.keep)
      }
    }
    console.log(JSON.stringify({
      config: args.config,
      server: args.server,
      before: args.before ?? null,
      request: args.request,
      requests,
      connections,
      sessions: args.sessions,
      instructionsPerRequest: Math.round(total / requests),
      mainThreadPerRequest: Math.round(main / requests),
      slowLiteralsPerRequest: slowLiterals
    }))
    if (slowLiterals > 0) {
      console.error(`instructions: this run called V8's runtime for ${slowLiterals} object-literal keys per request (Node's nextTick ` +
        'in its slow state, see bench/callgrind-dump.ts), ~1.3k instructions each that a normal run does not spend. Run it again.')
    }
  } finally {
    await redis?.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

main().then(() => process.exit(0), (err: unknown) => { console.error(err); process.exit(1) })
