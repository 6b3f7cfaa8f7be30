/**
 * What the messages of a handshake-era POST do: a request's method (the method table, and the
 * methods only a session serves: subscriptions, `logging/setLevel`), and a notification
 * (`notifications/cancelled` is published to every instance). `wire.ts` runs them in order on the
 * POST's session.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Hub } from '../../bus/hub.js'
import { LOG_LEVELS } from '../../context.js'
import { METHODS, methodNotFound, needCapability } from '../../features/method-table.js'
import type { Registry } from '../../features/registry.js'
import { ErrorCode, McpError } from '../../jsonrpc/errors.js'
import { metaProblem, type JsonRpcRequest, type Parsed } from '../../jsonrpc/messages.js'
import type { ToolLimiter } from '../../limits/limiter.js'
import type { ResolvedOptions } from '../../options.js'
import { K } from '../../sessions/session-handle.js'
import type { StateScope } from '../../state/state-scope.js'
import type { BaseContext } from '../base-context.js'
import type { KeyedRunner } from '../../features/keyed-call.js'
import type { HandleCalls } from '../handle-calls.js'
import { needsSession } from './sessionless.js'

/** What a session may subscribe to (kept in the session, and on the instance holding its GET stream). */
const MAX_SUBSCRIPTIONS = 100
const MAX_SUBSCRIBED_URI = 2048

/** @internal What the methods are run with (a part of the wire's `HandshakeDeps`). */
export interface DispatchDeps {
  opts: ResolvedOptions
  registry: Registry
  hub: Hub
  capabilities: () => Record<string, unknown>
  handles: HandleCalls
  limiter: ToolLimiter
  /** Idempotency keys on tool calls (absent: `idempotency: false`). */
  keyed?: KeyedRunner
}

/**
 * @internal Whether a POST may read its session as a snapshot, without the lock
 * (`state/snapshot.ts`): it carries at least one request, and each is a `ping`, a method of the
 * table that runs no handler of the app (the lists, `completion/complete`), or a call of a
 * read-only tool. None of them can change the session, so such a POST neither waits behind a
 * running writer nor takes a lease (with `waitReplicas`, nor waits for replicas to confirm one).
 * Answers and notifications among them change no state; any other request makes the whole POST
 * take the lock.
 */
export function changesNothing (messages: readonly Parsed[], tools: ReadonlyMap<string, { readOnly: boolean }>): boolean {
  let requests = 0
  for (const m of messages) {
    if (m.kind !== 'request') continue
    requests++
    const { method, params } = m.message
    // A tool call first: the most common request costs no more than before the other checks.
    if (method === 'tools/call') {
      const name = params?.name
      if (typeof name !== 'string' || tools.get(name)?.readOnly !== true) return false
    } else if (method !== 'ping' && METHODS.get(method)?.context !== false) {
      return false
    }
  }
  return requests > 0
}

/** -32002: resources/read of a URI nobody serves (the handshake era's code). */
function resourceNotFound (uri: string): McpError {
  return new McpError(ErrorCode.ResourceNotFound, 'Resource not found', { uri })
}

/**
 * @internal A request's method; throws or rejects its refusal (not async: the method has the
 * frame). `scope` is null on a request served without a session.
 */
export function dispatch (d: DispatchDeps, scope: StateScope | null, msg: JsonRpcRequest, ctx: BaseContext, log: FastifyBaseLogger): Promise<Record<string, unknown>> | Record<string, unknown> {
  const params = msg.params ?? {}
  const problem = metaProblem(params)
  if (problem !== null) throw new McpError(ErrorCode.InvalidParams, problem)
  const caps = d.capabilities()
  const entry = METHODS.get(msg.method)
  if (entry !== undefined) {
    needCapability(caps, entry.capability, msg.method)
    return entry.handler({
      registry: d.registry,
      params,
      ctx: entry.context ? ctx : null,
      principal: ctx.principal,
      pageSize: d.opts.pageSize,
      log,
      resourceNotFound,
      limiter: d.limiter,
      state: d.handles,
      keyed: d.keyed
    })
  }
  switch (msg.method) {
    case 'ping': return {}
    case 'initialize': throw new McpError(ErrorCode.InvalidRequest, 'Invalid Request: the session is already initialized')
    case 'resources/subscribe':
    case 'resources/unsubscribe':
      needCapability(caps, 'resources', msg.method)
      if (scope === null) throw needsSession(msg.method)
      return subscribe(d.hub, scope, msg.method, params)
    case 'logging/setLevel':
      if (scope === null) throw needsSession(msg.method)
      if (!LOG_LEVELS.includes(params.level as never)) {
        throw new McpError(ErrorCode.InvalidParams, `Invalid params: level must be one of ${LOG_LEVELS.join(', ')}`)
      }
      scope.handle.setProtocol(K.logLevel, params.level)
      return {}
    default: throw methodNotFound(msg.method)
  }
}

async function subscribe (hub: Hub, scope: StateScope, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (typeof params.uri !== 'string') throw new McpError(ErrorCode.InvalidParams, 'Invalid params: uri must be a string')
  if (params.uri.length > MAX_SUBSCRIBED_URI) {
    throw new McpError(ErrorCode.InvalidParams, `Invalid params: uri is longer than ${MAX_SUBSCRIBED_URI} characters`)
  }
  const subs = new Set(scope.handle.getProtocol<string[]>(K.subscriptions) ?? [])
  if (method === 'resources/subscribe') subs.add(params.uri)
  else subs.delete(params.uri)
  if (subs.size > MAX_SUBSCRIPTIONS) {
    throw new McpError(ErrorCode.InvalidParams, `Invalid params: a session subscribes to at most ${MAX_SUBSCRIPTIONS} resources`)
  }
  scope.handle.setProtocol(K.subscriptions, [...subs])
  // Whichever instance holds the session's GET stream learns the new set.
  await hub.topics.publish(scope.id, { t: 'subs', sid: scope.id, uris: [...subs] })
  return {}
}

/** @internal A notification of the client; resolves whether it went through the bus. */
export async function notification (hub: Hub, sid: string, method: string, params: Record<string, unknown>): Promise<boolean> {
  if (method === 'notifications/cancelled') {
    const requestId = params.requestId
    // Published to every instance: an id longer than any request id may be is nobody's.
    if ((typeof requestId === 'string' && requestId.length <= 256) || typeof requestId === 'number') {
      await hub.topics.publish(sid, { t: 'cancel', sid, requestId })
      return true
    }
  }
  // notifications/initialized, roots/list_changed, progress…: accepted, nothing to do.
  return false
}
