/**
 * EVALSHA as the command `client.evalsha()` would build, without the two costs ioredis adds to
 * every command (for the script runner, `eval.ts`).
 *
 * 1. ioredis 6's (and 5.11's) `Command` constructor flattens its arguments with
 *    `Array.prototype.flat`, which V8 runs element by element through its generic runtime path,
 *    for a script's seven arguments twice per locked request (docs/performance.md). The command is built with no arguments
 *    and then handed its arguments, flat and stringified as the constructor would have left them.
 * 2. Its `commandTimeout` is kept by one timer per client (`command-timeouts.ts`) rather than a
 *    timer per command.
 * 3. Its `toWritable` reads the global `Buffer` twice per argument, and in Node that global is a
 *    getter: the command writes the same text
 *    with the module's `Buffer`.
 *
 * Only where `evalsha()` builds exactly that command: no `keyPrefix` (the constructor prefixes
 * the keys), no `showFriendlyErrorStack` (it records a stack), no `enableAutoPipelining` (the
 * command joins a pipeline instead), and a client of the ioredis the plugin loads (its `Command`
 * is then the client's own; an app may hold clients of another copy or major version). Elsewhere
 * there is no sender, and the runner calls `client.evalsha()`.
 */
import { Buffer } from 'node:buffer'
import { CommandTimeouts, type TimedCommand } from './command-timeouts.js'
import { ioredisIfInstalled } from './ioredis-module.js'

/** What a sender needs of an ioredis standalone client. */
export interface EvalshaClient {
  /** The client's options (ioredis): whether its `evalsha()` builds a plain command. */
  readonly options?: { keyPrefix?: unknown, showFriendlyErrorStack?: unknown, enableAutoPipelining?: unknown }
  sendCommand?: (command: never) => unknown
}

/** Sends EVALSHA of `sha` with its KEYS then ARGV in `args`; resolves the script's reply. */
export type EvalshaSender = (sha: string, numberOfKeys: number, args: ReadonlyArray<string | number>) => Promise<unknown>

/** What an ioredis `Command` is used for here: public fields, and the two timer methods it calls itself. */
interface IoredisCommand {
  readonly name: string
  args: string[]
  readonly promise: Promise<unknown>
  readonly isSettled?: boolean
  readonly isResolved?: boolean
  reject: (err: Error) => void
  /** Called by the client's `sendCommand` when it has a `commandTimeout` (again on a resend). */
  setTimeout (ms: number): void
  /** Called by the command itself when it settles (answered, rejected or timed out). */
  _clearTimers (): void
}

type CommandClass = new (name: string, args: string[], options: { replyEncoding: 'utf8' }) => IoredisCommand

/** A command whose timeout a {@link CommandTimeouts} keeps. */
type TimedEvalsha = IoredisCommand & TimedCommand & { timeouts: CommandTimeouts | null }
type TimedClass = new (name: string, args: string[], options: { replyEncoding: 'utf8' }) => TimedEvalsha

/** `\r\n$<n>\r\n`: what ends one argument and announces the next, n bytes long. */
function joint (n: number): string {
  return `\r\n$${n}\r\n`
}

/** `*<parts>\r\n$<bytes of name>\r\n<name>`: a command's text up to its first argument. */
function commandHead (name: string, parts: number): string {
  return `*${parts}${joint(Buffer.byteLength(name))}${name}`
}

/** {@link joint} for n below 256, made once. */
const JOINTS: readonly string[] = Array.from({ length: 256 }, (_, n) => joint(n))
/** {@link commandHead} of EVALSHA for n parts below 64, made on first use. */
const EVALSHA_HEADS: Array<string | undefined> = new Array(64).fill(undefined)

/** {@link commandHead}, from the cache when the command is an EVALSHA of fewer than 64 parts. */
function head (name: string, parts: number): string {
  if (name !== 'evalsha' || parts >= EVALSHA_HEADS.length) return commandHead(name, parts)
  return (EVALSHA_HEADS[parts] ??= commandHead(name, parts))
}

/**
 * The RESP text of a command from its head and arguments, each argument's length taken in
 * characters (`ascii`: right only when every character is ASCII) or in UTF-8 bytes.
 */
function respText (start: string, args: readonly string[], ascii: boolean): string {
  let out = start
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]
    const bytes = ascii ? arg.length : Buffer.byteLength(arg)
    out += bytes < JOINTS.length ? JOINTS[bytes] : joint(bytes)
    out += arg
  }
  return out + '\r\n'
}

/** The subclass of the loaded ioredis' `Command` (one ioredis is loaded: made once). */
let timed: { base: CommandClass, subclass: TimedClass } | undefined

function timedCommandClass (Base: CommandClass): TimedClass {
  if (timed?.base === Base) return timed.subclass
  class Timed extends Base implements TimedCommand {
    prev: TimedCommand | null = null
    next: TimedCommand | null = null
    deadline = 0
    watched = false
    timeouts: CommandTimeouts | null = null

    setTimeout (ms: number): void {
      if (this.timeouts === null) super.setTimeout(ms)
      else this.timeouts.watch(this, ms)
    }

    _clearTimers (): void {
      this.timeouts?.settled(this)
      super._clearTimers()
    }

    /**
     * The RESP text ioredis' own `toWritable` makes of a command whose arguments are all strings
     * (as here: its buffer mode is never on), made more cheaply:
     * - Each argument is joined to the one before by one ready-made `\r\n$<bytes>\r\n` string, not
     *   by five concatenations and a length printed anew.
     * - The text is first made as if every argument were ASCII (as many bytes as characters), and
     *   kept if the whole text's UTF-8 length is its length, which holds exactly when every
     *   character is ASCII. `Buffer.byteLength` of each argument is dear for a key or a token (a
     *   concatenated or sliced string takes Node's slow path); the text's is needed
     *   once, and flattening it now spares its write the same work. Otherwise the lengths are
     *   counted argument by argument, as ioredis does.
     */
    toWritable (): string {
      const start = head(this.name, this.args.length + 1)
      const text = respText(start, this.args, true)
      return Buffer.byteLength(text) === text.length ? text : respText(start, this.args, false)
    }
  }
  timed = { base: Base, subclass: Timed }
  return Timed
}

const NO_ARGS: string[] = []
const UTF8 = { replyEncoding: 'utf8' } as const

/** The sender of `client`'s EVALSHA commands (see the module doc), or null: `client.evalsha()`. */
export function evalshaSender (client: EvalshaClient): EvalshaSender | null {
  const options = client.options
  // Tested for truth, as ioredis tests them.
  if (options === undefined || Boolean(options.keyPrefix) || Boolean(options.showFriendlyErrorStack) ||
    Boolean(options.enableAutoPipelining) || typeof client.sendCommand !== 'function') return null
  const ioredis = ioredisIfInstalled()
  if (ioredis === null || typeof ioredis.Command !== 'function' || !(client instanceof ioredis.Redis)) return null
  const Command = timedCommandClass(ioredis.Command as CommandClass)
  const timeouts = new CommandTimeouts()
  return (sha, numberOfKeys, args) => {
    const command = new Command('evalsha', NO_ARGS, UTF8)
    command.timeouts = timeouts
    // Filled by index: pushing the arguments cost more.
    const n = args.length
    const flat = new Array<string>(n + 2)
    flat[0] = sha
    flat[1] = String(numberOfKeys)
    for (let i = 0; i < n; i++) {
      const a = args[i]
      flat[i + 2] = typeof a === 'string' ? a : String(a)
    }
    command.args = flat
    // Through the client's sendCommand of the moment (the plugin's write coalescing wraps it).
    void (client as { sendCommand: (command: IoredisCommand) => unknown }).sendCommand(command)
    return command.promise
  }
}
