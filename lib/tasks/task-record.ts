/**
 * What a task is in the store, and how the Tasks extension (`io.modelcontextprotocol/tasks`,
 * SEP-2663) shows it on the wire. A task record is a flat map of keys like a session, kept in the
 * sessions' store under `~task~<id>`. The instance running the task writes the status, the result
 * or error and the pending input requests, fenced by its lease; any instance may add the client's
 * answers (`a:<key>`) and the cancellation mark (`cancel`), keys the runner never writes, so no
 * write of one side can undo one of the other (a store saves per key).
 *
 * What a client sees is derived from both: a cancellation mark wins over whatever the runner wrote
 * (the client was told its cancel was taken); answered input requests are no longer pending even
 * before the runner has picked the answers up.
 */
import { randomBytes } from 'node:crypto'
import type { JsonValue } from '../sessions/session-store.js'

/** The extension's identifier (client and server capabilities: `extensions[TASKS_EXTENSION]`). */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks'

/** A task's status on the wire. */
export type TaskStatus = 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled'

const TERMINAL = new Set<string>(['completed', 'failed', 'cancelled'])

/** Whether a status is final. */
export function isTerminal (status: unknown): boolean {
  return typeof status === 'string' && TERMINAL.has(status)
}

/** Record keys (see the module doc for who writes which). */
export const K = {
  owner: 'owner',
  status: 'status',
  createdAt: 'createdAt',
  lastUpdatedAt: 'lastUpdatedAt',
  ttlMs: 'ttlMs',
  pollIntervalMs: 'pollIntervalMs',
  statusMessage: 'statusMessage',
  result: 'result',
  error: 'error',
  inputRequests: 'inputRequests',
  /** Epoch ms after which the finished task is gone (set when it ends). */
  expiresAt: 'expiresAt',
  /** Written by `tasks/cancel` on any instance: `{ at }`. */
  cancel: 'cancel',
  /** The key of the task slot it counts against (the limits backend). */
  slot: 'slot',
  /** Prefix of a client's answer to the input request of that key (`tasks/update`). */
  answer: 'a:'
} as const

/** Random bytes of a task id: 192 bits, 32 base64url characters. */
const ID_BYTES = 24

/** What a client may send as a task id before it reaches the store: what {@link mintTaskId} makes. */
const TASK_ID = /^[A-Za-z0-9_-]{32}$/

/** A new task id (192 bits from the CSPRNG). */
export function mintTaskId (): string {
  return randomBytes(ID_BYTES).toString('base64url')
}

/** Whether `id` can be a task id this plugin minted (anything else is "not found" at once). */
export function isTaskId (id: unknown): id is string {
  return typeof id === 'string' && TASK_ID.test(id)
}

/** The store key of a task (a state key: `lib/locks/file-safe-id.ts`; the handle kind `task` is reserved). */
export function taskKey (id: string): string {
  return `~task~${id}`
}

/** The owner recorded for a principal (anonymous: `null`). */
export function ownerOf (principal: { id: string } | null): string | null {
  return principal?.id ?? null
}

type Data = Record<string, JsonValue>

/** The record of a new task. */
export function newRecord (owner: string | null, slotKey: string, ttlMs: number, pollIntervalMs: number, now = Date.now()): Data {
  const at = new Date(now).toISOString()
  return {
    [K.owner]: owner,
    [K.slot]: slotKey,
    [K.status]: 'working',
    [K.createdAt]: at,
    [K.lastUpdatedAt]: at,
    [K.ttlMs]: ttlMs,
    [K.pollIntervalMs]: pollIntervalMs
  }
}

/** Whether a finished task's time is up (it is then "not found"). */
export function expired (data: Data, now = Date.now()): boolean {
  const at = data[K.expiresAt]
  return typeof at === 'number' && now >= at
}

/** The input requests the client has not answered yet (an answer may not be picked up yet). */
export function pendingRequests (data: Data): Record<string, JsonValue> {
  const all = data[K.inputRequests]
  if (typeof all !== 'object' || all === null || Array.isArray(all)) return {}
  const out: Record<string, JsonValue> = {}
  for (const [key, request] of Object.entries(all)) if (data[K.answer + key] === undefined) out[key] = request
  return out
}

/** The status a client sees (see the module doc). */
export function visibleStatus (data: Data): TaskStatus {
  if (data[K.cancel] !== undefined) return 'cancelled'
  const status = data[K.status] as TaskStatus
  if (status === 'input_required' && Object.keys(pendingRequests(data)).length === 0) return 'working'
  return status
}

/** The fields every task shape carries. */
function base (id: string, data: Data): Record<string, unknown> {
  const out: Record<string, unknown> = {
    taskId: id,
    status: visibleStatus(data),
    createdAt: data[K.createdAt],
    lastUpdatedAt: data[K.lastUpdatedAt],
    ttlMs: data[K.ttlMs],
    pollIntervalMs: data[K.pollIntervalMs]
  }
  const cancel = data[K.cancel] as { at?: string } | undefined
  if (cancel !== undefined && typeof cancel.at === 'string' && cancel.at > (out.lastUpdatedAt as string)) out.lastUpdatedAt = cancel.at
  return out
}

/** `CreateTaskResult`: flat, no result, error or input requests. */
export function createResult (id: string, data: Data): Record<string, unknown> {
  return { resultType: 'task', ...base(id, data) }
}

/**
 * A finished task's tool result as `tasks/get` inlines it: a complete `CallToolResult` of this
 * revision, so with `resultType: "complete"` (the extension's schema requires it, and the official
 * tasks client refuses the task without it). The record keeps the handler's result as it returned
 * it; the field is added here, so records written before it was are shown right too.
 */
function completeResult (result: JsonValue): JsonValue {
  if (typeof result !== 'object' || result === null || Array.isArray(result)) return result
  return { resultType: 'complete', ...result }
}

/** `tasks/get`'s `DetailedTask`: the result or error inlined once the task ended, pending input requests while it waits. */
export function detailedTask (id: string, data: Data): Record<string, unknown> {
  const out = base(id, data)
  const status = out.status as TaskStatus
  if (typeof data[K.statusMessage] === 'string') out.statusMessage = data[K.statusMessage]
  if (status === 'completed' && data[K.result] !== undefined) out.result = completeResult(data[K.result])
  else if (status === 'failed' && data[K.error] !== undefined) out.error = data[K.error]
  else if (status === 'input_required') out.inputRequests = pendingRequests(data)
  return out
}
