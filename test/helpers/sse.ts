/**
 * Reading server-sent events in tests: parse a whole SSE text, or read a live response as it
 * arrives and wait for an event. The one SSE reader of the tests: every suite that talks to the
 * plugin over a socket uses it, and it keeps every event's id (for `Last-Event-ID`).
 */

export interface SseEvent {
  id?: string
  data?: string
  retry?: number
  comment?: string
  /** The JSON of `data`, when it parses. */
  json?: Record<string, any>
}

function parseBlock (block: string): SseEvent {
  const e: SseEvent = {}
  const data: string[] = []
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) { e.comment = line.slice(1).trim(); continue }
    const colon = line.indexOf(':')
    const field = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'id') e.id = value
    else if (field === 'data') data.push(value)
    else if (field === 'retry') e.retry = Number(value)
  }
  if (data.length > 0) {
    e.data = data.join('\n')
    if (e.data !== '') { try { e.json = JSON.parse(e.data) } catch {} }
  }
  return e
}

/** Parses a complete SSE text into its events (comment-only and retry-only blocks included). */
export function parseSse (text: string): SseEvent[] {
  return text.split('\n\n').filter(b => b.trim() !== '').map(parseBlock)
}

/** The stream part of an event id `<streamId>_<seq>`. */
export const eventStream = (id: string): string => id.slice(0, id.lastIndexOf('_'))

/** The sequence number of an event id `<streamId>_<seq>`. */
export const eventSeq = (id: string): number => Number(id.slice(id.lastIndexOf('_') + 1))

/** JSON-RPC messages of an SSE text. */
export function sseMessages (text: string): Array<Record<string, any>> {
  return parseSse(text).filter(e => e.json !== undefined).map(e => e.json!)
}

/** Reads a live SSE response incrementally, keeping every event (ids, comments, retry). */
export class SseReader {
  readonly events: SseEvent[] = []
  closed = false
  /** Set when the stream broke (a connection error) rather than ended. */
  error: unknown = null
  readonly status: number
  readonly #timeout: number
  #buffer = ''
  #wakers: Array<() => void> = []
  #reader: ReadableStreamDefaultReader<Uint8Array>

  /**
   * `timeout`: the default wait of `waitFor` / `waitClosed`, in ms (default 5,000: several server
   * processes may share 2 cores).
   */
  constructor (res: Response, options: { timeout?: number } = {}) {
    if (res.body === null) throw new Error('no body')
    this.status = res.status
    this.#timeout = options.timeout ?? 5000
    this.#reader = res.body.getReader()
    this.#pump().catch((err: unknown) => { this.error = err })
  }

  async #pump (): Promise<void> {
    const decoder = new TextDecoder()
    try {
      for (;;) {
        const { done, value } = await this.#reader.read()
        if (done) break
        this.#buffer += decoder.decode(value, { stream: true })
        let i
        while ((i = this.#buffer.indexOf('\n\n')) !== -1) {
          const block = this.#buffer.slice(0, i)
          this.#buffer = this.#buffer.slice(i + 2)
          if (block.trim() !== '') this.events.push(parseBlock(block))
        }
        this.#wake()
      }
    } finally {
      this.closed = true
      this.#wake()
    }
  }

  #wake (): void {
    const w = this.#wakers
    this.#wakers = []
    for (const f of w) f()
  }

  async #wait (left: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, left)
      this.#wakers.push(() => { clearTimeout(timer); resolve() })
    })
  }

  /** The first event (from index `from`) matching `pred`; rejects after `timeout` ms or when the stream closes first. */
  async waitFor (pred: (e: SseEvent) => boolean, timeout = this.#timeout, from = 0): Promise<SseEvent> {
    const deadline = Date.now() + timeout
    for (;;) {
      const found = this.events.slice(from).find(pred)
      if (found !== undefined) return found
      if (this.closed) throw new Error(`stream closed before the expected event; got ${JSON.stringify(this.events)}`)
      const left = deadline - Date.now()
      if (left <= 0) throw new Error(`timed out waiting for an event; got ${JSON.stringify(this.events)}`)
      await this.#wait(left)
    }
  }

  /** The first JSON-RPC message matching `pred` (see `waitFor`). */
  async waitForMessage (pred: (m: Record<string, any>) => boolean, timeout = this.#timeout): Promise<Record<string, any>> {
    return (await this.waitFor(e => e.json !== undefined && pred(e.json), timeout)).json!
  }

  /** Waits until the server ends the stream. */
  async waitClosed (timeout = this.#timeout): Promise<void> {
    const deadline = Date.now() + timeout
    while (!this.closed) {
      const left = deadline - Date.now()
      if (left <= 0) throw new Error(`timed out waiting for the stream to close; got ${JSON.stringify(this.events)}`)
      await this.#wait(left)
    }
  }

  /** JSON-RPC messages received so far. */
  get messages (): Array<Record<string, any>> {
    return this.events.filter(e => e.json !== undefined).map(e => e.json!)
  }

  /** Stops reading (the connection is released); never rejects. */
  async cancel (): Promise<void> {
    await this.#reader.cancel().catch(() => {})
  }
}
