/**
 * Baseline for the handshake-era wire with sessions: the official v1 SDK
 * (`@modelcontextprotocol/sdk`) `StreamableHTTPServerTransport` in stateful mode, one transport
 * (and one `McpServer`) per session kept in a Map, JSON responses (`enableJsonResponse`), mounted
 * in Fastify with Fastify's parsed body, as the SDK's own examples do for Express.
 */
import { randomUUID } from 'node:crypto'
import Fastify from 'fastify'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js'
import { z } from 'zod'
import { serve } from './child.js'

const transports = new Map<string, StreamableHTTPServerTransport>()

function newServer (): McpServer {
  const server = new McpServer({ name: 'bench', version: '1.0.0' })
  server.registerTool('echo', {
    description: 'Echoes its text.',
    inputSchema: { text: z.string() }
  }, async ({ text }) => ({ content: [{ type: 'text', text }] }))
  return server
}

const app = Fastify({ logger: false })

app.post('/mcp', async (request, reply) => {
  const sid = request.headers['mcp-session-id']
  let transport = typeof sid === 'string' ? transports.get(sid) : undefined
  if (transport === undefined) {
    if (sid !== undefined || !isInitializeRequest(request.body)) {
      reply.code(sid === undefined ? 400 : 404).send({ jsonrpc: '2.0', id: null, error: { code: -32000, message: sid === undefined ? 'Bad Request: no session' : 'Session not found' } })
      return reply
    }
    const created = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: true,
      onsessioninitialized: (id) => { transports.set(id, created) }
    })
    created.onclose = () => { if (created.sessionId !== undefined) transports.delete(created.sessionId) }
    await newServer().connect(created)
    transport = created
  }
  reply.hijack()
  await transport.handleRequest(request.raw, reply.raw, request.body)
  return reply
})

app.delete('/mcp', async (request, reply) => {
  const sid = request.headers['mcp-session-id']
  const transport = typeof sid === 'string' ? transports.get(sid) : undefined
  if (transport === undefined) return reply.code(404).send()
  reply.hijack()
  await transport.handleRequest(request.raw, reply.raw)
  return reply
})

await serve(app, { sessions: () => transports.size })
