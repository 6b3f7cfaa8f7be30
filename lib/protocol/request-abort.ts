/**
 * The cancellation of one request (or of one POST), with its `AbortSignal` made only when someone
 * asks for it. Most handlers never look at `ctx.signal`, and an `AbortController` with its signal
 * costs more than the rest of a small request's bookkeeping; the plugin's own checks read
 * {@link RequestAbort.aborted}, a plain field.
 */
export class RequestAbort {
  #controller: AbortController | null = null
  #aborted = false
  #reason: unknown = undefined
  #followers: Set<RequestAbort> | null = null

  /** Whether it was aborted. */
  get aborted (): boolean { return this.#aborted }

  /** Why it was aborted (`undefined` until then). */
  get reason (): unknown { return this.#reason }

  /** The signal handlers see; made on first access (already aborted when this is). */
  get signal (): AbortSignal {
    if (this.#controller === null) {
      this.#controller = new AbortController()
      if (this.#aborted) this.#controller.abort(this.#reason)
    }
    return this.#controller.signal
  }

  /** Aborts with `reason`, and every follower with it; later calls do nothing. */
  abort (reason: unknown): void {
    if (this.#aborted) return
    this.#aborted = true
    this.#reason = reason
    this.#controller?.abort(reason)
    if (this.#followers !== null) for (const f of this.#followers) f.abort(reason)
  }

  /**
   * Makes `follower` abort with this one (a request of a batch follows its POST). Returns the
   * unlink, to call when the follower is done.
   */
  follow (follower: RequestAbort): () => void {
    if (this.#aborted) {
      follower.abort(this.#reason)
      return noop
    }
    this.#followers ??= new Set()
    this.#followers.add(follower)
    return () => { this.#followers?.delete(follower) }
  }
}

function noop (): void {}
