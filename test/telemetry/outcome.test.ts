/**
 * `error.type` and refusal reasons from what a client was answered: the JSON-RPC code, `tool_error`
 * for a tool result with `isError`, and a low-cardinality reason for each 429/503 the plugin answers
 * (the wires' refusals by their fixed text, tool and task limits by their `data.limit`).
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { McpError, OutcomeUnknownError } from '../../lib/index.js'
import { refuse } from '../../lib/protocol/handshake/session.js'
import { refusalAnswer } from '../../lib/protocol/refusals.js'
import { answerFor } from '../../lib/protocol/unkept-answers.js'
import { outcomeOf, type CloseResult } from '../../lib/state/outcome.js'
import { ToolLimitError } from '../../lib/limits/errors.js'
import { REASONS, outcomeOfError, outcomeOfResponse, refusalReason } from '../../lib/telemetry/outcome.js'
import { leaseUnconfirmedRefusal, unconfirmedRefusal } from '../../lib/protocol/unconfirmed.js'

t.test('every refusal of the wires has its own reason', async t => {
  const unkeptHandle = (closed: CloseResult): McpError => {
    const a = answerFor(outcomeOf(closed), 'handle')!
    return new McpError(a.code, a.message, a.data, a.status, a.headers)
  }
  const reasons = {
    session_busy: refusalAnswer('busy', 'session'),
    lock_unavailable: refusalAnswer('lock-down', 'session'),
    store_unavailable: refusalAnswer('store-down', 'session'),
    session_unreadable: refusalAnswer('unreadable', 'session'),
    bus_unavailable: refuse.busDown(),
    session_streams: refuse.tooManyStreams(),
    handle_busy: refusalAnswer('busy', 'handle'),
    handle_unreadable: refusalAnswer('unreadable', 'handle'),
    lock_lost: unkeptHandle({ status: 'lost' }),
    abandoned: unkeptHandle({ status: 'abandoned' }),
    save_unknown: unkeptHandle({ status: 'failed', error: new OutcomeUnknownError('timed out') }),
    unconfirmed: unconfirmedRefusal(),
    lease_unconfirmed: leaseUnconfirmedRefusal(),
    tool_rate: new ToolLimitError('t', 'rate', 10),
    tool_concurrency: new ToolLimitError('t', 'concurrency', 10),
    tool_limits_unavailable: new ToolLimitError('t', 'unavailable', 10)
  }
  for (const [reason, err] of Object.entries(reasons)) {
    t.equal(outcomeOfError(err).reason, reason, reason)
    t.equal(outcomeOfError(err).errorType, String(err.code))
  }
  t.equal(refusalReason(429, 'x', { limit: 'tasks' }), 'task_limit')
  t.equal(refusalReason(503, 'Tasks are unavailable right now; retry later', undefined), 'tasks_unavailable')
  t.equal(refusalReason(503, 'something else', undefined), 'other')
  t.equal(refusalReason(400, 'Bad', undefined), undefined, 'only 429 and 503 are refusals')
})

t.test('docs/observability.md names every refusal reason', async t => {
  const doc = readFileSync(new URL('../../docs/observability.md', import.meta.url), 'utf8')
  const row = doc.split('\n').find(line => line.startsWith('| `fastify_mcp.refusal.reason`'))
  t.ok(row, 'the attribute\'s row')
  const derived = ['task_limit', 'tool_rate', 'tool_concurrency', 'tool_limits_unavailable', 'other']
  for (const reason of new Set([...Object.values(REASONS), ...derived])) t.match(row, `\`${reason}\``, reason)
})

t.test('responses: the code, tool_error, success', async t => {
  t.same(outcomeOfResponse({ jsonrpc: '2.0', id: 1, error: { code: -32602, message: 'Invalid params' } }, 200),
    { errorType: '-32602', code: -32602, message: 'Invalid params', status: 200, reason: undefined })
  t.same(outcomeOfResponse({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [] } }, 200), { errorType: 'tool_error', status: 200 })
  t.equal(outcomeOfResponse({ jsonrpc: '2.0', id: 1, result: { content: [] } }, 200), null)
  t.equal(outcomeOfError(new Error('boom')).errorType, '-32603', 'anything else is the 500 the routes answer')
  t.equal(outcomeOfError(new McpError(-32600, 'Bad', undefined, 400)).status, 400)
})
