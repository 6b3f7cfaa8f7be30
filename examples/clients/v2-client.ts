/**
 * The official v2 client (`@modelcontextprotocol/client`) pinned to protocol 2026-07-28 (no
 * session: every request carries its `_meta`) against the demo server: a state handle, and a
 * question answered through an `input_required` round (the client retries the call with the
 * answer and the server's `requestState`; its handler below gives the answer).
 * Run it: `node --import tsx examples/clients/v2-client.ts http://127.0.0.1:3000/mcp`.
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client'

type Result = Awaited<ReturnType<Client['callTool']>>
const text = (r: Result): string => (r.content as Array<{ text?: string }>).map(c => c.text ?? '').join('')

export async function v2Example (url: string): Promise<string[]> {
  const client = new Client({ name: 'v2-example', version: '1.0.0' }, {
    capabilities: { elicitation: {} },
    versionNegotiation: { mode: { pin: '2026-07-28' } }
  })
  client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { name: 'Ada' } }))
  await client.connect(new StreamableHTTPClientTransport(new URL(url)))
  try {
    const created = await client.callTool({ name: 'basket_create', arguments: {} })
    const { basket } = created.structuredContent as { basket: string }
    await client.callTool({ name: 'basket_add', arguments: { basket, item: 'pear' } })
    const items = await client.callTool({ name: 'basket_get', arguments: { basket } })
    const greeting = await client.callTool({ name: 'ask_name', arguments: {} })
    return [`era: ${String(client.getProtocolEra())}`, `basket: ${text(items)}`, `greeting: ${text(greeting)}`]
  } finally {
    await client.close()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) console.log((await v2Example(process.argv[2] ?? 'http://127.0.0.1:3000/mcp')).join('\n'))
