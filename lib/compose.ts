/**
 * What the MCP engine runs on, built once per plugin instance from the resolved options and the
 * backends: the state engine (sessions, state handles, units of work, task holds on one store and
 * lock), the task service, and the telemetry. The engine (`protocol/engine.ts`) composes the wires
 * on them and builds nothing of its own state.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Backends } from './backends.js'
import { METHODS } from './features/method-table.js'
import type { Registry } from './features/registry.js'
import type { ResolvedOptions } from './options.js'
import { TASK_METHODS } from './protocol/stateless/task-calls.js'
import { countsRoundTrips } from './state/pairings/choose-pairing.js'
import { createStateEngine, type StateEngine } from './state/engine.js'
import { TaskService } from './tasks/task-service.js'
import { Telemetry, type KnownNames } from './telemetry/index.js'

/** The parts the engine runs on (see the module doc). */
export interface EngineParts {
  state: StateEngine
  tasks: TaskService
  telemetry: Telemetry
}

/** Methods outside the method table whose names may name spans and metrics (any other is `_OTHER`). */
const OTHER_METHODS = new Set([
  'initialize', 'ping', 'logging/setLevel', 'resources/subscribe', 'resources/unsubscribe', 'server/discover', 'subscriptions/listen',
  'notifications/initialized', 'notifications/cancelled', 'notifications/progress', 'notifications/roots/list_changed', 'notifications/message'
])

/** The names spans and metrics may carry (any other method is `_OTHER`; tools and prompts the registry holds). */
function knownNames (registry: Registry): KnownNames {
  return {
    method: (m) => METHODS.has(m) || OTHER_METHODS.has(m) || TASK_METHODS.has(m),
    tool: (name) => registry.tools.has(name),
    prompt: (name) => registry.prompts.has(name)
  }
}

/** Builds the parts (see the module doc). */
export function composeEngineParts (opts: ResolvedOptions, registry: Registry, backends: Backends, logger: FastifyBaseLogger): EngineParts {
  const state = createStateEngine({ store: backends.store, lock: backends.lock, cancelGraceMs: opts.cancelGraceMs, handleKinds: registry.handleKinds })
  const tasks = new TaskService({
    // A task's runner holds a lease of the sessions' lock (see the pairing's holds()).
    holds: state.holds(),
    bus: backends.bus,
    slots: backends.limiter.backend,
    options: opts.tasks,
    warn: (obj, msg) => { logger.warn(obj, msg) }
  })
  const telemetry = new Telemetry(opts.telemetry, opts.serverInfo.version, knownNames(registry), countsRoundTrips(backends.store))
  return { state, tasks, telemetry }
}
