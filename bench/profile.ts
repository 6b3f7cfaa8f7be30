/**
 * Summarizes V8 CPU profiles written by `npm run bench -- --profile` (bench/results/profiles, one
 * untimed run per server and block under the sampling profiler): self and inclusive time per
 * function, and self time per file, as a share of busy time and in µs per request, so the cost of
 * the plugin's own request path (lib/) can be told from Fastify's, Node's and the kernel's.
 *
 *   npx tsx bench/profile.ts bench/results/profiles/<file>.cpuprofile [--top 40] [--filter lib/] [--callers name]
 *
 * `--callers name` adds, for each function whose name contains `name`, where its time comes from
 * (its callers, two frames up).
 */
import { readFile } from 'node:fs/promises'
import { parseArgs } from 'node:util'

interface CallFrame { functionName: string, url: string, lineNumber: number, columnNumber: number }
interface ProfileNode { id: number, callFrame: CallFrame, children?: number[] }
interface CpuProfile { nodes: ProfileNode[], startTime: number, endTime: number, samples: number[], timeDeltas: number[] }

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { top: { type: 'string', default: '35' }, filter: { type: 'string' }, callers: { type: 'string' } }
})
if (positionals.length === 0) {
  console.error('usage: npx tsx bench/profile.ts <file.cpuprofile> [--top N] [--filter substring]')
  process.exit(2)
}

const root = new URL('../', import.meta.url).href

function where (f: CallFrame): string {
  let url = f.url
  if (url.startsWith(root)) url = url.slice(root.length)
  url = url.replace(/^.*node_modules\//, 'node_modules/')
  return url === '' ? '(native)' : `${url}:${f.lineNumber + 1}`
}

function fileOf (f: CallFrame): string {
  let url = f.url
  if (url.startsWith(root)) url = url.slice(root.length)
  const nm = url.lastIndexOf('node_modules/')
  if (nm !== -1) {
    const rest = url.slice(nm + 'node_modules/'.length).split('/')
    return `node_modules/${rest[0]?.startsWith('@') === true ? `${rest[0]}/${rest[1] ?? ''}` : rest[0] ?? ''}`
  }
  if (url.startsWith('node:')) return 'node: (core)'
  return url === '' ? `(${f.functionName === '' ? 'native' : f.functionName})` : url
}

for (const path of positionals) {
  const profile = JSON.parse(await readFile(path, 'utf8')) as CpuProfile
  const byId = new Map<number, ProfileNode>()
  const parent = new Map<number, number>()
  for (const n of profile.nodes) {
    byId.set(n.id, n)
    for (const c of n.children ?? []) parent.set(c, n.id)
  }
  const key = (n: ProfileNode): string => `${n.callFrame.functionName === '' ? '(anonymous)' : n.callFrame.functionName}  ${where(n.callFrame)}`
  const self = new Map<string, number>()
  const total = new Map<string, number>()
  const files = new Map<string, number>()
  const callers = new Map<string, number>()
  const wanted = values.callers
  let all = 0
  let idle = 0
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i] ?? 0
    const leaf = byId.get(profile.samples[i] as number)
    if (leaf === undefined) continue
    const name = leaf.callFrame.functionName
    if (name === '(idle)') { idle += dt; continue }
    all += dt
    self.set(key(leaf), (self.get(key(leaf)) ?? 0) + dt)
    files.set(fileOf(leaf.callFrame), (files.get(fileOf(leaf.callFrame)) ?? 0) + dt)
    if (wanted !== undefined) {
      // Every frame of this sample whose function matches, with the two frames above it.
      for (let id: number | undefined = leaf.id; id !== undefined; id = parent.get(id)) {
        const n = byId.get(id) as ProfileNode
        if (!n.callFrame.functionName.includes(wanted)) continue
        const p1 = parent.get(id)
        const p2 = p1 === undefined ? undefined : parent.get(p1)
        const chain = [n, p1, p2].filter((x): x is number | ProfileNode => x !== undefined)
          .map(x => key(typeof x === 'number' ? byId.get(x) as ProfileNode : x)).join('  ←  ')
        callers.set(chain, (callers.get(chain) ?? 0) + dt)
        break
      }
    }
    const seen = new Set<string>()
    for (let id: number | undefined = leaf.id; id !== undefined; id = parent.get(id)) {
      const n = byId.get(id) as ProfileNode
      const k = key(n)
      if (seen.has(k)) continue
      seen.add(k)
      total.set(k, (total.get(k) ?? 0) + dt)
    }
  }
  // The driver writes `<name>.json` beside each profile with the requests answered meanwhile.
  const side = await readFile(path.replace(/\.cpuprofile$/, '.json'), 'utf8').then(t => JSON.parse(t) as { requests?: number }, () => ({ requests: undefined }))
  const requests = side.requests
  const pct = (x: number): string => `${(100 * x / all).toFixed(1).padStart(5)}%` +
    (requests === undefined ? '' : `  ${(x / requests).toFixed(2).padStart(7)} µs/req`)
  const top = Number(values.top)
  const filter = values.filter
  const rank = (m: Map<string, number>): Array<[string, number]> =>
    [...m].filter(([k]) => filter === undefined || k.includes(filter)).sort((a, b) => b[1] - a[1]).slice(0, top)
  console.log(`# ${path}\n  busy ${(all / 1000).toFixed(0)} ms, idle ${(idle / 1000).toFixed(0)} ms` +
    (requests === undefined ? '' : `, ${requests} requests: ${(all / requests).toFixed(1)} µs busy per request`) +
    ' (percentages are of busy time)\n')
  console.log('## self time by file')
  for (const [k, v] of rank(files)) console.log(`  ${pct(v)}  ${k}`)
  console.log('\n## self time by function')
  for (const [k, v] of rank(self)) console.log(`  ${pct(v)}  ${k}`)
  console.log('\n## inclusive time by function')
  for (const [k, v] of rank(total)) console.log(`  ${pct(v)}  ${k}`)
  if (wanted !== undefined) {
    console.log(`\n## callers of "${wanted}" (inclusive)`)
    for (const [k, v] of [...callers].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${pct(v)}  ${k}`)
  }
  console.log('')
}
