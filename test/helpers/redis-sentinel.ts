/**
 * A private Sentinel deployment per test file, all on loopback: a primary, a replica and three
 * sentinels (quorum 2) watching them under the master name `mymaster`. Every process runs
 * without persistence in a temp dir and is killed in teardown. Fault tests kill, pause (SIGSTOP)
 * and resume (SIGCONT) any server, restart a killed one, and ask the sentinels for a failover.
 *
 * `downAfterMs` is Sentinel's `down-after-milliseconds`: how long a silent primary stays in
 * office. Kept small (default 1000) so a failover takes a few seconds, not half a minute.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'

interface Teardown {
  teardown (fn: () => unknown): void
}

/** One redis-server or sentinel process. */
export interface RedisNode {
  readonly port: number
  readonly running: boolean
  /** Starts it (again) on the same port with the same arguments; resolves once it serves. */
  start (): Promise<void>
  /** SIGKILL, waits for the exit. */
  kill (): Promise<void>
  /** SIGSTOP: connections stay open, nothing is answered. */
  pause (): void
  /** SIGCONT. */
  resume (): void
}

export interface SentinelDeployment {
  readonly masterName: string
  /** The sentinels' addresses, as ioredis' `sentinels` option takes them. */
  readonly sentinels: Array<{ host: string, port: number }>
  /** `host:port,…` of the sentinels (the demo's MCP_REDIS_SENTINELS). */
  readonly sentinelList: string
  /** The two data servers, by the port they started on (index 0 started as the primary). */
  readonly servers: RedisNode[]
  readonly sentinelNodes: RedisNode[]
  /** The port of the server the sentinels name as primary now. */
  primaryPort (): Promise<number>
  /** The server the sentinels name as primary now, and the other one. */
  roles (): Promise<{ primary: RedisNode, replica: RedisNode }>
  /**
   * Asks a sentinel for a failover (SENTINEL FAILOVER) and waits until another primary is named
   * and serves writes, and the old one is a replica.
   */
  failover (): Promise<number>
  /** Waits until the sentinels name a primary other than `oldPort` that accepts writes; its port. */
  awaitPromotion (oldPort: number, timeoutMs?: number): Promise<number>
  /** Closes `server`'s links to its replicas (CLIENT KILL TYPE replica); a paused replica cannot reconnect. */
  dropReplicaLinks (server: RedisNode): Promise<void>
  /**
   * Waits until the sentinels know the replica and each other (a failover can be agreed on) and
   * the replica acknowledged every write of the primary so far.
   */
  awaitSettled (timeoutMs?: number): Promise<void>
}

const READY_TIMEOUT = 10_000

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

function redisNode (args: () => string[], port: number, readyLine: string, onExitHooks: Set<() => void>): RedisNode {
  let child: ChildProcess | undefined
  let paused = false
  const kill = (): void => { child?.kill('SIGKILL') }
  onExitHooks.add(kill)
  return {
    port,
    get running () { return child !== undefined },
    start: async () => {
      if (child !== undefined) throw new Error(`process on ${port} is already running`)
      const proc = spawn('redis-server', args(), { stdio: ['ignore', 'pipe', 'pipe'] })
      child = proc
      proc.once('exit', () => { if (child === proc) { child = undefined; paused = false } })
      await new Promise<void>((resolve, reject) => {
        let output = ''
        const timer = setTimeout(() => fail(new Error(`process on ${port} did not start in time:\n${output}`)), READY_TIMEOUT)
        const onData = (chunk: Buffer): void => {
          output += chunk.toString()
          if (output.includes(readyLine)) { cleanup(); resolve() }
        }
        const onExit = (code: number | null): void => fail(new Error(`process on ${port} exited (${code}):\n${output}`))
        const fail = (err: Error): void => { cleanup(); proc.kill('SIGKILL'); reject(err) }
        const cleanup = (): void => {
          clearTimeout(timer)
          proc.stdout.off('data', onData)
          proc.off('exit', onExit)
          proc.stdout.resume()
          proc.stderr.resume()
        }
        proc.stdout.on('data', onData)
        proc.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
        proc.once('exit', onExit)
      })
    },
    kill: async () => {
      const proc = child
      if (proc === undefined) return
      const exited = new Promise<void>(resolve => proc.once('exit', () => resolve()))
      if (paused) proc.kill('SIGCONT')
      proc.kill('SIGKILL')
      await exited
    },
    pause: () => {
      if (child === undefined) throw new Error(`process on ${port} is not running`)
      child.kill('SIGSTOP')
      paused = true
    },
    resume: () => {
      if (child === undefined) throw new Error(`process on ${port} is not running`)
      child.kill('SIGCONT')
      paused = false
    }
  }
}

async function until<T> (what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await probe().catch(() => undefined)
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

/** A short-lived client for one probe (never the plugin's). */
async function ask<T> (port: number, fn: (c: Redis) => Promise<T>): Promise<T> {
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, connectTimeout: 500, commandTimeout: 500, retryStrategy: () => null })
  c.on('error', () => {})
  try {
    await c.connect()
    return await fn(c)
  } finally {
    c.disconnect()
  }
}

/** Starts a primary, a replica and three sentinels (see the module doc), killed in teardown. */
export async function startSentinelDeployment (t: Teardown, options: { downAfterMs?: number } = {}): Promise<SentinelDeployment> {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' })
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error('redis-server was not found on PATH (sentinel mode is part of it): install redis-server.', { cause: probe.error })
  }
  const masterName = 'mymaster'
  const downAfter = options.downAfterMs ?? 1000
  const dir = await mkdtemp(join(tmpdir(), 'mcp-sentinel-'))
  const hooks = new Set<() => void>()
  const onExit = (): void => { for (const kill of hooks) kill() }
  process.on('exit', onExit)

  const [p0, p1, s0, s1, s2] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()])
  const base = (port: number): string[] => [
    '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--dir', dir, '--dbfilename', `dump-${port}.rdb`, '--daemonize', 'no', '--protected-mode', 'no', '--loglevel', 'notice',
    '--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0'
  ]
  const primary = redisNode(() => base(p0), p0, 'Ready to accept connections', hooks)
  // Started as a replica of the first; restarted later, it comes back as a primary of nothing
  // until a sentinel turns it into a replica of whoever is primary then.
  let replicaStarts = 0
  const replica = redisNode(() => replicaStarts++ === 0 ? [...base(p1), '--replicaof', '127.0.0.1', String(p0)] : base(p1),
    p1, 'Ready to accept connections', hooks)
  const sentinelNodes: RedisNode[] = []
  for (const port of [s0, s1, s2]) {
    const conf = join(dir, `sentinel-${port}.conf`)
    await writeFile(conf, [
      `port ${port}`, 'bind 127.0.0.1', 'protected-mode no', `dir ${dir}`,
      `sentinel monitor ${masterName} 127.0.0.1 ${p0} 2`,
      `sentinel down-after-milliseconds ${masterName} ${downAfter}`,
      `sentinel failover-timeout ${masterName} ${Math.max(3000, downAfter * 3)}`,
      `sentinel parallel-syncs ${masterName} 1`, ''
    ].join('\n'))
    sentinelNodes.push(redisNode(() => [conf, '--sentinel'], port, 'Sentinel ID is', hooks))
  }
  const servers = [primary, replica]

  t.teardown(async () => {
    await Promise.all([...sentinelNodes, ...servers].map(async n => { await n.kill() }))
    process.off('exit', onExit)
    await rm(dir, { recursive: true, force: true })
  })

  await primary.start()
  await replica.start()
  await until('the replica to sync', READY_TIMEOUT, async () =>
    await ask(p1, async c => (await c.info('replication')).includes('master_link_status:up') ? true : undefined))
  await Promise.all(sentinelNodes.map(async n => { await n.start() }))

  const primaryPort = async (): Promise<number> => {
    for (const s of sentinelNodes) {
      if (!s.running) continue
      const reply = await ask(s.port, async c => await c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', masterName) as [string, string] | null).catch(() => null)
      if (reply !== null) return Number(reply[1])
    }
    throw new Error('no sentinel answered')
  }
  const byPort = (port: number): RedisNode => servers.find(n => n.port === port) as RedisNode
  const awaitPromotion = async (oldPort: number, timeoutMs = 30_000): Promise<number> =>
    await until('a promotion', timeoutMs, async () => {
      const port = await primaryPort()
      if (port === oldPort) return undefined
      const role = await ask(port, async c => await c.call('ROLE') as [string])
      return role[0] === 'master' ? port : undefined
    })
  const awaitSettled = async (timeoutMs = 20_000): Promise<void> => {
    await until('the sentinels to know the replica and each other', timeoutMs, async () => {
      for (const s of sentinelNodes) {
        const ok = await ask(s.port, async c => {
          const master = await c.call('SENTINEL', 'MASTER', masterName) as string[]
          const field = (name: string): string => master[master.indexOf(name) + 1]
          const replicas = await c.call('SENTINEL', 'REPLICAS', masterName) as string[][]
          const up = replicas.filter(r => !String(r[r.indexOf('flags') + 1]).includes('down'))
          return Number(field('num-other-sentinels')) >= 2 && up.length >= 1 && field('flags') === 'master'
        })
        if (!ok) return undefined
      }
      // And the replica holds every write of the primary so far (a promotion then loses nothing).
      // (WAIT covers this client's last write, which comes after every earlier one.)
      const acknowledged = await ask(await primaryPort(), async c => {
        await c.set('sentinel-helper-probe', String(Date.now()))
        return Number(await c.call('WAIT', 1, 1000))
      })
      return acknowledged >= 1 ? true : undefined
    })
  }

  const deployment: SentinelDeployment = {
    masterName,
    sentinels: sentinelNodes.map(n => ({ host: '127.0.0.1', port: n.port })),
    sentinelList: sentinelNodes.map(n => `127.0.0.1:${n.port}`).join(','),
    servers,
    sentinelNodes,
    primaryPort,
    roles: async () => {
      const port = await primaryPort()
      return { primary: byPort(port), replica: servers.find(n => n.port !== port) as RedisNode }
    },
    failover: async () => {
      await awaitSettled()
      const old = await primaryPort()
      // A sentinel can abort a failover it started (seen once on a busy CI machine: no promotion
      // within 30 s): asked again, of the next sentinel, up to three times (an answer of
      // INPROG, a failover still running, is waited out the same way).
      let promoted: number | undefined
      for (let attempt = 0; promoted === undefined; attempt++) {
        const asked = ask(sentinelNodes[attempt % sentinelNodes.length].port, async c => await c.call('SENTINEL', 'FAILOVER', masterName))
        if (attempt === 0) await asked
        else await asked.catch(() => {})
        try {
          promoted = await awaitPromotion(old, 20_000)
        } catch (err) {
          if (attempt >= 2) throw err
        }
      }
      // Until the sentinels turn the old primary into a replica it still takes writes, which its
      // resync from the new primary then discards (the test that wants them lost does not wait).
      await until('the old primary to be demoted', 30_000, async () =>
        (await ask(old, async c => await c.call('ROLE') as [string]))[0] === 'slave' ? true : undefined)
      return promoted
    },
    awaitPromotion,
    awaitSettled,
    dropReplicaLinks: async (server) => {
      await ask(server.port, async c => await c.call('CLIENT', 'KILL', 'TYPE', 'replica'))
    }
  }
  return deployment
}
