/**
 * Reading what `app.inject()` answered as the network client would: the JSON-RPC messages of a
 * JSON body or of an SSE stream read as it is written (with the last event id, for resumption),
 * and a JSON-RPC error turned into an {@link McpError} with the HTTP status.
 */
import type { Readable } from 'node:stream'
import { ErrorCode, McpError } from '../jsonrpc/errors.js'

/** @internal One answer of the server. */
export interface Answer {
  status: number
  headers: Record<string, unknown>
  /** Whether the answer is an SSE stream. */
  sse: boolean
  /** The whole body as text (a JSON answer). */
  text: () => Promise<string>
  /** The JSON-RPC messages of the answer (a JSON body, or the SSE stream's), in order. */
  messages: AsyncIterable<Record<string, any>>
  /** The id of the last SSE event read (for resumption). */
  lastEventId: () => string | undefined
}

/** @internal A JSON-RPC error body (or any other failed answer) as an {@link McpError}. */
export function answerError (status: number, body: string): Error {
  try {
    const msg = JSON.parse(body)
    if (typeof msg?.error?.code === 'number') return new McpError(msg.error.code, msg.error.message, msg.error.data, status)
  } catch {}
  return new McpError(ErrorCode.InternalError, `HTTP ${status}${body === '' ? '' : `: ${body}`}`, undefined, status)
}

/** @internal The messages of an answer: a JSON body, or an SSE stream read as it arrives. */
export function readAnswer (status: number, headers: Record<string, unknown>, stream: Readable): Answer {
  const sse = String(headers['content-type'] ?? '').startsWith('text/event-stream')
  let lastEventId: string | undefined
  let whole: Promise<string> | null = null
  const text = async (): Promise<string> => {
    whole ??= (async () => {
      const decoder = new TextDecoder()
      let t = ''
      for await (const chunk of stream) t += decoder.decode(chunk as Buffer, { stream: true })
      return t + decoder.decode()
    })()
    return await whole
  }
  async function * messages (): AsyncGenerator<Record<string, any>> {
    if (!sse) {
      const body = await text()
      if (body === '') return
      const parsed = JSON.parse(body) as unknown
      if (Array.isArray(parsed)) yield * parsed as Array<Record<string, any>>
      else yield parsed as Record<string, any>
      return
    }
    const decoder = new TextDecoder()
    let buffer = ''
    for await (const chunk of stream) {
      buffer += decoder.decode(chunk as Buffer, { stream: true }).replace(/\r\n?/g, '\n')
      let end: number
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const block = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        const data: string[] = []
        for (const line of block.split('\n')) {
          const colon = line.indexOf(':')
          if (colon === 0) continue // a comment (keep-alive)
          const field = colon === -1 ? line : line.slice(0, colon)
          const value = colon === -1 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1))
          if (field === 'id') lastEventId = value
          else if (field === 'data') data.push(value)
        }
        const text = data.join('\n')
        if (text !== '') yield JSON.parse(text) as Record<string, any>
      }
    }
  }
  return { status, headers, sse, text, messages: messages(), lastEventId: () => lastEventId }
}
