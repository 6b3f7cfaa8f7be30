/**
 * The official v1 SDK client (`@modelcontextprotocol/sdk`, protocol 2025-11-25: a session) against
 * the demo server: a state handle (`basket_create`, `basket_add`), a question the user answers
 * (`ask_name`: the server's `elicitation/create` on the call's stream), and a per-session counter.
 * Run it: `node --import tsx examples/clients/v1-sdk.ts http://127.0.0.1:3000/mcp`.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'

type Result = Awaited<ReturnType<Client['callTool']>>
const text = (r: Result): string => (r.content as Array<{ text?: string }>).map(c => c.text ?? '').join('')

export async function v1Example (url: string): Promise<string[]> {
  const client = new Client({ name: 'v1-example', version: '1.0.0' }, { capabilities: { elicitation: {} } })
  // The user's answer to the server's question (a real client asks its user).
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'Ada' } }))
  await client.connect(new StreamableHTTPClientTransport(new URL(url)))
  try {
    const created = await client.callTool({ name: 'basket_create', arguments: {} })
    const { basket } = created.structuredContent as { basket: string }
    await client.callTool({ name: 'basket_add', arguments: { basket, item: 'pear' } })
    const items = await client.callTool({ name: 'basket_get', arguments: { basket } })
    const greeting = await client.callTool({ name: 'ask_name', arguments: {} })
    const counter = await client.callTool({ name: 'counter_add', arguments: { by: 2 } })
    return [`basket: ${text(items)}`, `greeting: ${text(greeting)}`, `counter: ${text(counter)}`]
  } finally {
    await client.close()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) console.log((await v1Example(process.argv[2] ?? 'http://127.0.0.1:3000/mcp')).join('\n'))
