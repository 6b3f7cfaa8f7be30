/**
 * Baseline for the 2026-07-28 wire: the official v2 server (`@modelcontextprotocol/server`
 * `createMcpHandler`, a fresh `McpServer` per request from the factory, as that API is built),
 * mounted in Fastify through the official Node adapter (`toNodeHandler` from
 * `@modelcontextprotocol/node`) with Fastify's parsed body. `responseMode` from `BENCH_SERVER`:
 * `json` (default; JSON responses) or `auto` (SSE once a progress notification is sent).
 */
import Fastify from 'fastify'
import { McpServer, createMcpHandler, type PerRequestResponseMode } from '@modelcontextprotocol/server'
import { toNodeHandler } from '@modelcontextprotocol/node'
import { z } from 'zod'
import { config, serve } from './child.js'

const cfg = config<{ mode?: PerRequestResponseMode }>()

function factory (): McpServer {
  const server = new McpServer({ name: 'bench', version: '1.0.0' })
  server.registerTool('echo', {
    description: 'Echoes its text.',
    inputSchema: z.object({ text: z.string() })
  }, async ({ text }) => ({ content: [{ type: 'text', text }] }))
  server.registerTool('progress', {
    description: 'Reports `steps` progress notifications, then answers.',
    inputSchema: z.object({ steps: z.number().int().min(1).max(1000) })
  }, async ({ steps }, ctx) => {
    const progressToken = ctx.mcpReq._meta?.progressToken
    if (progressToken !== undefined) {
      for (let i = 1; i <= steps; i++) {
        await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress: i, total: steps } })
      }
    }
    return { content: [{ type: 'text', text: `counted to ${steps}` }] }
  })
  return server
}

const handler = createMcpHandler(factory, { legacy: 'reject', responseMode: cfg.mode ?? 'json', keepAliveMs: 0 })
const node = toNodeHandler(handler)

const app = Fastify({ logger: false })
app.post('/mcp', async (request, reply) => {
  reply.hijack()
  await node(request.raw, reply.raw, request.body)
})
app.addHook('onClose', async () => { await handler.close() })

await serve(app)
