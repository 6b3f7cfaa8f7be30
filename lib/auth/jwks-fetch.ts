/**
 * The JWKS fetch that jose's remote key set calls (its `customFetch`), with a backoff after a
 * failure. jose's own cooldown counts from the last *successful* fetch: while the JWKS is down,
 * every token with an unknown `kid` (or every token, before the first success) would fetch again.
 * Here a failed fetch — no answer, a timeout, a status other than 200, a body that is not a key
 * set — closes the door for `retryMs`, doubled at each failure in a row up to `maxRetryMs`; a
 * fetch asked for while it is closed fails at once with {@link JwksBackoff}, touching nothing.
 *
 * Each failed fetch is reported once: {@link JwksFetchGate.takeFailure} hands it to the first
 * caller that asks, so the requests that shared it (jose runs one fetch for all waiting) or were
 * refused during the backoff log nothing above debug.
 */

/** A fetch refused because the last one failed and its backoff has not run out. */
export class JwksBackoff extends Error {
  constructor (readonly retryInMs: number) {
    super(`JWKS fetch skipped: the last one failed; the next may start in ${retryInMs} ms`)
    this.name = 'JwksBackoff'
  }
}

type FetchLike = (url: string, init: { headers: Headers, method: 'GET', redirect: 'manual', signal: AbortSignal }) => Promise<Response>

export class JwksFetchGate {
  private failuresInARow = 0
  private closedUntil = 0
  private unreported: unknown = undefined

  constructor (private readonly retryMs: number, private readonly maxRetryMs: number, private readonly fetchImpl: FetchLike = fetch) {}

  /** jose's `customFetch`. */
  readonly fetch: FetchLike = async (url, init) => {
    const wait = this.closedUntil - Date.now()
    if (wait > 0) throw new JwksBackoff(wait)
    try {
      const res = await this.fetchImpl(url, init)
      if (res.status !== 200) throw new Error(`JWKS answered HTTP ${res.status}`)
      const text = await res.text()
      const body = JSON.parse(text) as { keys?: unknown } | null
      if (body === null || typeof body !== 'object' || !Array.isArray(body.keys)) throw new Error('JWKS answered something that is not a key set')
      this.failuresInARow = 0
      this.closedUntil = 0
      return new Response(text, { status: 200, headers: { 'content-type': 'application/json' } })
    } catch (err) {
      this.failed(err)
      throw err
    }
  }

  /** The failure of a fetch not yet reported, once; `undefined` otherwise. */
  takeFailure (): unknown {
    const err = this.unreported
    this.unreported = undefined
    return err
  }

  private failed (err: unknown): void {
    this.failuresInARow++
    const backoff = Math.min(this.retryMs * 2 ** Math.min(this.failuresInARow - 1, 30), Math.max(this.maxRetryMs, this.retryMs))
    this.closedUntil = Date.now() + backoff
    this.unreported = err ?? new Error('JWKS fetch failed')
  }
}
