/**
 * The requests a single-server measurement sends (bench/instructions.ts, bench/gc.ts): one kind of
 * request per connection, each answer validated, `connections` of them in flight at once.
 */
import { ECHO_TEXT, expectToolResult, legacyCall, modernCall, openSession, post, type RequestSpec } from './requests.js'

/** Progress notifications of the `sse` request. */
export const SSE_STEPS = 10

/** What the measured requests are. */
export interface LoadOptions {
  /**
   * `session` (2025 wire), `modern` (2026-07-28 wire), `sse` (a progress call answered on SSE),
   * `handle` (`basket_add` on a state handle), `record-small` / `record-1mib` (`blob_touch`, changing
   * one small key, on a session of 10 keys of 10 bytes / 16 keys of 64 KiB: the record-size rows).
   */
  request: string
  /** `ours` (bench/servers/ours.ts) or `bare` (the bare Fastify route). */
  server: 'ours' | 'bare'
  /** `session` only: a session per connection (`many`), or all on the first one (`one`). */
  sessions: 'one' | 'many'
}

/** The session records of the `record-*` requests: keys × characters each. */
const RECORDS: Record<string, { keys: number, bytes: number }> = {
  'record-small': { keys: 10, bytes: 10 },
  'record-1mib': { keys: 16, bytes: 65_536 }
}

/** One connection's request, where it goes and what its answer must be. */
export interface LoadSpec { spec: RequestSpec, url: string, want: Parameters<typeof expectToolResult>[2] }

/** The command-line options (`parseArgs`) that choose the load, `--connections` defaulting to `connections`. */
export function loadArgOptions (connections: number) {
  return {
    request: { type: 'string', default: 'session' },
    server: { type: 'string', default: 'ours' },
    connections: { type: 'string', default: String(connections) },
    sessions: { type: 'string', default: 'many' }
  } as const
}

/** The load those options chose, and its connection count; throws a message for the command line. */
export function loadFromArgs (args: { request: string, server: string, connections: string, sessions: string }): { load: LoadOptions, connections: number } {
  const connections = Number(args.connections)
  if (!Number.isInteger(connections) || connections < 1) throw new Error('--connections is a positive integer')
  if (args.sessions !== 'one' && args.sessions !== 'many') throw new Error('--sessions is one or many')
  if (args.server !== 'ours' && args.server !== 'bare') throw new Error('--server is ours or bare')
  if (args.server === 'bare' && args.request === 'handle') throw new Error('--server bare serves --request sse, modern or session')
  if (args.server === 'bare' && args.request in RECORDS) throw new Error('--server bare serves --request sse, modern or session')
  if (!['session', 'modern', 'sse', 'handle', ...Object.keys(RECORDS)].includes(args.request)) {
    throw new Error(`--request is session, modern, sse, handle or ${Object.keys(RECORDS).join(' or ')}`)
  }
  return { load: { request: args.request, server: args.server, sessions: args.sessions }, connections }
}

/**
 * The requests of `connections` connections to the server at `base` (`http://127.0.0.1:<port>`):
 * sessions and handles are opened here, before anything is measured.
 */
export async function loadSpecs (base: string, connections: number, o: LoadOptions): Promise<LoadSpec[]> {
  const specs: LoadSpec[] = []
  let firstSession: string | undefined
  for (let i = 0; i < connections; i++) {
    const url = `${base}/mcp`
    if (o.request === 'sse') {
      specs.push({
        spec: modernCall('progress', { steps: SSE_STEPS }, { progressToken: 'p1' }),
        url: o.server === 'bare' ? `${base}/sse` : url,
        want: { text: `counted to ${SSE_STEPS}`, sse: true, progress: SSE_STEPS }
      })
    } else if (o.request === 'modern') {
      specs.push({ spec: modernCall('echo', { text: ECHO_TEXT }), url, want: { text: ECHO_TEXT } })
    } else if (o.request === 'handle') {
      const created = await post(url, modernCall('basket_create', {}))
      const basket = (JSON.parse(created.text) as { result?: { structuredContent?: { basket?: unknown } } }).result?.structuredContent?.basket
      if (typeof basket !== 'string') throw new Error(`basket_create returned no handle: ${created.text.slice(0, 300)}`)
      specs.push({ spec: modernCall('basket_add', { basket, item: 'apple' }), url, want: { text: 'added' } })
    } else if (o.request in RECORDS) {
      const sid = await openSession(url)
      expectToolResult('server', await post(url, legacyCall('blob_fill', RECORDS[o.request] as Record<string, unknown>, sid, 2)), { text: 'filled' })
      specs.push({ spec: legacyCall('blob_touch', {}, sid, 3), url, want: { text: 'touched' } })
    } else {
      // The bare route answers the same fixed result to any body: the session id is only sent along.
      const sid = o.server === 'bare'
        ? 'bench-bare-session-0123456789abcdef'
        : i > 0 && o.sessions === 'one' ? firstSession as string : await openSession(url)
      firstSession ??= sid
      specs.push({ spec: legacyCall('echo', { text: ECHO_TEXT }, sid), url, want: { text: ECHO_TEXT } })
    }
  }
  return specs
}

/** Sends `count` requests, `specs.length` at a time (each connection its own request, one after another). */
export async function sendLoad (count: number, specs: LoadSpec[]): Promise<void> {
  let next = 0
  await Promise.all(specs.map(async ({ spec, url, want }) => {
    while (next < count) {
      next++
      expectToolResult('server', await post(url, spec), want)
    }
  }))
}
