/**
 * Reading V8's `--trace-gc-nvp` output (one line of `name=value` pairs per collection) for
 * bench/gc.ts: what a window of requests allocated and what collecting it cost.
 */

/** One collection: its kind and its numeric fields (`pause` in ms, `allocated` in bytes, …). */
export interface GcEvent {
  /** `s` (scavenge: the young generation), `mc` (mark-compact: the whole heap), or V8's other kinds. */
  kind: string
  fields: Record<string, number>
}

/** The collections of a stretch of `--trace-gc-nvp` output; lines that are not one are skipped. */
export function parseGcTrace (text: string): GcEvent[] {
  const events: GcEvent[] = []
  for (const line of text.split('\n')) {
    const kind = / gc=(\w+)/.exec(line)?.[1]
    if (kind === undefined) continue
    const fields: Record<string, number> = {}
    for (const m of line.matchAll(/([\w.]+)=(-?[\d.]+)(?=\s|$|%)/g)) fields[m[1]] = Number(m[2])
    events.push({ kind, fields })
  }
  return events
}

/** What collecting a window's garbage cost, per request. */
export interface GcSummary {
  /** Bytes allocated on V8's heap per request (each collection reports what was allocated since the one before). */
  allocatedBytesPerRequest: number
  /** Bytes moved to the old generation per request: what lived through two scavenges. */
  promotedBytesPerRequest: number
  scavengesPer1000Requests: number
  markCompacts: number
  /** Time the JavaScript thread stood still for collections, per request (µs). */
  pauseMicrosPerRequest: number
  /** Collection work on V8's helper threads per request (µs; the `background.*` fields). */
  backgroundMicrosPerRequest: number
}

/**
 * Sums the collections of a window of `requests` requests. Each collection reports what was
 * allocated since the one before, so the first counts some allocation from before the window and
 * what follows the last is not counted: over tens of collections the two about cancel.
 */
export function summarizeGc (events: GcEvent[], requests: number): GcSummary {
  let allocated = 0
  let promoted = 0
  let pause = 0
  let background = 0
  let scavenges = 0
  let markCompacts = 0
  for (const e of events) {
    allocated += e.fields.allocated ?? 0
    promoted += e.fields.promoted ?? 0
    pause += e.fields.pause ?? 0
    for (const [k, v] of Object.entries(e.fields)) if (k.startsWith('background.')) background += v
    if (e.kind === 's') scavenges++
    else if (e.kind === 'mc') markCompacts++
  }
  /** `value / requests`, rounded to `decimals` places. */
  const per = (value: number, decimals = 0): number => Math.round(value / requests * 10 ** decimals) / 10 ** decimals
  return {
    allocatedBytesPerRequest: per(allocated),
    promotedBytesPerRequest: per(promoted),
    scavengesPer1000Requests: per(scavenges * 1000, 2),
    markCompacts,
    // The trace's times are in ms.
    pauseMicrosPerRequest: per(pause * 1000, 1),
    backgroundMicrosPerRequest: per(background * 1000, 1)
  }
}
