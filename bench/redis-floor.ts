/**
 * The CPU floor of one Redis round trip, for the c=1 Redis rows (issue 14): what this process
 * spends, user and system time, on one command and its reply, one at a time against a private
 * redis-server on loopback TCP. Three clients, alternating in rounds:
 * - `raw`: a bare `net.Socket` writing `PING` and waiting for `+PONG` (no client library at all:
 *   what any Redis client must at least pay, most of it the kernel's socket work);
 * - `ioredis`: `await client.ping()` on an ioredis client with the plugin's options (no
 *   auto-pipelining, a command timeout);
 * - `evalsha`: ioredis running a small script with a key and 3 arguments, the shape of the
 *   plugin's lock and store calls.
 * The Redis lock + store path makes 2 round trips per request, so twice these figures is what it
 * pays before any of its own work; compare with the memory store's CPU per request in the bench.
 *
 *   npx tsx bench/redis-floor.ts [--n 20000] [--rounds 5]
 */
import net from 'node:net'
import { parseArgs } from 'node:util'
import { Redis } from 'ioredis'
import { startRedis } from './harness.js'

const { values: args } = parseArgs({ options: { n: { type: 'string', default: '20000' }, rounds: { type: 'string', default: '5' } } })
const N = Number(args.n)
const ROUNDS = Number(args.rounds)

type Client = () => Promise<void>

async function rawClient (port: number): Promise<{ call: Client, close: () => void }> {
  const socket = net.connect({ port, host: '127.0.0.1', noDelay: true })
  await new Promise<void>((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject) })
  let waiting: (() => void) | null = null
  socket.on('data', () => { const w = waiting; waiting = null; w?.() })
  const call = (): Promise<void> => new Promise<void>(resolve => { waiting = resolve; socket.write('PING\r\n') })
  return { call, close: () => socket.destroy() }
}

const SCRIPT = "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]); return ARGV[3]"

async function ioredisClients (url: string): Promise<{ ping: Client, evalsha: Client, close: () => void }> {
  const client = new Redis(url, { enableAutoPipelining: false, commandTimeout: 500, maxRetriesPerRequest: 1 })
  await client.ping()
  const sha = await client.script('LOAD', SCRIPT) as string
  return {
    ping: async () => { await client.ping() },
    evalsha: async () => { await client.evalsha(sha, 1, 'mcp:floor:key', 'owner-token-0123456789', '30000', 'ok') },
    close: () => client.disconnect()
  }
}

/** CPU µs (user, system) per call over N sequential calls. */
async function measure (call: Client): Promise<{ user: number, system: number }> {
  for (let i = 0; i < 1000; i++) await call()
  const t0 = process.cpuUsage()
  for (let i = 0; i < N; i++) await call()
  const c = process.cpuUsage(t0)
  return { user: c.user / N, system: c.system / N }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

const redis = await startRedis()
try {
  const raw = await rawClient(redis.port)
  const io = await ioredisClients(redis.url)
  const clients: Record<string, Client> = { raw: raw.call, ioredis: io.ping, evalsha: io.evalsha }
  const seen: Record<string, { user: number[], system: number[] }> = {}
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, call] of Object.entries(clients)) {
      const m = await measure(call)
      seen[name] ??= { user: [], system: [] }
      seen[name].user.push(m.user)
      seen[name].system.push(m.system)
    }
  }
  for (const [name, s] of Object.entries(seen)) {
    const user = median(s.user)
    const system = median(s.system)
    console.log(`${name.padEnd(8)} ${(user + system).toFixed(1)} µs CPU per round trip (${user.toFixed(1)} user, ${system.toFixed(1)} system)`)
  }
  raw.close()
  io.close()
} finally {
  await redis.stop()
}
