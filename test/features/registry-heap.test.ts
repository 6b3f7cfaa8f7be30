/**
 * Run-time registry changes do not grow the heap (issue 40, item 5): a removed or replaced tool
 * frees its compiled schemas. The heap is read after a full collection and compared as a ratio:
 * 10,000 add+remove of a tool leave it where 1,000 left it, 4,000 more update() of one where
 * 2,000 left it.
 */
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { Registry } from '../../lib/features/registry.js'
import { fullGc } from '../helpers/gc.js'

// CPU-bound (thousands of schema compilations, full GCs): on a busy 2-core machine it runs past tap's 60 s.
t.setTimeout(240_000)

/** A schema of its own per round, as an app generating tools at run time would have. */
function schema (i: number): ReturnType<typeof Type.Object> {
  return Type.Object({ name: Type.String({ minLength: 1, maxLength: 100 + (i % 7) }), count: Type.Integer({ minimum: 0 }), tags: Type.Array(Type.String()) })
}

function heapAfterGc (): number {
  fullGc()
  return process.memoryUsage().heapUsed
}

t.test('4,000 update() of a tool\'s input: the heap after a full GC stays flat', async t => {
  const registry = new Registry()
  const handle = registry.tool({ name: 'evolving', description: 'changes', input: schema(0) }, async () => 'x')
  // Warmed past the point where the engine's own caches stop growing.
  for (let i = 1; i <= 2_000; i++) handle.update({ input: schema(i) })
  const warm = heapAfterGc()
  for (let i = 2_001; i <= 6_000; i++) handle.update({ input: schema(i) })
  const after = heapAfterGc()
  t.ok(after / warm < 1.1, `heap after 4,000 more updates / after 2,000: ${(after / warm).toFixed(2)} (under 1.1)`)
})

t.test('10,000 add+remove of a tool: the heap after a full GC stays flat', async t => {
  const registry = new Registry()
  registry.tool({ name: 'static', description: 'stays', input: schema(-1) }, async () => 'x')
  const churn = (from: number, to: number): void => {
    for (let i = from; i < to; i++) {
      registry.tool({ name: 'dynamic', description: `round ${i}`, input: schema(i), output: Type.Object({ ok: Type.Boolean() }) }, async () => ({ content: [], structuredContent: { ok: true } }))
      registry.removeTool('dynamic')
    }
  }
  churn(0, 1_000)
  const warm = heapAfterGc()
  churn(1_000, 10_000)
  const after = heapAfterGc()
  t.ok(after / warm < 1.25, `heap after 10,000 add+remove / after 1,000: ${(after / warm).toFixed(2)} (under 1.25)`)
})

t.test('a tool with a $id can be removed and registered again, and updated', async t => {
  const registry = new Registry()
  const input = { $id: 'https://example.com/schemas/order', type: 'object', properties: { qty: { type: 'integer' } }, required: ['qty'] }
  for (let i = 0; i < 3; i++) {
    const handle = registry.tool({ name: 'order', description: 'orders', input }, async () => 'ok')
    handle.update({ description: 'orders, updated' })
    t.ok(registry.removeTool('order'), `round ${i}: registered, updated and removed`)
  }
})
