/**
 * Running the plugin's Lua scripts on a standalone (or Sentinel) ioredis client as plain EVALSHA /
 * EVAL commands, without ioredis' `defineCommand` wrapper.
 *
 * Why: ioredis' Script builds, per call, a subclass Command whose `toWritable` makes a new reject
 * closure and looks the socket up in a WeakSet, an `args.unshift`, a `[sha, ...args]` copy and a
 * `.catch` promise for its NOSCRIPT retry. On the lock's request path (two scripts per request)
 * that was a tenth of the Redis path's CPU and allocation. Here a call is one `evalsha` command.
 *
 * Same commands on the wire as the wrapper: the first call of a script on a connection is EVAL
 * (which loads it), every later one EVALSHA; an EVALSHA answered NOSCRIPT (SCRIPT FLUSH, a server
 * restarted behind the same socket) is sent again as EVAL. Which connection a script is loaded on
 * is remembered per client and script as the socket (`client.stream`, replaced by ioredis on every
 * reconnection) of the last EVAL that succeeded. A Cluster has no single socket: it keeps ioredis'
 * wrapper (see `defineScripts`).
 */
import { createHash } from 'node:crypto'
import type { EvalshaSender } from './evalsha-command.js'

/** What {@link ScriptRunner} needs of an ioredis standalone client. */
export interface EvalClient {
  /** The current connection's socket (a new one on every reconnection). */
  readonly stream?: object
  evalsha: (sha: string, numberOfKeys: number, ...args: Array<string | number>) => Promise<unknown>
  eval: (lua: string, numberOfKeys: number, ...args: Array<string | number>) => Promise<unknown>
}

/** A Lua script and what sending it needs: its SHA-1 and the number of its KEYS. */
export class LuaScript {
  readonly sha: string
  constructor (readonly lua: string, readonly numberOfKeys: number) {
    this.sha = createHash('sha1').update(lua).digest('hex')
  }
}

function isNoScript (err: unknown): boolean {
  return err instanceof Error && err.message.includes('NOSCRIPT')
}

/** Sends one script on one client (see the module doc); one per client and script. */
export class ScriptRunner {
  /** The socket the script is known to be loaded on (undefined: none yet). */
  #loadedOn: object | undefined = undefined
  /** How EVALSHA is sent (`evalsha-command.ts`; one per client), or null: `client.evalsha()`. */
  readonly #send: EvalshaSender | null

  constructor (readonly client: EvalClient, readonly script: LuaScript, send: EvalshaSender | null = null) {
    this.#send = send
  }

  /**
   * Runs the script with its KEYS then ARGV in `args`; resolves the script's reply. Not async: the
   * command's promise and one `then` for the NOSCRIPT fallback, where an async function kept its
   * frame alive across every round trip.
   */
  run (args: Array<string | number>, numberOfKeys = this.script.numberOfKeys): Promise<unknown> {
    const client = this.client
    const stream = client.stream
    if (stream === undefined || stream !== this.#loadedOn) return this.#eval(args, numberOfKeys)
    const script = this.script
    let sent: Promise<unknown>
    try {
      sent = this.#send === null ? client.evalsha(script.sha, numberOfKeys, ...args) : this.#send(script.sha, numberOfKeys, args)
    } catch (err) {
      return Promise.reject(err)
    }
    return sent.then(undefined, (err: unknown) => {
      if (!isNoScript(err)) throw err
      if (this.#loadedOn === stream) this.#loadedOn = undefined
      return this.#eval(args, numberOfKeys)
    })
  }

  /**
   * Runs the script like {@link run}, and sends `follow()` right behind the command that ran it
   * on the same connection: behind the EVALSHA, or behind the EVAL of a NOSCRIPT fallback (so
   * what follows always comes after the write). Resolves the script's reply and `follow`'s.
   */
  runFollowed<F> (args: Array<string | number>, follow: () => Promise<F>, numberOfKeys = this.script.numberOfKeys): Promise<[unknown, F]> {
    const client = this.client
    const stream = client.stream
    if (stream === undefined || stream !== this.#loadedOn) return this.#evalFollowed(args, follow, numberOfKeys)
    const script = this.script
    let sent: Promise<unknown>
    let followed: Promise<F>
    try {
      sent = this.#send === null ? client.evalsha(script.sha, numberOfKeys, ...args) : this.#send(script.sha, numberOfKeys, args)
      followed = follow()
    } catch (err) {
      return Promise.reject(err)
    }
    // Handled now: it may fail (time out) before the script's reply comes, and is awaited after it.
    followed.catch(() => {})
    return sent.then(async reply => [reply, await followed] as [unknown, F], (err: unknown) => {
      if (!isNoScript(err)) throw err
      if (this.#loadedOn === stream) this.#loadedOn = undefined
      return this.#evalFollowed(args, follow, numberOfKeys)
    })
  }

  async #evalFollowed<F> (args: Array<string | number>, follow: () => Promise<F>, numberOfKeys: number): Promise<[unknown, F]> {
    const evaluated = this.#eval(args, numberOfKeys)
    const followed = follow()
    // Handled now (see runFollowed); a failed script makes the follower's outcome moot.
    followed.catch(() => {})
    const reply = await evaluated
    return [reply, await followed]
  }

  async #eval (args: Array<string | number>, numberOfKeys: number): Promise<unknown> {
    const client = this.client
    const stream = client.stream
    const reply = await client.eval(this.script.lua, numberOfKeys, ...args)
    // Loaded on the socket the command went out on, if the client still uses it.
    if (stream !== undefined && client.stream === stream) this.#loadedOn = stream
    return reply
  }
}
