/**
 * A private 3-master Redis Cluster per test file: three `redis-server --cluster-enabled yes` on
 * free ports in a temp dir (no persistence), joined with `redis-cli --cluster create … --cluster-replicas 0`,
 * ready once every node reports `cluster_state:ok`. Killed (and the temp dir removed) in teardown.
 *
 * Without `redis-server` or `redis-cli` on PATH the helper throws: cluster tests never skip.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sleep } from './time.js'

/** What a test gets (the subset of tap's Test we use). */
interface Teardown {
  teardown (fn: () => unknown): void
}

export interface ClusterNode { host: string, port: number }

export interface RedisCluster {
  /** The three masters (ioredis `new Cluster(nodes)` takes them as they are). */
  readonly nodes: ClusterNode[]
  /** SIGKILLs every node and removes the temp dir (also done in teardown). */
  stop (): Promise<void>
}

const READY_TIMEOUT = 20_000
const MASTERS = 3

function requireBinary (name: string): void {
  const probe = spawnSync(name, ['--version'], { encoding: 'utf8' })
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(`${name} was not found on PATH; the Redis Cluster tests need redis-server and redis-cli ` +
      '(e.g. `apt-get install redis-server`, which ships both).', { cause: probe.error })
  }
}

/** Starts a 3-master cluster for this test; stopped in teardown. */
export async function startRedisCluster (t: Teardown): Promise<RedisCluster> {
  requireBinary('redis-server')
  requireBinary('redis-cli')

  const dir = await mkdtemp(join(tmpdir(), 'mcp-redis-cluster-'))
  const children: ChildProcess[] = []
  const onExit = (): void => { for (const c of children) c.kill('SIGKILL') }
  process.on('exit', onExit)

  let stopped = false
  const stop = async (): Promise<void> => {
    if (stopped) return
    stopped = true
    await Promise.all(children.map(async (c) => {
      if (c.exitCode !== null || c.signalCode !== null) return
      const exited = new Promise<void>(resolve => c.once('exit', () => resolve()))
      c.kill('SIGKILL')
      await exited
    }))
    process.off('exit', onExit)
    await rm(dir, { recursive: true, force: true })
  }
  t.teardown(stop)

  try {
    const ports = await freePorts(MASTERS)
    await Promise.all(ports.map(async (port, i) => {
      children.push(await startNode(dir, port, i))
    }))
    const nodes = ports.map(port => ({ host: '127.0.0.1', port }))
    const create = await run('redis-cli', ['--cluster', 'create', ...nodes.map(n => `${n.host}:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'])
    if (create.code !== 0) throw new Error(`redis-cli --cluster create failed (${String(create.code)}):\n${create.output}`)
    await waitClusterOk(nodes)
    return { nodes, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

async function startNode (dir: string, port: number, index: number): Promise<ChildProcess> {
  const proc = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--cluster-enabled', 'yes',
    '--cluster-config-file', join(dir, `nodes-${index}.conf`), '--cluster-node-timeout', '2000',
    '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no', '--protected-mode', 'no',
    '--loglevel', 'notice'
  ], { stdio: ['ignore', 'pipe', 'pipe'] })
  await new Promise<void>((resolve, reject) => {
    let output = ''
    const timer = setTimeout(() => fail(new Error(`redis-server (cluster node ${port}) did not start in time:\n${output}`)), READY_TIMEOUT)
    const onData = (chunk: Buffer): void => {
      output += chunk.toString()
      if (output.includes('Ready to accept connections')) { cleanup(); resolve() }
    }
    const onExit = (code: number | null): void => fail(new Error(`redis-server (cluster node ${port}) exited (${String(code)}):\n${output}`))
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
  return proc
}

async function run (cmd: string, args: string[]): Promise<{ code: number | null, output: string }> {
  return await new Promise((resolve, reject) => {
    const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    proc.stdout.on('data', (c: Buffer) => { output += c.toString() })
    proc.stderr.on('data', (c: Buffer) => { output += c.toString() })
    proc.once('error', reject)
    proc.once('close', (code) => resolve({ code, output }))
  })
}

/** Waits until every node says `cluster_state:ok` (slots assigned and the gossip settled). */
async function waitClusterOk (nodes: ClusterNode[]): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT
  let last = ''
  for (;;) {
    const infos = await Promise.all(nodes.map(async n => await run('redis-cli', ['-h', n.host, '-p', String(n.port), 'cluster', 'info'])))
    if (infos.every(i => i.output.includes('cluster_state:ok'))) return
    last = infos.map((i, k) => `${nodes[k].port}: ${i.output.split('\n').find(l => l.startsWith('cluster_state')) ?? i.output}`).join('\n')
    if (Date.now() > deadline) throw new Error(`the Redis Cluster did not reach cluster_state:ok in ${READY_TIMEOUT} ms:\n${last}`)
    await sleep(100)
  }
}

/**
 * Free ports for the nodes. A cluster node also listens on port + 10000 (the cluster bus), so
 * that one must be free as well (and fit in 16 bits).
 */
async function freePorts (n: number): Promise<number[]> {
  const ports: number[] = []
  while (ports.length < n) {
    const port = await freePort(0)
    if (port + 10000 > 65535 || ports.includes(port)) continue
    if (!await isFree(port + 10000)) continue
    ports.push(port)
  }
  return ports
}

async function isFree (port: number): Promise<boolean> {
  try { await freePort(port); return true } catch { return false }
}

async function freePort (port: number): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => {
        if (typeof address === 'object' && address !== null) resolve(address.port)
        else reject(new Error('no port'))
      })
    })
  })
}
