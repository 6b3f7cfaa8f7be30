/**
 * How a log line, an error message or a span shows a session, handle or task id: its first
 * characters only. A session id is a bearer secret when no authentication is configured, a handle
 * or task id is one for whoever holds it; a prefix still tells one from another in the logs.
 */

/** Characters of an id a log line keeps. */
const SHOWN = 8

/**
 * `abcdefgh…` for an id; a state key `~<kind>~<id>` keeps its kind (`~basket~abcdefgh…`). Never
 * more than half of the id, so a short one is not shown whole either.
 */
export function shownId (id: string): string {
  if (id.startsWith('~')) {
    const at = id.indexOf('~', 1)
    if (at > 0) return `${id.slice(0, at + 1)}${cut(id.slice(at + 1))}`
  }
  return cut(id)
}

function cut (id: string): string {
  return `${id.slice(0, Math.min(SHOWN, Math.floor(id.length / 2)))}…`
}
