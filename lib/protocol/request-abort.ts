/**
 * The cancellation of one request (or of one POST), with its `AbortSignal` made only when someone
 * asks for it. Most handlers never look at `ctx.signal`, and an `AbortController` with its signal
 * costs more than the rest of a small request's bookkeeping; the plugin's own checks read
 * {@link RequestAbort.aborted}, which needs neither the controller nor a listener.
 */
import type { ServerResponse } from 'node:http'

/** @internal A request's cancellation (see the file comment). */
export class RequestAbort {
  #controller: AbortController | null = null
  #aborted = false
  #reason: unknown = undefined
  /** The first follower (a POST's request: mostly the only one), then a set for the others (a batch). */
  #follower: RequestAbort | null = null
  #followers: Set<RequestAbort> | null = null
  #leader: RequestAbort | null = null
  #response: ServerResponse | null = null
  #answer: Answer | null = null
  #onClose: (() => void) | null = null

  /**
   * Aborts when the connection of `response` closes while the answer is neither sent nor
   * resumable (a client that cannot come back for it). No listener is added until a signal is asked
   * for, here or by a follower: until then {@link aborted} looks at the response itself.
   */
  watch (response: ServerResponse, answer: Answer): void {
    this.#response = response
    this.#answer = answer
  }

  /** Stops watching the response (the request is over). */
  unwatch (): void {
    if (this.#onClose !== null) this.#response?.off('close', this.#onClose)
    this.#onClose = null
    this.#response = null
  }

  #poll (): void {
    if (this.#aborted) return
    const leader = this.#leader
    if (leader !== null) { leader.#poll(); if (this.#aborted) return }
    const res = this.#response
    const answer = this.#answer
    // `destroyed` turns true when the connection closes (or once the response was sent).
    if (res !== null && answer !== null && res.destroyed && !answer.done && !answer.resumable) {
      this.abort(new Error('client went away'))
    }
  }

  /** Adds the close listener of a watched response (once). */
  #arm (): void {
    if (this.#response === null || this.#onClose !== null) return
    this.#onClose = () => { this.#poll() }
    this.#response.on('close', this.#onClose)
  }

  /** Whether it was aborted. */
  get aborted (): boolean {
    this.#poll()
    return this.#aborted
  }

  /** Why it was aborted (`undefined` until then). */
  get reason (): unknown { return this.#reason }

  /** The signal handlers see; made on first access (already aborted when this is). */
  get signal (): AbortSignal {
    if (this.#controller === null) {
      this.#controller = new AbortController()
      this.#poll()
      if (this.#aborted) this.#controller.abort(this.#reason)
      else {
        this.#arm()
        if (this.#leader !== null) this.#leader.#arm()
      }
    }
    return this.#controller.signal
  }

  /** Aborts with `reason`, and every follower with it; later calls do nothing. */
  abort (reason: unknown): void {
    if (this.#aborted) return
    this.#aborted = true
    this.#reason = reason
    this.#controller?.abort(reason)
    this.#follower?.abort(reason)
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
    follower.#leader = this
    if (this.#follower === null && this.#followers?.has(follower) !== true) this.#follower = follower
    else if (this.#follower !== follower) (this.#followers ??= new Set()).add(follower)
    return () => {
      if (this.#follower === follower) this.#follower = null
      else this.#followers?.delete(follower)
      follower.#leader = null
    }
  }
}

/** The state of a watched response's answer ({@link ResponseChannel} has both). */
export interface Answer {
  /** The answer was sent. */
  readonly done: boolean
  /** A client that lost the connection can still fetch the answer (GET + Last-Event-ID). */
  readonly resumable: boolean
}

function noop (): void {}
