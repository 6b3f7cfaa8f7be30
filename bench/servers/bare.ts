/**
 * Baseline: a bare Fastify route that parses the same JSON-RPC body (Fastify's own JSON parser)
 * and answers a fixed `tools/call` result: the ceiling for a JSON request/response on Fastify.
 * `POST /sse` is the SSE ceiling: the same body, answered as `text/event-stream` with `steps`
 * progress notifications and the result, written straight to the socket.
 */
import Fastify from 'fastify'
import { serve } from './child.js'

interface Body { id?: unknown, params?: { arguments?: { text?: unknown, steps?: unknown }, _meta?: { progressToken?: unknown } } }

const app = Fastify({ logger: false })

app.post('/mcp', async (request) => {
  const body = request.body as Body
  return { jsonrpc: '2.0', id: body.id, result: { content: [{ type: 'text', text: 'hello' }] } }
})

app.post('/sse', async (request, reply) => {
  const body = request.body as Body
  const steps = Number(body.params?.arguments?.steps ?? 10)
  const progressToken = body.params?._meta?.progressToken ?? 1
  reply.hijack()
  reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' })
  for (let i = 1; i <= steps; i++) {
    reply.raw.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken, progress: i, total: steps } })}\n\n`)
  }
  reply.raw.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: body.id, result: { content: [{ type: 'text', text: `counted to ${steps}` }] } })}\n\n`)
})

await serve(app)
