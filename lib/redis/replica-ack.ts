/**
 * Replica acknowledgement: the opt-in `WAIT numreplicas timeout` behind every write script of
 * the plugin (a session or handle created or saved, a lease taken, a task created or changed).
 *
 * Redis replicates asynchronously: a write the primary answered may be missing on the replica
 * Sentinel promotes. With `waitReplicas: N` a write counts as done only once N replicas
 * acknowledged it; fewer within `waitTimeoutMs` and the write is *unconfirmed*: it ran on the
 * primary and may survive or not, so the caller must answer neither "kept" nor "not kept"
 * ({@link UnconfirmedWriteError}; the wires answer 503 with Retry-After). A lease whose take is
 * unconfirmed is another matter ({@link UnconfirmedLeaseError}): it is let go before anything
 * runs under it, so nothing was done and the client may simply retry.
 *
 * A script cannot call WAIT, so WAIT is sent right behind the script on the same connection, in
 * the same turn of the event loop: one round trip for both, no MULTI. A client's setting is a
 * mark on the client, read once when the plugin's scripts are defined on it (`scripts.ts`).
 */

/** How many replicas must acknowledge a write, and how long to wait for them. */
export interface ReplicaAck {
  /** Replicas that must hold a write before it is reported as kept (>= 1). */
  readonly replicas: number
  /** How long WAIT waits for them, in ms (>= 1: WAIT's 0 would wait forever). */
  readonly timeoutMs: number
}

/** A write that ran on the primary but was not acknowledged by enough replicas in time. */
export class UnconfirmedWriteError extends Error {
  override readonly name: string = 'UnconfirmedWriteError'
  constructor (readonly acknowledged: number, readonly required: number) {
    super(`Write not confirmed: ${acknowledged} of ${required} replicas acknowledged it in time`)
  }
}

/**
 * The take of a lease that too few replicas acknowledged. The lease is let go (the lock releases
 * it before the error reaches its caller), and nothing ran under it: unlike an unconfirmed save,
 * the outcome is known — nothing was done.
 */
export class UnconfirmedLeaseError extends UnconfirmedWriteError {
  override readonly name = 'UnconfirmedLeaseError'
}

/** The {@link UnconfirmedWriteError} that is `err` or in its `cause` chain, if any. */
function unconfirmedOf (err: unknown): UnconfirmedWriteError | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    if (e instanceof UnconfirmedWriteError) return e
  }
  return undefined
}

/** Whether `err`, or an error in its `cause` chain, is an {@link UnconfirmedWriteError}. */
export function isUnconfirmed (err: unknown): boolean {
  return unconfirmedOf(err) !== undefined
}

/** Whether that error is the take of a lease ({@link UnconfirmedLeaseError}): nothing was done. */
export function isUnconfirmedLease (err: unknown): boolean {
  return unconfirmedOf(err) instanceof UnconfirmedLeaseError
}

const ACK = Symbol.for('fastify-mcp-http.replicaAck')

/** Bounds of the settings (a replica count no deployment has; a wait that stalls the connection). */
const MAX_REPLICAS = 100
const MAX_TIMEOUT = 10_000

/**
 * Checks `waitReplicas` / `waitTimeoutMs` options; `undefined` when acknowledgement is off.
 * @throws {RangeError} for a count or timeout that is not a positive integer, or a timeout without a count.
 */
export function replicaAckOf (options: { waitReplicas?: number, waitTimeoutMs?: number }): ReplicaAck | undefined {
  const { waitReplicas, waitTimeoutMs } = options
  if (waitReplicas === undefined || waitReplicas === 0) {
    if (waitTimeoutMs !== undefined && waitReplicas === undefined) throw new RangeError('waitTimeoutMs needs waitReplicas.')
    return undefined
  }
  if (!Number.isInteger(waitReplicas) || waitReplicas < 0 || waitReplicas > MAX_REPLICAS) {
    throw new RangeError(`waitReplicas must be an integer from 0 to ${MAX_REPLICAS}.`)
  }
  const timeoutMs = waitTimeoutMs ?? 200
  // Bounded: every command behind a WAIT on the connection waits as long.
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT) {
    throw new RangeError(`waitTimeoutMs must be an integer from 1 to ${MAX_TIMEOUT} (ms).`)
  }
  return { replicas: waitReplicas, timeoutMs }
}

/**
 * Marks `client` so the plugin's write scripts on it wait for `ack` (before the scripts are
 * defined on it: a client scripted already without the mark refuses it). Returns the client.
 * @throws {TypeError} on a Cluster (WAIT answers for one node only), or a client scripted already.
 */
export function requireReplicaAck<T extends object> (client: T, ack: ReplicaAck | undefined): T {
  if (ack === undefined) return client
  if ((client as { isCluster?: boolean }).isCluster === true) throw new TypeError('waitReplicas is not supported on a Redis Cluster client.')
  const marked = (client as Record<symbol, ReplicaAck | undefined>)[ACK]
  if (marked !== undefined) {
    if (marked.replicas === ack.replicas && marked.timeoutMs === ack.timeoutMs) return client
    throw new TypeError('This Redis client already waits for another number of replicas.')
  }
  if (marked === undefined && typeof (client as { mcpSaveAndRelease?: unknown }).mcpSaveAndRelease === 'function') {
    throw new TypeError('waitReplicas must be set before the client is handed to a store or lock.')
  }
  Object.defineProperty(client, ACK, { value: ack, enumerable: false })
  return client
}

/** The acknowledgement `client` was marked with, if any. */
export function replicaAckFor (client: object): ReplicaAck | undefined {
  return (client as Record<symbol, ReplicaAck | undefined>)[ACK]
}

/** What {@link sendWait} needs of a client. */
interface WaitClient {
  wait?: (replicas: number, timeout: number) => Promise<unknown>
  call?: (command: string, ...args: Array<string | number>) => Promise<unknown>
}

/** Sends `WAIT` on `client` now; resolves the number of replicas that acknowledged. */
export function sendWait (client: object, ack: ReplicaAck): Promise<number> {
  const c = client as WaitClient
  const sent = typeof c.wait === 'function' ? c.wait(ack.replicas, ack.timeoutMs) : (c.call as NonNullable<WaitClient['call']>)('WAIT', ack.replicas, ack.timeoutMs)
  return sent.then(Number)
}

/**
 * The reply of a write script once WAIT confirmed it: `wrote(reply)` says whether the script
 * wrote anything (a refused save or a busy lease needs no confirmation). `take`: the write is the
 * take of a lease, which its lock lets go when this throws.
 * @throws {UnconfirmedWriteError} (as a rejection) when too few replicas acknowledged a write;
 * {@link UnconfirmedLeaseError} for a lease's take.
 */
export function confirmed<R> (reply: R, acknowledged: number, ack: ReplicaAck, wrote: (reply: R) => boolean, take = false): R {
  if (acknowledged < ack.replicas && wrote(reply)) {
    throw take ? new UnconfirmedLeaseError(acknowledged, ack.replicas) : new UnconfirmedWriteError(acknowledged, ack.replicas)
  }
  return reply
}
