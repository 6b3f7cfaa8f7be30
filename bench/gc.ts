/**
 * Allocation and garbage collection per request of one bench server, from V8's own trace of each
 * collection (`--trace-gc-nvp`): the bytes a request allocates, the bytes that live long enough to
 * be promoted, and the collector's time. The bytes are the code's (they moved by 1–4% between runs
 * of one tree on a machine whose CPU figures swung by half); the times are the machine's.
 *
 *   npx tsx bench/gc.ts --config '{"store":"redis","lock":"redis"}' [--connections 50] [--requests 20000]
 *   npx tsx bench/gc.ts --request modern --server bare
 *
 * The server (bench/servers/<server>.ts, compiled as `npm run bench` does) runs with
 * `--trace-gc-nvp`; after `--warmup` requests, `--requests` more are sent `--connections` at a time
 * (the requests of bench/load.ts, every answer validated) and the collections in between are summed
 * (bench/gc-trace.ts). A Redis config gets a private redis-server.
 */
import { fork } from 'node:child_process'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { buildServers } from './build.js'
import { parseGcTrace, summarizeGc } from './gc-trace.js'
import { ROOT, startRedis } from './harness.js'
import { loadArgOptions, loadFromArgs, loadSpecs, sendLoad } from './load.js'

const { values: args } = parseArgs({
  options: {
    config: { type: 'string', default: '{"store":"memory"}' },
    requests: { type: 'string', default: '20000' },
    warmup: { type: 'string', default: '6000' },
    ...loadArgOptions(50)
  }
})

const requests = Number(args.requests)
const warmup = Number(args.warmup)
const { load, connections } = loadFromArgs(args)
if (!Number.isInteger(requests) || requests < 1000) throw new Error('--requests is an integer of at least 1000 (a window needs several collections)')
const config = JSON.parse(args.config) as Record<string, unknown>

async function main (): Promise<void> {
  await buildServers()
  const redis = config.store === 'redis' || config.lock === 'redis' ? await startRedis() : null
  if (redis !== null) config.redisUrl = redis.url
  const child = fork(join(ROOT, 'bench', '.build', 'bench', 'servers', `${load.server}.js`), [], {
    cwd: ROOT,
    execArgv: ['--trace-gc-nvp'],
    env: { ...process.env, BENCH_SERVER: JSON.stringify(config) },
    stdio: ['ignore', 'pipe', 'inherit', 'ipc']
  })
  try {
    let trace = ''
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => { trace += chunk })
    const port = await new Promise<number>((resolve, reject) => {
      child.on('message', (m: { type?: string, port?: number }) => { if (m.type === 'ready') resolve(m.port as number) })
      child.once('exit', (code) => reject(new Error(`server exited ${String(code)}`)))
    })
    const specs = await loadSpecs(`http://127.0.0.1:${port}`, connections, load)
    await sendLoad(warmup, specs)
    const start = trace.length
    await sendLoad(requests, specs)
    // The trace is written by the server as it collects: what the window caused is out by now.
    await new Promise(resolve => setTimeout(resolve, 200))
    const events = parseGcTrace(trace.slice(start))
    console.log(JSON.stringify({
      config: args.config,
      server: load.server,
      request: load.request,
      requests,
      connections,
      sessions: load.sessions,
      ...summarizeGc(events, requests)
    }))
  } finally {
    child.kill('SIGKILL')
    await redis?.stop()
  }
}

main().then(() => process.exit(0), (err: unknown) => { console.error(err); process.exit(1) })
