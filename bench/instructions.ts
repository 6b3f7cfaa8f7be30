/**
 * Instructions per request of one bench server, counted by valgrind's callgrind: repeatable on a
 * busy machine where wall-clock CPU figures swing by half, so the way to compare one path before
 * and after a change. User-space instructions only (the kernel's share of a socket write is not in
 * them); JIT-compiled JavaScript is counted but not named.
 *
 *   npx tsx bench/instructions.ts --config '{"store":"redis","lock":"redis"}' [--requests 2000] [--before /work/main]
 *   npx tsx bench/instructions.ts --config '{"store":"memory"}' --request modern
 *   npx tsx bench/instructions.ts --config '{"store":"redis","lock":"redis"}' --request handle   (basket_add on a state handle)
 *
 * The server (bench/servers/ours.ts, compiled as `npm run bench` does) runs under
 * `valgrind --tool=callgrind`; after a warm-up of sequential requests the
 * counters are zeroed, `--requests` more are sent one at a time, and the dump's total is divided by
 * them. A Redis config gets a private redis-server.
 */
import { spawn, spawnSync } from 'node:child_process'
import { readFile, readdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { buildServers } from './build.js'
import { ROOT, startRedis } from './harness.js'
import { ECHO_TEXT, expectToolResult, legacyCall, modernCall, openSession, post, type RequestSpec } from './requests.js'

const { values: args } = parseArgs({
  options: {
    config: { type: 'string', default: '{"store":"memory"}' },
    requests: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '1500' },
    request: { type: 'string', default: 'session' },
    before: { type: 'string' }
  }
})

const requests = Number(args.requests)
const warmup = Number(args.warmup)
const config = JSON.parse(args.config) as Record<string, unknown>

async function main (): Promise<void> {
  await buildServers()
  if (args.before !== undefined) await buildServers(args.before)
  const redis = config.store === 'redis' || config.lock === 'redis' ? await startRedis() : null
  const dir = await mkdtemp(join(tmpdir(), 'mcp-callgrind-'))
  try {
    if (redis !== null) config.redisUrl = redis.url
    config.commandTimeout ??= 60_000
    const build = args.before === undefined ? '.build' : '.build-before'
    const child = spawn('valgrind', ['--tool=callgrind', '--smc-check=all-non-file',
      `--callgrind-out-file=${join(dir, 'cg.%p')}`, process.execPath, join(ROOT, 'bench', build, 'bench', 'servers', 'ours.js')], {
      cwd: ROOT,
      env: { ...process.env, BENCH_SERVER: JSON.stringify(config) },
      stdio: ['ignore', 'inherit', 'pipe', 'ipc']
    })
    child.stderr?.resume()
    const port = await new Promise<number>((resolve, reject) => {
      child.on('message', (m: { type?: string, port?: number }) => { if (m.type === 'ready') resolve(m.port as number) })
      child.once('exit', (code) => reject(new Error(`server exited ${String(code)}`)))
    })
    const url = `http://127.0.0.1:${port}/mcp`
    let spec: RequestSpec
    let expected = ECHO_TEXT
    if (args.request === 'modern') spec = modernCall('echo', { text: ECHO_TEXT })
    else if (args.request === 'handle') {
      // basket_add on one state handle (issue 13): the 2026 wire's locked path.
      const created = await post(url, modernCall('basket_create', {}))
      const basket = (JSON.parse(created.text) as { result?: { structuredContent?: { basket?: unknown } } }).result?.structuredContent?.basket
      if (typeof basket !== 'string') throw new Error(`basket_create returned no handle: ${created.text.slice(0, 300)}`)
      spec = modernCall('basket_add', { basket, item: 'apple' })
      expected = 'added'
    } else spec = legacyCall('echo', { text: ECHO_TEXT }, await openSession(url))
    for (let i = 0; i < warmup; i++) expectToolResult('server', await post(url, spec), { text: expected })
    const control = (flag: string): void => {
      const r = spawnSync('callgrind_control', [flag, String(child.pid)], { encoding: 'utf8' })
      if (r.status !== 0) throw new Error(`callgrind_control ${flag}: ${r.stderr}`)
    }
    control('--zero')
    for (let i = 0; i < requests; i++) expectToolResult('server', await post(url, spec), { text: expected })
    control('--dump=window')
    child.kill('SIGKILL')
    // The dump with the highest part number holds the measured window.
    const dumps = (await readdir(dir)).filter(f => f.startsWith('cg.'))
    let total = NaN
    for (const f of dumps) {
      const text = await readFile(join(dir, f), 'utf8')
      if (!text.includes('desc: Trigger: Client Request: window') && !/^desc: Trigger: .*window/m.test(text)) continue
      const m = /^summary:\s+(\d+)/m.exec(text) ?? /^totals:\s+(\d+)/m.exec(text)
      if (m !== null) total = Number(m[1])
    }
    console.log(JSON.stringify({ config: args.config, before: args.before ?? null, request: args.request, requests, instructionsPerRequest: Math.round(total / requests), dumps }))
  } finally {
    await redis?.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

main().then(() => process.exit(0), (err: unknown) => { console.error(err); process.exit(1) })
