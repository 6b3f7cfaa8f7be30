/**
 * A private `redis-server` per test file: started on a free port in a temp dir, without
 * persistence, and killed in teardown. Fault tests stop, restart, pause (SIGSTOP) and resume
 * (SIGCONT) it.
 *
 * With `REDIS_URL` set, that server is used instead: no process is started, and the fault
 * controls throw (a fault test then fails, loudly, instead of silently testing nothing).
 * Without a `redis-server` binary on PATH the helper throws: Redis tests never skip.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** What a test gets (the subset of tap's Test we use, so any tap version fits). */
interface Teardown {
  teardown (fn: () => unknown): void
}

export interface RedisServer {
  /** `redis://127.0.0.1:<port>` (or `REDIS_URL`). */
  readonly url: string
  readonly port: number
  /** True when `REDIS_URL` is used: no fault injection possible. */
  readonly external: boolean
  /** Shuts the server down (SIGTERM) and waits for it to exit. */
  stop (): Promise<void>
  /** Starts it again on the same port and waits until it accepts connections. */
  start (): Promise<void>
  /** Freezes the server (SIGSTOP): connections stay open but nothing is answered. */
  pause (): void
  /** Thaws a paused server (SIGCONT). */
  resume (): void
  /** SIGKILLs the server and waits for it to exit. */
  kill (): Promise<void>
}

const READY_TIMEOUT = 10_000

/** Starts a private redis-server for this test (or returns `REDIS_URL`), stopped in teardown. */
export async function startRedisServer (t: Teardown): Promise<RedisServer> {
  const external = process.env.REDIS_URL
  if (external !== undefined && external !== '') return externalServer(external)

  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' })
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error('redis-server was not found on PATH. Install it (e.g. `apt-get install redis-server`) ' +
      'or set REDIS_URL to a Redis the tests may use.', { cause: probe.error })
  }

  const dir = await mkdtemp(join(tmpdir(), 'mcp-redis-'))
  const port = await freePort()
  let child: ChildProcess | undefined
  let paused = false

  // A crashed or killed test process must not leave servers behind.
  const onExit = (): void => { child?.kill('SIGKILL') }
  process.on('exit', onExit)

  const start = async (): Promise<void> => {
    if (child !== undefined) throw new Error('redis-server is already running')
    const proc = spawn('redis-server', [
      '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', dir, '--daemonize', 'no', '--protected-mode', 'no', '--loglevel', 'notice'
    ], { stdio: ['ignore', 'pipe', 'pipe'] })
    child = proc
    proc.once('exit', () => { if (child === proc) child = undefined })
    await new Promise<void>((resolve, reject) => {
      let output = ''
      const timer = setTimeout(() => fail(new Error(`redis-server did not start in time:\n${output}`)), READY_TIMEOUT)
      const onData = (chunk: Buffer): void => {
        output += chunk.toString()
        if (output.includes('Ready to accept connections')) {
          cleanup()
          resolve()
        }
      }
      const onExit = (code: number | null): void => fail(new Error(`redis-server exited (${code}):\n${output}`))
      const fail = (err: Error): void => {
        cleanup()
        proc.kill('SIGKILL')
        reject(err)
      }
      const cleanup = (): void => {
        clearTimeout(timer)
        proc.stdout.off('data', onData)
        proc.off('exit', onExit)
        // Keep draining the pipes so a chatty server never blocks on a full pipe.
        proc.stdout.resume()
        proc.stderr.resume()
      }
      proc.stdout.on('data', onData)
      proc.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
      proc.once('exit', onExit)
    })
  }

  const signalAndWait = async (signal: NodeJS.Signals): Promise<void> => {
    const proc = child
    if (proc === undefined) return
    const exited = new Promise<void>(resolve => proc.once('exit', () => resolve()))
    if (paused) {
      proc.kill('SIGCONT')
      paused = false
    }
    proc.kill(signal)
    await exited
  }

  await start()

  const server: RedisServer = {
    url: `redis://127.0.0.1:${port}`,
    port,
    external: false,
    stop: async () => { await signalAndWait('SIGTERM') },
    start,
    pause: () => {
      if (child === undefined) throw new Error('redis-server is not running')
      child.kill('SIGSTOP')
      paused = true
    },
    resume: () => {
      if (child === undefined) throw new Error('redis-server is not running')
      child.kill('SIGCONT')
      paused = false
    },
    kill: async () => { await signalAndWait('SIGKILL') }
  }

  t.teardown(async () => {
    await signalAndWait('SIGKILL')
    process.off('exit', onExit)
    await rm(dir, { recursive: true, force: true })
  })
  return server
}

function externalServer (url: string): RedisServer {
  const refuse = (): never => {
    throw new Error('REDIS_URL is set: this fault-injection test needs a private redis-server (unset REDIS_URL).')
  }
  return {
    url,
    port: Number(new URL(url).port || 6379),
    external: true,
    stop: async () => refuse(),
    start: async () => refuse(),
    pause: refuse,
    resume: refuse,
    kill: async () => refuse()
  }
}

async function freePort (): Promise<number> {
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
