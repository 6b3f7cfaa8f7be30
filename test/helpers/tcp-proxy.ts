/**
 * A TCP proxy in front of Redis or PostgreSQL that loses one reply on purpose: armed with a
 * marker (a string only the write under test carries, such as the item a save adds), it forwards
 * the client's bytes that carry it to the server — so the server runs the write and commits it —,
 * then swallows the server's answer to them and runs the trap: by default it cuts both connections
 * (the client sees its connection closed under the command: the outcome is unknown to it), or a
 * test's own action (SIGKILL the process waiting for that answer). Every other byte is forwarded
 * as it is, on every connection, before and after.
 */
import { connect, createServer, type Server, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'

interface Teardown {
  teardown (fn: () => unknown): void
}

export interface TcpProxy {
  readonly port: number
  /**
   * Arms the trap for the next client write carrying `marker`; resolves once the server's answer
   * to it was swallowed and `trap` ran (default: both connections cut).
   */
  arm (marker: string, trap?: () => void | Promise<void>): Promise<void>
  /** Connections accepted so far. */
  readonly accepted: number
}

/** Starts a proxy to `127.0.0.1:<targetPort>`, closed in teardown. */
export async function startTcpProxy (t: Teardown, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>()
  let armed: { marker: Buffer, trap: (() => void | Promise<void>) | undefined, done: () => void } | null = null
  let accepted = 0
  const server: Server = createServer(client => {
    accepted++
    const upstream = connect(targetPort, '127.0.0.1')
    sockets.add(client)
    sockets.add(upstream)
    let trapped: NonNullable<typeof armed> | null = null
    const cut = (): void => { client.destroy(); upstream.destroy() }
    client.on('data', chunk => {
      if (armed !== null && chunk.includes(armed.marker)) { trapped = armed; armed = null }
      upstream.write(chunk)
    })
    upstream.on('data', chunk => {
      if (trapped === null) { client.write(chunk); return }
      // The answer to the trapped write: swallowed, and the trap runs instead.
      const hit = trapped
      trapped = null
      const trap = hit.trap ?? cut
      void Promise.resolve(trap()).finally(() => { if (hit.trap !== undefined) cut(); hit.done() })
    })
    client.on('error', () => { upstream.destroy() })
    upstream.on('error', () => { client.destroy() })
    client.on('close', () => { upstream.destroy(); sockets.delete(client) })
    upstream.on('close', () => { client.destroy(); sockets.delete(upstream) })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    for (const s of sockets) s.destroy()
    await new Promise(resolve => server.close(resolve))
  })
  return {
    port: (server.address() as AddressInfo).port,
    get accepted () { return accepted },
    async arm (marker: string, trap?: () => void | Promise<void>): Promise<void> {
      await new Promise<void>(resolve => { armed = { marker: Buffer.from(marker), trap, done: resolve } })
    }
  }
}
