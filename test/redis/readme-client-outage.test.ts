/**
 * The Redis client the docs show fails fast and is quiet in an outage: with redis-server
 * stopped, an `initialize` against a plugin whose RedisSessionStore uses it is answered 503 within
 * about 2 s (ioredis' defaults took 73 s), and the process never writes ioredis' "Unhandled error
 * event" on stderr (the connection errors go to the app's logger, once per outage). The app runs
 * in a child process of its own so that its stderr is exactly what it printed.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { startRedisServer } from '../helpers/redis-server.js'

const ENTRY = fileURLToPath(new URL('./fixtures/readme-store-app.ts', import.meta.url))
const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

const INITIALIZE = JSON.stringify({
  jsonrpc: '2.0',
  id: 0,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'outage', version: '1' } }
})

/** POSTs an `initialize`; status 0 when no answer came within `timeoutMs`. */
async function initialize (url: string, timeoutMs = 5000): Promise<{ status: number, ms: number }> {
  const started = performance.now()
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
      body: INITIALIZE,
      signal: AbortSignal.timeout(timeoutMs)
    })
    await res.arrayBuffer()
    return { status: res.status, ms: performance.now() - started }
  } catch {
    return { status: 0, ms: performance.now() - started }
  }
}

t.test('README store client: 503 within ~2 s while Redis is down, and no "Unhandled error event" on stderr', async (t) => {
  const redis = await startRedisServer(t)
  const env: Record<string, string | undefined> = { ...process.env, REDIS_URL: redis.url }
  for (const key of Object.keys(env)) {
    if (key === 'NODE_V8_COVERAGE' || key === 'NODE_OPTIONS' || key.startsWith('_TAPJS_')) delete env[key]
  }
  const child = spawn(process.execPath, ['--import', 'tsx', ENTRY], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const exited = new Promise<void>(resolve => child.once('exit', () => resolve()))
  t.teardown(async () => { child.kill('SIGKILL'); await exited })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  let url: string | undefined
  for (let i = 0; i < 600 && url === undefined; i++) {
    const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)
    if (m !== null) url = `${m[1]}/mcp`
    else await sleep(50)
  }
  if (url === undefined) throw new Error(`the app did not start:\n${stdout}\n${stderr}`)

  t.equal((await initialize(url)).status, 200, 'Redis up: initialize works')

  await redis.stop()
  const down = await initialize(url)
  t.equal(down.status, 503, 'Redis down: 503')
  t.ok(down.ms < 2000, `answered in ${Math.round(down.ms)} ms`)
  // Let the client fail to reconnect a few times (it retries within a second), still answering fast.
  for (let i = 0; i < 3; i++) {
    await sleep(1000)
    const again = await initialize(url)
    t.ok(again.status === 503 && again.ms < 2000, `still 503 at once (${again.status}, ${Math.round(again.ms)} ms)`)
  }

  await redis.start()
  let back = 0
  for (let i = 0; i < 50 && back !== 200; i++) {
    back = (await initialize(url)).status
    if (back !== 200) await sleep(100)
  }
  t.equal(back, 200, 'Redis back: initialize works again')

  child.kill('SIGTERM')
  await exited
  t.notMatch(stderr, /Unhandled error event/, 'ioredis printed nothing on stderr')
  t.equal(stderr, '', 'nothing on stderr at all')
  const lines = stdout.split('\n').filter(l => l.startsWith('{')).map(l => JSON.parse(l) as { level: number, msg: string })
  t.equal(lines.filter(l => l.msg === 'redis connection error' && l.level === 40).length, 1, 'the outage logged once at warn')
  t.equal(lines.filter(l => l.msg === 'redis connection restored').length, 1, 'and its end once')
})
