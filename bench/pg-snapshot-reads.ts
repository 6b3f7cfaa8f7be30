/**
 * What reads without the lock (read-only snapshots, `tasks/get`) cost PostgreSQL: `store.load()`
 * of one record by a few readers at once, and the saves of one writer on the same record meanwhile.
 * Counted from the table's own statistics (its database is the run's own, so other load on the
 * server does not count): rows updated by the reads (each a write transaction, a WAL record and a
 * dead tuple), dead tuples added; and the writer's save time, idle and under the reads. Two
 * phases: the reads alone, then with one writer saving every 5 ms while they run.
 *
 *   npx tsx bench/pg-snapshot-reads.ts [--reads 2000] [--readers 4] [--writes 40] [--lib <dir>]
 *
 * `--lib` imports the store from another checkout's `lib/` (its `node_modules` must resolve; a
 * symlink to this one's does): the same run before and after a change.
 */
import { parseArgs } from 'node:util'
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import pg from 'pg'
import { createBenchDatabase } from './postgres.js'

const { values: args } = parseArgs({
  options: {
    reads: { type: 'string', default: '2000' },
    readers: { type: 'string', default: '4' },
    writes: { type: 'string', default: '40' },
    lib: { type: 'string', default: 'lib' }
  }
})

interface Store {
  create: (id: string, data: Record<string, unknown>) => Promise<void>
  load: (id: string) => Promise<unknown>
  save: (id: string, changes: { set: Record<string, unknown>, delete: string[] }) => Promise<string>
}

const PREFIX = 'snap_'

function median (xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  return Math.round(s[Math.floor(s.length / 2)]! * 100) / 100
}

async function tableStats (url: string): Promise<{ updated: number, hot: number, dead: number }> {
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    // The store's connections are closed: each flushed its statistics on exit.
    await new Promise(resolve => setTimeout(resolve, 500))
    await c.query('SELECT pg_stat_clear_snapshot()')
    const { rows } = await c.query(`SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables WHERE relname = '${PREFIX}state'`)
    const r = rows[0] as Record<string, string>
    return { updated: Number(r.n_tup_upd), hot: Number(r.n_tup_hot_upd), dead: Number(r.n_dead_tup) }
  } finally {
    await c.end()
  }
}

/** Saves, 5 ms apart, `n` of them or (`busy`) as many as fit while it says so. */
async function writes (store: Store, n: number, busy?: () => boolean): Promise<number[]> {
  const ms: number[] = []
  for (let i = 0; busy === undefined ? i < n : busy(); i++) {
    const start = performance.now()
    const r = await store.save('basket', { set: { items: ['tea', `item ${i}`] }, delete: [] })
    if (r !== 'ok') throw new Error(`save: ${r}`)
    ms.push(performance.now() - start)
    await new Promise(resolve => setTimeout(resolve, 5))
  }
  return ms
}

/** `reads` loads of the record by `readers` at once, and (`writer`) saves meanwhile; the table's counts after. */
async function phase (url: string, reads: number, readers: number, writer: boolean): Promise<Record<string, number>> {
  const pool = new pg.Pool({ connectionString: url, max: readers + 1 })
  const before = await tableStats(url)
  let saves: number[] = []
  let readMs = 0
  try {
    const store = new PgSessionStore({ pool, prefix: PREFIX })
    let left = reads
    const started = performance.now()
    const loops = Array.from({ length: readers }, async () => {
      while (left > 0) {
        left--
        if (await store.load('basket') === null) throw new Error('record gone')
      }
    })
    const busy = writer ? writes(store, 0, () => left > 0) : Promise.resolve([])
    await Promise.all(loops)
    readMs = performance.now() - started
    saves = await busy
  } finally {
    await pool.end()
  }
  const after = await tableStats(url)
  return {
    readMs: Math.round(readMs),
    rowsUpdatedByReads: after.updated - before.updated - saves.length,
    deadTuplesAdded: after.dead - before.dead,
    ...(writer ? { saves: saves.length, saveMedianMs: median(saves) } : {})
  }
}

let PgSessionStore: new (o: { pool: pg.Pool, prefix: string }) => Store

async function main (): Promise<void> {
  const reads = Number(args.reads)
  const readers = Number(args.readers)
  const nWrites = Number(args.writes)
  PgSessionStore = (await import(pathToFileURL(resolve(args.lib, 'sessions', 'pg-store.ts')).href) as { PgSessionStore: typeof PgSessionStore }).PgSessionStore
  const db = await createBenchDatabase()
  try {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 })
    const store = new PgSessionStore({ pool, prefix: PREFIX })
    await store.create('basket', { items: ['tea'] })
    const idle = await writes(store, nWrites)
    await pool.end()
    console.log(JSON.stringify({
      lib: args.lib,
      reads,
      readers,
      saveMedianMsIdle: median(idle),
      readsAlone: await phase(db.url, reads, readers, false),
      readsWithAWriter: await phase(db.url, reads, readers, true)
    }))
  } finally {
    await db.drop()
  }
}

main().then(() => process.exit(0), (err: unknown) => { console.error(err); process.exit(1) })
