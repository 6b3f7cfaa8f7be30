/**
 * Deep JSON for the fuzzers, without recursion: a marker string stands for `depth` nested arrays
 * in a generated value, and {@link withDeep} replaces it in the body text (JSON.stringify of the
 * value itself would overflow the stack). {@link textDepth} measures what a body text nests to,
 * independently of the plugin's own scan.
 */

/** A marker for `depth` nested arrays (around `1`). */
export const deepMarker = (depth: number): string => `\u0000deep:${depth}\u0000`

const MARKER = /"\\u0000deep:(\d+)\\u0000"/g

/** The body text with every (serialized) marker replaced by its nested arrays. */
export function withDeep (text: string): string {
  return text.replace(MARKER, (_m, d: string) => '['.repeat(Number(d)) + '1' + ']'.repeat(Number(d)))
}

/** How deep the arrays and objects of a JSON text nest (brackets inside strings not counted). */
export function textDepth (text: string): number {
  let depth = 0
  let max = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (inString) {
      if (c === '\\') i++
      else if (c === '"') inString = false
    } else if (c === '"') inString = true
    else if (c === '[' || c === '{') max = Math.max(max, ++depth)
    else if (c === ']' || c === '}') depth--
  }
  return max
}
