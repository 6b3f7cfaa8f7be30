/**
 * The server side of the bench's process protocol, shared by every server kind. A server file
 * builds its Fastify app and calls `serve(app, admin)`: it listens on 127.0.0.1 on a port the OS
 * picks, reports `{ type: 'ready', port }` to the driver over the IPC channel and answers the
 * driver's admin messages there (never on the HTTP path being measured):
 *
 * - `cpu-start` / `cpu-stop`: `process.cpuUsage()` of this process over the measured window, and
 *   its RSS at the end of it;
 * - `mem`: `memoryUsage()` after two full GCs (needs `--expose-gc`);
 * - `prof-start` / `prof-stop`: the V8 sampling profiler (inspector) over a window, written as a
 *   `.cpuprofile` file;
 * - `admin`: a server-specific action (`admin[name](arg)`), e.g. timing the file store's `gc()`;
 * - `exit`: closes the app and exits.
 *
 * The process exits as well when the driver goes away (IPC disconnect).
 */
import { writeFile } from 'node:fs/promises'
import { Session } from 'node:inspector'
import type { FastifyInstance } from 'fastify'

/** The configuration the driver passes in `BENCH_SERVER` (JSON). */
export function config<T extends object> (): T {
  const raw = process.env.BENCH_SERVER
  return (raw === undefined || raw === '' ? {} : JSON.parse(raw)) as T
}

export type AdminActions = Record<string, (arg: unknown) => unknown>

interface DriverMessage { id: number, cmd: string, name?: string, arg?: unknown }

async function post (session: Session, method: string, params?: object): Promise<unknown> {
  return await new Promise((resolve, reject) => {
    session.post(method, params, (err, result) => { if (err !== null) reject(err); else resolve(result) })
  })
}

function collect (): void {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc !== undefined) { gc(); gc() }
}

export async function serve (app: FastifyInstance, admin: AdminActions = {}): Promise<void> {
  if (typeof process.send !== 'function') throw new Error('bench servers are started by bench/run.ts (IPC channel missing)')
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  let profiler: Session | null = null
  let cpuStart = process.cpuUsage()
  let wallStart = performance.now()

  const reply = (id: number, body: Record<string, unknown>): void => { process.send?.({ id, ...body }) }
  process.on('message', (raw: unknown) => {
    const m = raw as DriverMessage
    void (async () => {
      try {
        switch (m.cmd) {
          case 'cpu-start':
            cpuStart = process.cpuUsage()
            wallStart = performance.now()
            reply(m.id, { ok: true })
            break
          case 'cpu-stop': {
            const cpu = process.cpuUsage(cpuStart)
            const mem = process.memoryUsage()
            reply(m.id, { ok: true, userUs: cpu.user, systemUs: cpu.system, wallMs: performance.now() - wallStart, rss: mem.rss, heapUsed: mem.heapUsed })
            break
          }
          case 'mem': {
            collect()
            const mem = process.memoryUsage()
            reply(m.id, {
              ok: true,
              rss: mem.rss,
              heapUsed: mem.heapUsed,
              external: mem.external,
              arrayBuffers: mem.arrayBuffers,
              gcExposed: typeof (globalThis as { gc?: unknown }).gc === 'function'
            })
            break
          }
          case 'prof-start': {
            profiler = new Session()
            profiler.connect()
            await post(profiler, 'Profiler.enable')
            await post(profiler, 'Profiler.setSamplingInterval', { interval: Number(m.arg ?? 200) })
            await post(profiler, 'Profiler.start')
            reply(m.id, { ok: true })
            break
          }
          case 'prof-stop': {
            if (profiler === null) throw new Error('the profiler is not running')
            const { profile } = await post(profiler, 'Profiler.stop') as { profile: unknown }
            profiler.disconnect()
            profiler = null
            await writeFile(String(m.arg), JSON.stringify(profile))
            reply(m.id, { ok: true })
            break
          }
          case 'admin': {
            const action = admin[m.name ?? '']
            if (action === undefined) throw new Error(`no admin action ${String(m.name)}`)
            reply(m.id, { ok: true, value: await action(m.arg) })
            break
          }
          case 'exit':
            reply(m.id, { ok: true })
            await Promise.race([app.close(), new Promise(resolve => setTimeout(resolve, 3000).unref())])
            process.exit(0)
            break
          default:
            throw new Error(`unknown command ${m.cmd}`)
        }
      } catch (err) {
        reply(m.id, { ok: false, error: err instanceof Error ? err.message : String(err) })
      }
    })()
  })
  process.on('disconnect', () => { process.exit(0) })
  process.send({ type: 'ready', port })
}
