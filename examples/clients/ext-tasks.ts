/**
 * Tasks with the official tasks client (`@modelcontextprotocol/ext-tasks` on the v2 client,
 * protocol 2026-07-28) against the demo server: `long_job` runs as a task, asks a question midway
 * (the task turns `input_required`; `onInputRequest` answers, the client sends `tasks/update`),
 * and settles. On a 2026-07-28 server the extension needs `rawDispatch` and `v2RequestFraming`:
 * `ext-tasks-dispatch.ts` next to this file is the dispatch (copy both).
 * Run it: `node --import tsx examples/clients/ext-tasks.ts http://127.0.0.1:3000/mcp`.
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client'
import { createTaskSessionFromClient, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client'
import { rawDispatch } from './ext-tasks-dispatch.js'

const PROTOCOL = '2026-07-28'
const CLIENT_INFO = { name: 'ext-tasks-example', version: '1.0.0' }

export async function extTasksExample (url: string): Promise<string[]> {
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: { pin: PROTOCOL } } })
  await client.connect(new StreamableHTTPClientTransport(new URL(url)))
  const session = createTaskSessionFromClient(client, {
    endpointId: url,
    rawDispatch: rawDispatch(url),
    v2RequestFraming: { protocolVersion: PROTOCOL, clientInfo: CLIENT_INFO, clientCapabilities: { elicitation: {} } },
    // The task's questions (a real client asks its user).
    onInputRequest: async (request) => {
      if (request.kind !== 'elicitation') throw new Error(`not asked here: ${request.kind}`)
      return { action: 'accept', content: { confirm: true } } as never
    }
  })
  try {
    const execution = await session.callTool('long_job', { seconds: 2, ask: true })
    const seen: string[] = []
    const { outcome } = await execution.settle({ onEvent: (e) => { if (e.type === 'task') seen.push(e.task.status) } })
    const result = resultFromTaskOutcome(outcome) as { content: Array<{ text?: string }> }
    return [`kind: ${execution.kind}`, `statuses: ${[...new Set(seen)].join(' → ')}`, `result: ${result.content[0]?.text ?? ''}`]
  } finally {
    await session.close()
    await client.close()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) console.log((await extTasksExample(process.argv[2] ?? 'http://127.0.0.1:3000/mcp')).join('\n'))
