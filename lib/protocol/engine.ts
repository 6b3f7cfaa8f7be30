/**
 * The MCP engine of one plugin instance: both wires, the stream hub, the session state backend,
 * and the broadcasts that carry registry changes and application notifications through the bus to
 * every instance's GET and listen streams. The HTTP routes hand it exchanges; it knows nothing of
 * routes or sockets.
 */
import { context } from '@opentelemetry/api'
import type { FastifyBaseLogger } from 'fastify'
import { BROADCAST_CHANNEL, type Bus, type BusMessage } from '../bus/bus.js'
import type { EventLog } from '../bus/event-log.js'
import { Hub } from '../bus/hub.js'
import type { McpPrincipal } from '../context.js'
import { FST_ERR_MCP_SERVER_CLOSING } from '../errors.js'
import { cacheHints } from '../features/cache-hints.js'
import { serverCapabilities } from '../features/capabilities.js'
import type { Registry } from '../features/registry.js'
import type { ParsedBody } from '../jsonrpc/messages.js'
import type { ToolLimiter } from '../limits/limiter.js'
import type { ResolvedOptions } from '../options.js'
import { GcPolicy } from '../sessions/gc.js'
import { isValidSessionId } from '../sessions/session-id.js'
import type { StateEngine, StateStatus } from '../state/engine.js'
import type { StateHandles } from '../state/handles.js'
import type { TaskService } from '../tasks/task-service.js'
import { TaskCalls } from './stateless/task-calls.js'
import { MAX_VERSION, NO_POST, type Era, type GaugeSource, type Peer, type PostTrace, type Telemetry } from '../telemetry/index.js'
import { HandleCalls } from './handle-calls.js'
import { KeyedCalls } from './keyed-calls.js'
import type { Exchange } from './exchange.js'
import { HandshakeWire } from './handshake/wire.js'
import { Drain } from './drain.js'
import { endExpired, watchExpiry } from './ended-sessions.js'
import { deleteSession, openGetStream, type StreamDeps } from './handshake/streams.js'
import { isStatelessPost } from './stateless/headers.js'
import { StatelessWire } from './stateless/wire.js'
import { StateSealer } from './stateless/request-state.js'

/** What the engine runs on (`compose.ts` builds the state engine, the tasks and the telemetry). */
export interface EngineDeps {
  opts: ResolvedOptions
  registry: Registry
  /** Sessions, state handles and task holds, on one store and lock. */
  state: StateEngine
  tasks: TaskService
  telemetry: Telemetry
  bus: Bus
  eventLog: EventLog
  logger: FastifyBaseLogger
  /** The tool call limits (the `limits` option and the definitions' own). */
  limiter: ToolLimiter
}

/**
 * An ended session leaves nothing behind, however it ended: a store that reports what it removed
 * on its own is listened to (`stopExpiry` stops that); for one that does not, what the plugin's gc
 * runs remove. `maybeGc` is the chance to run the store's gc (`gcProbability / gcDivisor`) that
 * each handshake-era POST on a session and each handle minted takes (docs/lock-internals.md, "GC and custom stores").
 */
function sessionEnds (d: EngineDeps, hub: Hub): { stopExpiry: (() => void) | null, maybeGc: (log: FastifyBaseLogger) => void } {
  const gc = new GcPolicy({ gcProbability: d.opts.gcProbability, gcDivisor: d.opts.gcDivisor })
  const ends = { eventLog: d.eventLog, hub }
  const store = d.state.store
  const stopExpiry = watchExpiry(store, ends, d.logger)
  const onRemoved = stopExpiry === null ? (ids: string[]) => { endExpired(ends, ids, d.logger) } : undefined
  return { stopExpiry, maybeGc: (log) => { gc.maybeRun(store, log, onRemoved) } }
}

/** The 2026-07-28 capabilities: the registry's, with the Tasks extension; rebuilt only when those change. */
function withTasksExtension (capabilities: () => Record<string, unknown>, tasks: TaskCalls): () => Record<string, unknown> {
  let base: Record<string, unknown> | null = null
  let withTasks: Record<string, unknown> = {}
  return () => {
    const now = capabilities()
    if (now !== base) { base = now; withTasks = tasks.capabilities(now) }
    return withTasks
  }
}

/**
 * The protocol's part of `app.mcp.status()` (`McpStatus` in `decorator.ts` documents each count;
 * the state engine adds its own, `StateStatus`).
 */
export interface ProtocolStatus {
  sessionsHeld: number
  getStreams: number
  listenStreams: number
  pendingClientRequests: number
  inflightRequests: number
  runningTasks: number
  draining: boolean
}

/** @internal See the module doc. */
export class McpEngine {
  readonly hub: Hub
  /** The state handles (out-of-band reads and ends: `app.mcp.handles`). */
  readonly handles: StateHandles
  readonly #handshakeWire: HandshakeWire
  readonly #statelessWire: StatelessWire
  readonly #streams: StreamDeps
  readonly #bus: Bus
  readonly #subscription: Promise<() => Promise<void>>
  readonly #telemetry: Telemetry
  readonly #stopExpiry: (() => void) | null
  readonly #state: StateEngine
  readonly #drain: Drain
  readonly #tasks: TaskCalls
  readonly #logger: FastifyBaseLogger

  constructor (d: EngineDeps) {
    const { opts, registry, logger } = d
    this.#bus = d.bus
    this.#logger = logger
    this.#drain = new Drain(opts.retryIntervalMs)
    this.#telemetry = d.telemetry
    this.#state = d.state
    this.hub = new Hub(d.bus, logger, { clientRequestTimeoutMs: opts.clientRequestTimeoutMs })
    const state = d.state
    this.handles = state.handles
    const keyed = opts.idempotency === null ? undefined : new KeyedCalls(state, opts.idempotency, ctx => d.limiter.clientKey(ctx.principal, ctx.request.ip), o => { d.telemetry.keyed(o) })
    const capabilities = serverCapabilities(registry, keyed !== undefined)
    const ends = sessionEnds(d, this.hub)
    this.#stopExpiry = ends.stopExpiry
    const maybeGc = ends.maybeGc
    // Each POST on a handshake-era session and each new handle may trigger the store's GC (the
    // stateless wire has no session: only its handles do).
    const handles = new HandleCalls(state, {
      anonymous: opts.authenticate === undefined,
      minted: () => { maybeGc(logger) },
      clientKey: (principal, ip) => d.limiter.clientKey(principal, ip)
    })
    this.#handshakeWire = new HandshakeWire({
      opts, registry, state, hub: this.hub, eventLog: d.eventLog, logger, capabilities, maybeGc, handles, limiter: d.limiter, keyed, telemetry: this.#telemetry
    })
    this.#streams = { opts, state, hub: this.hub, eventLog: d.eventLog, ended: (s, v) => { this.#telemetry.sessionEnded(s, v) } }
    const sealer = new StateSealer(opts.requestState.secret, opts.requestState.ttlMs)
    const cache = cacheHints(registry, opts.cache, opts.authenticate === undefined ? 'public' : 'private')
    const tasks = this.#tasks = new TaskCalls(d.tasks, (principal, ip) => d.limiter.clientKey(principal, ip))
    this.#statelessWire = new StatelessWire({ opts, registry, state, sealer, capabilities: withTasksExtension(capabilities, tasks), cache, logger, handles, limiter: d.limiter, tasks, keyed })
    this.#subscription = d.bus.subscribe(BROADCAST_CHANNEL, (m) => { this.#onBroadcast(m) })
    // An instance started while the bus is down keeps running (and logs); it must not crash.
    this.#subscription.catch((err: unknown) => logger.error({ err }, 'broadcast subscription failed'))
    this.#announce(registry, logger)
    this.#observe(d.eventLog)
  }

  /** The gauges of the metrics: this instance's status, the lock waiters by subject and the event log's size. */
  #observe (log: EventLog & { size?: unknown }): void {
    this.#telemetry.observe(() => {
      const s: GaugeSource = Object.assign(this.status(), { lockWaiting: this.#state.waiting })
      if (typeof log.size === 'number') s.eventLogStreams = log.size
      return s
    })
  }

  /** A POST whose body parsed: the stateless 2026-07-28 wire or the handshake-era one, each request in its span. */
  async post (outer: Exchange, body: ParsedBody & { ok: true }, principal: McpPrincipal | null): Promise<void> {
    // While draining, only what serves requests already running (a client's answer, a cancel) is taken.
    if (this.#drain.draining && body.messages.some(m => m.kind === 'request')) this.#refuseWhileDraining()
    const exchange = this.#drain.enter(outer, body)
    const stateless = isStatelessPost(exchange.request, body)
    const trace = this.#trace(exchange, body, stateless ? '2026-07-28' : '2025')
    try {
      // Without a span context (no SDK, or telemetry off) no closure is made to enter one.
      if (trace.context !== null) await context.with(trace.context, () => this.#wire(stateless, exchange, body, principal, trace))
      else await this.#wire(stateless, exchange, body, principal, trace)
    } catch (err) {
      trace.failed(err)
      throw err
    } finally {
      exchange.release()
      trace.end()
    }
  }

  /** The wire's run of a POST (its promise, not awaited here: one async frame less per POST). */
  #wire (stateless: boolean, exchange: Exchange, body: ParsedBody & { ok: true }, principal: McpPrincipal | null, trace: PostTrace): Promise<void> {
    return stateless ? this.#statelessWire.post(exchange, body, principal, trace) : this.#handshakeWire.post(exchange, body, principal, trace)
  }

  #refuseWhileDraining (): void {
    const refusal = this.#drain.refusal()
    if (refusal !== null) throw refusal
  }

  /** The telemetry of a POST: the session and version its headers name (checked: they become attributes). */
  #trace (exchange: Exchange, body: ParsedBody & { ok: true }, era: Era): ReturnType<Telemetry['post']> {
    // Silent: the headers need not be read and checked for attributes nothing records.
    if (this.#telemetry.silent()) return NO_POST
    const h = exchange.request.headers
    const sid = era === '2025' ? sessionHeader(exchange) : null
    let version = h['mcp-protocol-version']
    if (typeof version !== 'string' || version.length > MAX_VERSION) {
      const first = body.messages[0]
      const asked = first.kind === 'request' && first.message.method === 'initialize' ? first.message.params?.protocolVersion : undefined
      version = typeof asked === 'string' && asked.length <= MAX_VERSION ? asked : undefined
    }
    return this.#telemetry.post(era, sid, version, body.messages, peerOf(exchange))
  }

  /** GET of a handshake-era session's stream. */
  async get (exchange: Exchange, principal: McpPrincipal | null): Promise<void> {
    await this.#telemetry.stream('GET', sessionHeader(exchange), exchange.request.headers['mcp-protocol-version'], async () => {
      this.#refuseWhileDraining()
      await openGetStream(this.#streams, exchange, principal)
    }, peerOf(exchange))
  }

  /** DELETE of a handshake-era session. */
  async delete (exchange: Exchange, principal: McpPrincipal | null): Promise<void> {
    await this.#telemetry.stream('DELETE', sessionHeader(exchange), exchange.request.headers['mcp-protocol-version'], async () => {
      this.#refuseWhileDraining()
      await deleteSession(this.#streams, exchange, principal)
    }, peerOf(exchange))
  }

  /** A notification for one session's GET stream, on whatever instance holds it. */
  async notify (sessionId: string, method: string, params?: Record<string, unknown>): Promise<void> {
    await this.hub.topics.publish(sessionId, { t: 'notify', sid: sessionId, msg: notification(method, params) })
  }

  /** A notification for every session's GET stream, on every instance. */
  async notifyAll (method: string, params?: Record<string, unknown>): Promise<void> {
    await this.#bus.publish(BROADCAST_CHANNEL, { t: 'broadcast', kind: 'custom', msg: notification(method, params) })
  }

  /** This instance's counts (`app.mcp.status()`): the protocol's, and the state engine's. */
  status (): ProtocolStatus & StateStatus {
    return {
      sessionsHeld: this.hub.size,
      getStreams: this.hub.getStreams.size,
      listenStreams: this.#statelessWire.listeners.size,
      ...this.#state.status(),
      pendingClientRequests: this.hub.answers.size,
      inflightRequests: this.#drain.inflight,
      runningTasks: this.#tasks.running,
      draining: this.#drain.draining
    }
  }

  /**
   * The first step of `app.close()` (`drain.ts`): new requests are refused from now on; GET,
   * resumed and listen streams end at once with `retry` (their clients come back elsewhere); the
   * POSTs running may finish within `timeoutMs`, then what is left is stopped; then the tasks
   * running here get what is left of `timeoutMs` before they end `failed` (`stateless/task-calls.ts`), so
   * that nothing of theirs is written after the stores close. Resolves the number of POSTs and
   * tasks stopped.
   */
  async drain (timeoutMs: number, retryMs: number): Promise<number> {
    const deadline = performance.now() + timeoutMs
    const draining = this.#drain.drain(timeoutMs, this.#logger)
    this.#statelessWire.close(retryMs)
    this.hub.getStreams.close(retryMs)
    this.hub.followers.close(retryMs)
    // After the POSTs: one of them may still create a task (its beforeTask round ending).
    const posts = await draining
    const left = Math.max(0, deadline - performance.now())
    return posts + await this.#tasks.drain(left, new FST_ERR_MCP_SERVER_CLOSING(timeoutMs), this.#logger)
  }

  /** Server shutdown: streams end (with `retry` or their final result), waiting handlers are rejected. */
  async close (retryMs: number): Promise<void> {
    this.#stopExpiry?.()
    this.#telemetry.close()
    this.#statelessWire.close(retryMs)
    await this.hub.close(retryMs)
    await this.#subscription.then(unsub => unsub()).catch(() => {})
  }

  /**
   * Registry changes and application notifications go through the bus, so that every instance
   * (this one included) forwards them to its own GET and listen streams, once each.
   */
  #announce (registry: Registry, logger: FastifyBaseLogger): void {
    const publish = (m: BusMessage): void => {
      this.#bus.publish(BROADCAST_CHANNEL, m).catch((err: unknown) => logger.warn({ err }, 'broadcast failed'))
    }
    registry.on('changed', (kind) => { publish({ t: 'broadcast', kind, msg: notification(`notifications/${kind}/list_changed`) }) })
    registry.on('resourceUpdated', (uri) => { publish({ t: 'resource', uri }) })
  }

  #onBroadcast (m: BusMessage): void {
    if (m.t === 'broadcast') {
      this.hub.getStreams.broadcast(m.msg)
      if (m.kind === 'tools' || m.kind === 'prompts' || m.kind === 'resources') this.#statelessWire.listChanged(m.kind)
    } else if (m.t === 'resource') {
      this.hub.getStreams.resourceUpdated(m.uri)
      this.#statelessWire.resourceUpdated(m.uri)
    }
  }
}

function notification (method: string, params?: Record<string, unknown>): Record<string, unknown> {
  const msg: Record<string, unknown> = { jsonrpc: '2.0', method }
  if (params !== undefined) msg.params = params
  return msg
}

/** Who sent the request, for the spans (`client.address` follows the app's `trustProxy`). */
function peerOf (exchange: Exchange): Peer {
  const request = exchange.request
  return { address: request.ip, port: request.socket?.remotePort, httpVersion: request.raw.httpVersion }
}

/** The request's `Mcp-Session-Id` when well-formed (it becomes a span attribute), else null. */
function sessionHeader (exchange: Exchange): string | null {
  const sid = exchange.request.headers['mcp-session-id']
  return typeof sid === 'string' && isValidSessionId(sid) ? sid : null
}
