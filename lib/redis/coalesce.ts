/**
 * One socket write per tick for the commands of a client the plugin makes, without ioredis'
 * auto-pipelining.
 *
 * Auto-pipelining builds a Pipeline object per batch and defers it with setImmediate: with one
 * request at a time every batch holds a single command, and that machinery cost more CPU than the
 * rest of the Redis path. Corking the socket on the first command of a tick and uncorking it on
 * the next tick keeps what auto-pipelining was for (under load, the commands of many requests go
 * out in one write) at the cost of one `process.nextTick` per tick that sends anything.
 *
 * Reconnection: ioredis makes a new socket (`client.stream`) on every connection. The socket is
 * looked up when a command is sent, and the uncork is tied to the socket that was corked, so a
 * socket is never left corked past the tick, whichever socket the client uses by then.
 */

/** What {@link coalesceWrites} needs of an ioredis (standalone) client. */
interface CorkableClient {
  readonly isCluster: boolean
  /** The current connection's socket (replaced on every reconnection). */
  readonly stream?: { cork?: () => void, uncork?: () => void, writable?: boolean }
  sendCommand: (...args: unknown[]) => unknown
}

function uncork (stream: { uncork: () => void }): void {
  stream.uncork()
}

/**
 * Makes the commands `client` sends in one tick leave in one socket write (see the module doc).
 * For a client the plugin made itself, with `enableAutoPipelining` off; a Cluster is left as it is
 * (its commands go to the node clients). Returns the client.
 */
export function coalesceWrites<T extends object> (client: T): T {
  const target = client as unknown as CorkableClient
  if (target.isCluster || typeof target.sendCommand !== 'function') return client
  const send = target.sendCommand
  // The socket corked in this tick, if any: no second cork (one uncork per cork).
  let corked: CorkableClient['stream'] | null = null
  target.sendCommand = function (this: CorkableClient, ...args: unknown[]): unknown {
    const stream = this.stream
    if (stream !== corked && stream?.writable === true && typeof stream.cork === 'function') {
      stream.cork()
      corked = stream
      process.nextTick(() => {
        corked = null
        uncork(stream as { uncork: () => void })
      })
    }
    return send.apply(this, args)
  }
  return client
}
