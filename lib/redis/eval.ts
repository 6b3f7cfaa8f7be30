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
import { ioredisIfInstalled } from './ioredis-module.js'

/** What {@link ScriptRunner} needs of an ioredis standalone client. */
export interface EvalClient {
  /** The current connection's socket (a new one on every reconnection). */
  readonly stream?: object
  evalsha: (sha: string, numberOfKeys: number, ...args: Array<string | number>) => Promise<unknown>
  eval: (lua: string, numberOfKeys: number, ...args: Array<string | number>) => Promise<unknown>
  /** The client's options (ioredis): whether its `evalsha()` builds a plain command. */
  readonly options?: { keyPrefix?: unknown, showFriendlyErrorStack?: unknown, enableAutoPipelining?: unknown }
  sendCommand?: (command: IoredisCommand) => unknown
}

/** What an ioredis `Command` is used for here (its `args` and `promise` are public fields). */
interface IoredisCommand {
  args: string[]
  readonly promise: Promise<unknown>
}

/** ioredis' `Command` class. */
type CommandClass = new (name: string, args: string[], options: { replyEncoding: 'utf8' }) => IoredisCommand

const NO_ARGS: string[] = []

/**
 * How a runner sends EVALSHA: the command `client.evalsha()` would build, built without its one
 * costly step. ioredis 6's `Command` constructor flattens its arguments with
 * `Array.prototype.flat`, which V8 runs element by element through its generic runtime path:
 * ~100 ns per argument, ~700 ns for a script's seven, twice per locked request (callgrind: 16k
 * of the Redis path's ~280k instructions per request). The command is built with no arguments
 * and then handed its arguments, flat and stringified as the constructor would have left them
 * (ioredis 5.11 builds its commands the same way).
 *
 * Only where `evalsha()` builds exactly that command: no `keyPrefix` (the constructor prefixes
 * the keys), no `showFriendlyErrorStack` (it records a stack), no `enableAutoPipelining` (the
 * command joins a pipeline instead), and a client of the ioredis the plugin loads (its `Command`
 * is then the client's own; an app may hold clients of another copy or major version). Elsewhere
 * `null`: the runner calls `client.evalsha()`.
 */
function commandSender (client: EvalClient): ((sha: string, numberOfKeys: number, args: Array<string | number>) => Promise<unknown>) | null {
  const options = client.options
  // Tested for truth, as ioredis tests them.
  if (options === undefined || Boolean(options.keyPrefix) || Boolean(options.showFriendlyErrorStack) ||
    Boolean(options.enableAutoPipelining) || typeof client.sendCommand !== 'function') return null
  const ioredis = ioredisIfInstalled()
  if (ioredis === null || typeof ioredis.Command !== 'function' || !(client instanceof ioredis.Redis)) return null
  const Cmd = ioredis.Command as CommandClass
  return (sha, numberOfKeys, args) => {
    const command = new Cmd('evalsha', NO_ARGS, { replyEncoding: 'utf8' })
    const flat = [sha, String(numberOfKeys)]
    for (const a of args) flat.push(typeof a === 'string' ? a : String(a))
    command.args = flat
    // Through the client's own sendCommand (the plugin's write coalescing wraps it).
    void client.sendCommand?.(command)
    return command.promise
  }
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
  /** How EVALSHA is sent ({@link commandSender}), or null: `client.evalsha()`. */
  readonly #send: ReturnType<typeof commandSender>

  constructor (readonly client: EvalClient, readonly script: LuaScript) {
    this.#send = commandSender(client)
  }

  /** Runs the script with its KEYS then ARGV in `args`; resolves the script's reply. */
  async run (args: Array<string | number>): Promise<unknown> {
    const client = this.client
    const stream = client.stream
    if (stream === undefined || stream !== this.#loadedOn) return await this.#eval(args)
    try {
      const script = this.script
      return await (this.#send === null ? client.evalsha(script.sha, script.numberOfKeys, ...args) : this.#send(script.sha, script.numberOfKeys, args))
    } catch (err) {
      if (!isNoScript(err)) throw err
      if (this.#loadedOn === stream) this.#loadedOn = undefined
      return await this.#eval(args)
    }
  }

  async #eval (args: Array<string | number>): Promise<unknown> {
    const client = this.client
    const stream = client.stream
    const reply = await client.eval(this.script.lua, this.script.numberOfKeys, ...args)
    // Loaded on the socket the command went out on, if the client still uses it.
    if (stream !== undefined && client.stream === stream) this.#loadedOn = stream
    return reply
  }
}
