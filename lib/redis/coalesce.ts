/**
 * One socket write per turn of the event loop for the commands of a client the plugin makes,
 * without ioredis' auto-pipelining.
 *
 * Auto-pipelining builds a Pipeline object per batch and defers it with setImmediate: with one
 * request at a time every batch holds a single command, and that machinery cost more CPU than the
 * rest of the Redis path. Here a command sent while the connection has nothing in flight is written
 * at once (one request at a time: nothing to batch, nothing deferred); a command sent while others
 * await their replies (under load) corks the socket until a `setImmediate`, after the I/O
 * callbacks of this turn of the event loop, so the commands of all the requests read in one turn
 * go out in one write, as auto-pipelining batched them. (Uncorking on `process.nextTick` batches
 * only one request's commands: at 50 connections that was a write per command; deferring every
 * command to a `setImmediate` made one request at a time dearer.)
 *
 * Reconnection: ioredis makes a new socket (`client.stream`) on every connection. The socket is
 * looked up when a command is sent, and the uncork is tied to the socket that was corked, so a
 * socket is never left corked past the turn, whichever socket the client uses by then (a socket
 * corked but never uncorked holds back every command after it, the handshake's included).
 */

/** What {@link coalesceWrites} needs of an ioredis (standalone) client. */
interface CorkableClient {
  readonly isCluster: boolean
  /** The current connection's socket (replaced on every reconnection). */
  readonly stream?: { cork?: () => void, uncork?: () => void, writable?: boolean }
  /** ioredis' commands awaiting a reply (absent in a version without it: then always corked). */
  readonly commandQueue?: { length: number }
  sendCommand: (command: unknown, stream?: unknown) => unknown
}

/**
 * Makes the commands `client` sends in one turn of the event loop under load leave in one socket
 * write (see the module doc). For a client the plugin made itself, with `enableAutoPipelining` off; a Cluster is left as it is
 * (its commands go to the node clients). Returns the client.
 */
export function coalesceWrites<T extends object> (client: T): T {
  const target = client as unknown as CorkableClient
  if (target.isCluster || typeof target.sendCommand !== 'function') return client
  const send = target.sendCommand
  // The socket corked in this turn, if any: no second cork (one uncork per cork).
  let corked: CorkableClient['stream'] | null = null
  target.sendCommand = function (this: CorkableClient, command: unknown, to?: unknown): unknown {
    const stream = this.stream
    if (stream !== corked && (this.commandQueue?.length ?? 1) > 0 && stream?.writable === true && typeof stream.cork === 'function') {
      stream.cork()
      corked = stream
      const uncorked = stream as { uncork: () => void }
      setImmediate(() => {
        if (corked === stream) corked = null
        uncorked.uncork()
      })
    }
    return send.call(this, command, to)
  }
  return client
}
