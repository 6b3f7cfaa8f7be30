/**
 * The readiness route (`readinessRoute`): whether a load balancer should send this instance new
 * MCP requests. Not ready while `app.close()` drains it (new requests would get 503), or while its
 * sessions' store does not answer (every request that needs state would get 503). 200
 * `{ ready: true }`, else 503 `{ ready: false, reason }` with `Retry-After`.
 *
 * The store is asked with `exists()` of a fixed id no client can hold (a read that refreshes
 * nothing), bounded by {@link PROBE_TIMEOUT}. A flood of probes costs the store little: one probe
 * at a time, its answer kept for {@link PROBE_FRESH} ms. The answer carries no id, no principal,
 * no error text.
 */
import { performance } from 'node:perf_hooks'
import type { FastifyInstance } from 'fastify'
import type { SessionStore } from '../sessions/session-store.js'

/** How long the store may take to answer the probe (ms): longer is not ready. */
export const PROBE_TIMEOUT = 2000
/** How long one probe's answer is reused (ms). */
export const PROBE_FRESH = 1000
/** The id the probe asks about: valid for every bundled store, never minted (minted ids are random). */
const PROBE_ID = 'mcp-readiness-probe-0000'

export interface ReadinessAnswer {
  ready: boolean
  /** Why not: the drain has started, or the store did not answer in time. */
  reason?: 'draining' | 'store_unavailable'
}

/** What the readiness check looks at. */
export interface ReadinessSources {
  store: SessionStore
  draining: () => boolean
}

/** Answers readiness checks (see the module doc). */
export class Readiness {
  readonly #sources: ReadinessSources
  #probe: Promise<ReadinessAnswer> | null = null
  #answer: ReadinessAnswer | null = null
  #answeredAt = 0

  constructor (sources: ReadinessSources) {
    this.#sources = sources
  }

  /** Whether this instance is ready; never rejects. */
  async check (): Promise<ReadinessAnswer> {
    if (this.#sources.draining()) return { ready: false, reason: 'draining' }
    if (this.#answer !== null && performance.now() - this.#answeredAt < PROBE_FRESH) return this.#answer
    this.#probe ??= this.#ask().finally(() => { this.#probe = null })
    return await this.#probe
  }

  async #ask (): Promise<ReadinessAnswer> {
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<false>(resolve => { timer = setTimeout(() => { resolve(false) }, PROBE_TIMEOUT) })
    let answered: boolean
    try {
      answered = await Promise.race([this.#sources.store.exists(PROBE_ID).then(() => true, () => false), late])
    } catch {
      answered = false
    } finally {
      clearTimeout(timer)
    }
    const answer: ReadinessAnswer = answered ? { ready: true } : { ready: false, reason: 'store_unavailable' }
    this.#answer = answer
    this.#answeredAt = performance.now()
    // The drain may have started while the store was asked.
    return this.#sources.draining() ? { ready: false, reason: 'draining' } : answer
  }
}

/** Serves `GET <path>` (see the module doc); `retryAfter`: seconds, as the MCP routes' 503s say. */
export function serveReadiness (fastify: FastifyInstance, path: string, sources: ReadinessSources, retryAfter: number): void {
  const readiness = new Readiness(sources)
  fastify.get(path, async (_request, reply) => {
    const answer = await readiness.check()
    reply.header('cache-control', 'no-store')
    if (!answer.ready) reply.code(503).header('retry-after', String(retryAfter))
    return answer
  })
}
