/**
 * Reading a callgrind dump (the format valgrind documents as "Callgrind Format"), for what
 * bench/instructions.ts reports beside its totals. Names are compressed: a function is named once,
 * `fn=(12) name` or `cfn=(12) name`, and referred to as `(12)` after; a call is a `cfn=` line, a
 * `calls=<count> <target>` line and the line of its inclusive cost.
 */

/** How many calls the dump records to functions whose name matches `name`, from any caller. */
export function callsTo (dump: string, name: RegExp): number {
  const ids = new Set<string>()
  let total = 0
  let counting = false
  for (const line of dump.split('\n')) {
    const def = /^c?fn=\((\d+)\)(?: (.*))?$/.exec(line)
    if (def !== null) {
      if (def[2] !== undefined && name.test(def[2])) ids.add(def[1])
      counting = line.startsWith('cfn=') && ids.has(def[1])
      continue
    }
    if (counting && line.startsWith('calls=')) total += Number(line.slice(6, line.indexOf(' ')))
    counting = false
  }
  return total
}

/**
 * V8's runtime function for a computed key of an object literal. With the inline cache of such a
 * literal working, optimized code defines those keys itself and never calls it on the request
 * path; Node's `process.nextTick` builds every tick object with two computed keys
 * (`{ [async_id_symbol]: …, [trigger_async_id_symbol]: …, callback, args }`). In some callgrind
 * runs that site is left calling the runtime for every tick: ~18 calls and ~23k instructions per
 * request more, in Node's code, for the bare route and the plugin alike.
 */
export const SLOW_LITERAL = /Runtime_DefineKeyedOwnPropertyInLiteral/
