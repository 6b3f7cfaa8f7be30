/**
 * SIGTERM reaches the server the way the docs start it. `npm start` runs the demo as one node
 * process (`node --import tsx examples/server.ts`, no wrapper in between); started that way and
 * sent SIGTERM, the demo drains: the call running finishes with its result, the drain is logged,
 * the process exits 0. npm itself does not pass on a SIGTERM sent to its own pid (the server would
 * outlive it, keeping its port), so the docs start background instances with the node command; a
 * terminal's Ctrl-C signals npm's whole process group, which the last test does.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { initialize, send } from '../helpers/http-client.js'
import { SseReader } from '../helpers/sse.js'
import { until } from '../helpers/time.js'
import { newId } from '../helpers/wire.js'

t.setTimeout(120_000)

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
/** The command the docs give for a server that must receive signals. */
const DOCUMENTED = 'node --import tsx examples/server.ts'

interface Started { child: ChildProcess, url: string, logs: Array<Record<string, any>>, exit: Promise<number | null>, direct: boolean }

/** Starts `command args` in the repository (PORT=0), resolves once it listens. */
async function start (t: Test, command: string, args: string[], o: { group?: boolean } = {}): Promise<Started> {
  const env: Record<string, string | undefined> = { ...process.env, PORT: '0', HOST: '127.0.0.1', MCP_DRAIN_TIMEOUT_MS: '30000' }
  for (const key of Object.keys(env)) if (key === 'NODE_OPTIONS' || key === 'NODE_V8_COVERAGE' || key.startsWith('_TAPJS_')) delete env[key]
  const child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: o.group === true })
  const exit = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)))
  t.teardown(async () => {
    try { if (o.group === true) process.kill(-child.pid!, 'SIGKILL'); else child.kill('SIGKILL') } catch {}
    await exit
  })
  const logs: Array<Record<string, any>> = []
  let buffered = ''
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => { stderr += String(chunk) })
  child.stdout!.on('data', (chunk: Buffer) => {
    buffered += String(chunk)
    let i
    while ((i = buffered.indexOf('\n')) !== -1) {
      const text = buffered.slice(0, i)
      buffered = buffered.slice(i + 1)
      try { logs.push(JSON.parse(text)) } catch { logs.push({ msg: text }) }
    }
  })
  let url = ''
  await until(() => {
    const m = logs.map(l => /^Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(String(l.msg))).find(x => x !== null)
    if (m != null) url = `${m[1]}/mcp`
    if (child.exitCode !== null) throw new Error(`exited before listening: ${stderr}`)
    return url !== ''
  }, { timeout: 60_000, what: `${command} to listen` })
  return { child, url, logs, exit, direct: o.group !== true }
}

/** Starts a streaming call, signals once its first progress arrived, and checks the drain. */
async function drainsOn (t: Test, s: Started, kill: () => void): Promise<void> {
  const session = await initialize(s.url)
  const id = newId()
  const res = await send(s.url, { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'slow_count', arguments: { steps: 8, intervalMs: 150 }, _meta: { progressToken: 'p' } } }, session)
  const sse = new SseReader(res, { timeout: 30_000 })
  await sse.waitForMessage(m => m.method === 'notifications/progress')
  kill()
  await until(() => s.logs.some(l => String(l.msg).startsWith('draining')), { timeout: 30_000, what: 'the drain to be logged' })
  await sse.waitClosed()
  t.match(sse.messages.at(-1), { id, result: { content: [{ type: 'text' }] } }, 'the running call finished with its result')
  const code = await s.exit
  if (s.direct) t.equal(code, 0, 'the server exited 0 after the drain')
  // npm reports the interrupt in its own exit code; what matters is that the server let go of its port.
  await until(async () => await fetch(s.url, { method: 'POST' }).then(() => false, () => true), { timeout: 30_000, what: 'the port to close' })
  t.pass('the port is closed: no server left behind')
}

t.test('npm start runs the documented command: one node process, nothing in between', async t => {
  const pkg = JSON.parse(readFileSync(`${ROOT}/package.json`, 'utf8')) as { scripts: Record<string, string> }
  t.equal(pkg.scripts.start, DOCUMENTED)
  for (const page of ['README.md', 'docs/many-instances.md']) {
    const text = readFileSync(`${ROOT}/${page}`, 'utf8')
    t.ok(text.includes(DOCUMENTED), `${page} shows it`)
    t.notOk(/^\s*(\w+=\S+\s+)*npm start &/m.test(text), `${page} does not background npm start (a SIGTERM to npm would not reach the server)`)
  }
})

t.test(`SIGTERM to \`${DOCUMENTED}\` drains: the running call finishes, the process exits 0`, async t => {
  const [, ...args] = DOCUMENTED.split(' ')
  const s = await start(t, process.execPath, args)
  await drainsOn(t, s, () => { s.child.kill('SIGTERM') })
})

t.test('npm start in a terminal: Ctrl-C (SIGINT to its process group) drains too', async t => {
  const s = await start(t, 'npm', ['start', '--silent'], { group: true })
  await drainsOn(t, s, () => { process.kill(-s.child.pid!, 'SIGINT') })
})
