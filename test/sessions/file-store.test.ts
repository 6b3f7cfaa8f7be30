import t, { type Test } from 'tap'
import { existsSync } from 'node:fs'
import { mkdtemp, readFile, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { FileSessionLock } from '../../lib/locks/file-lock.js'
import { FileSessionStore } from '../../lib/sessions/file-store.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { fencedStoreContract, storeContract } from '../../lib/testing/contracts/index.js'

async function tempDir (t: Pick<Test, 'teardown'>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-file-store-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** Sets a file's mtime `ms` milliseconds in the past. */
async function age (path: string, ms: number): Promise<void> {
  const then = new Date(Date.now() - ms)
  await utimes(path, then, then)
}

storeContract({
  test: t.test.bind(t),
  name: 'FileSessionStore',
  make: async ({ ttl }, t) => {
    return new FileSessionStore({ dir: await tempDir(t), ttl })
  }
})

// With the file lock: a save under a live lease, and after a destroy. Not the stale-holder cases
// (no leaseTtl): the file lock's leases never expire (an OS file lock is lost only with the
// process that holds it), so the store has no fence to check and ignores one.
fencedStoreContract({
  test: t.test.bind(t),
  name: 'FileSessionStore + FileSessionLock fenced save',
  make: async (_options, t) => {
    const dir = await tempDir(t)
    return { store: new FileSessionStore({ dir }), lock: new FileSessionLock({ dir }) }
  }
})

t.test('creates a missing directory, nested', async t => {
  const dir = join(await tempDir(t), 'a', 'b', 'sessions')
  const store = new FileSessionStore({ dir })
  t.ok(existsSync(dir))
  t.equal(store.dir, dir)
  t.equal(store.ttl, 3_600_000, 'default ttl: one hour')
})

t.test('a directory that cannot be written is an error at construction', async t => {
  const file = join(await tempDir(t), 'not-a-dir')
  await writeFile(file, '')
  t.throws(() => new FileSessionStore({ dir: join(file, 'sessions') }), { message: /is not writable/ })
  t.throws(() => new FileSessionStore({ dir: '' }), TypeError)
  const dir = await tempDir(t)
  t.throws(() => new FileSessionStore({ dir, ttl: 0 }), RangeError)
})

t.test('one JSON file per session holding {version, data}, written whole (no temp files left)', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir })
  const id = generateSessionId()
  await store.create(id, { a: 1 })
  await store.save(id, { set: { b: [2] }, delete: [] })
  t.same(await readdir(dir), [`${id}.json`])
  t.same(JSON.parse(await readFile(join(dir, `${id}.json`), 'utf8')), { version: 1, data: { a: 1, b: [2] } })
})

t.test('an id that is not path-safe never touches a path', async t => {
  const root = await tempDir(t)
  const dir = join(root, 'sessions')
  const store = new FileSessionStore({ dir })
  await writeFile(join(root, 'victim.json'), JSON.stringify({ version: 0, data: { secret: true } }))
  for (const id of ['../victim', '../../etc/passwd', 'short', 'a/b/cccccccccccccccc', 'x'.repeat(16) + '.json', '']) {
    t.equal(await store.load(id), null, `load ${JSON.stringify(id)}`)
    t.equal(await store.exists(id), false)
    t.equal(await store.save(id, { set: { pwned: true }, delete: [] }), 'gone')
    t.equal(await store.destroy(id), false)
    await t.rejects(store.create(id, {}), TypeError)
  }
  t.same(await readdir(dir), [], 'nothing created inside')
  t.same((await readdir(root)).sort(), ['sessions', 'victim.json'], 'nothing created or removed outside')
  t.same(JSON.parse(await readFile(join(root, 'victim.json'), 'utf8')).data, { secret: true })
})

t.test('load touches the file: its mtime is the idle TTL', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir, ttl: 10_000 })
  const id = generateSessionId()
  const path = join(dir, `${id}.json`)
  await store.create(id, {})
  await age(path, 8000)
  t.ok(await store.exists(id))
  t.ok(Date.now() - (await stat(path)).mtimeMs > 7000, 'exists does not touch')
  const before = Date.now()
  await store.load(id)
  // Set during the load (an ordering against the clock read just before, not a time budget).
  t.ok((await stat(path)).mtimeMs >= before - 1000, 'load does: the mtime is now, not 8 s ago')
  await age(path, 11_000)
  t.equal(await store.load(id), null, 'older than the TTL: expired')
})

t.test('a corrupt session file is an error, never "missing"', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir })
  const id = generateSessionId()
  await writeFile(join(dir, `${id}.json`), '{"version": 1, "da')
  await t.rejects(store.load(id), { message: /corrupt/ })
  await t.rejects(store.save(id, { set: {}, delete: [] }), { message: /corrupt/ })
})

t.test('a save from another instance never re-creates a session destroyed by this one', async t => {
  const dir = await tempDir(t)
  const a = new FileSessionStore({ dir })
  const b = new FileSessionStore({ dir })
  const id = generateSessionId()
  await a.create(id, { n: 1 })
  t.ok(await b.load(id))
  t.equal(await a.destroy(id), true)
  t.equal(await b.save(id, { set: { n: 2 }, delete: [] }), 'gone')
  t.same(await readdir(dir), [])
})

t.test('create over an expired file gc has not collected yet replaces it', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir, ttl: 5000 })
  const id = generateSessionId()
  await store.create(id, { old: true })
  await age(join(dir, `${id}.json`), 6000)
  await store.create(id, { fresh: true })
  t.same(await store.load(id), { data: { fresh: true }, version: 0 })
})

t.test('gc removes expired sessions only, returns their ids, and leaves foreign files alone', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir, ttl: 5000 })
  const expired = [generateSessionId(), generateSessionId()]
  const live = generateSessionId()
  for (const id of [...expired, live]) await store.create(id, { id })
  for (const id of expired) await age(join(dir, `${id}.json`), 6000)
  const foreign = ['important.lock', 'notes.txt', 'config.json', 'x.json', '.hidden', 'README']
  for (const name of foreign) {
    await writeFile(join(dir, name), 'keep me')
    await age(join(dir, name), 60_000)
  }
  t.same((await store.gc()).sort(), [...expired].sort())
  t.same((await readdir(dir)).sort(), [...foreign, `${live}.json`].sort())
  t.same((await store.load(live))?.data, { id: live })
  t.same(await store.gc(), [], 'nothing more to collect')
})

t.test('gc and lock files: removed with their expired session while gc holds them, kept while held', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir, ttl: 5000 })
  const lock = new FileSessionLock({ dir, timeout: 1000 })
  t.teardown(() => lock.close())
  const [free, busy, orphan, freshOrphan, live] = Array.from({ length: 5 }, () => generateSessionId()) as
    [string, string, string, string, string]
  for (const id of [free, busy, live]) {
    await store.create(id, {})
    const lease = await lock.acquire(id)
    await lease.release()
  }
  // Lock files of sessions destroyed since (a DELETE leaves the lock file for gc).
  for (const id of [orphan, freshOrphan]) await (await lock.acquire(id)).release()
  for (const id of [free, busy]) {
    await age(join(dir, `${id}.json`), 6000)
    await age(join(dir, `${id}.lock`), 6000)
  }
  await age(join(dir, `${orphan}.lock`), 6000)
  const held = await lock.acquire(busy) // a request is using this session right now
  await age(join(dir, `${busy}.json`), 6000)

  t.same(await store.gc(), [free], 'the held session is not collected')
  const names = await readdir(dir)
  t.notOk(names.includes(`${free}.json`) || names.includes(`${free}.lock`), 'expired session and its lock file removed')
  t.ok(names.includes(`${busy}.json`) && names.includes(`${busy}.lock`), 'held: both kept')
  t.notOk(names.includes(`${orphan}.lock`), 'an old lock file without a session is removed')
  t.ok(names.includes(`${freshOrphan}.lock`), 'a recent one is kept')
  t.ok(names.includes(`${live}.json`) && names.includes(`${live}.lock`), 'live session and lock file kept')

  await held.release()
  t.same(await store.gc(), [busy], 'collected once released')
  t.notOk((await readdir(dir)).includes(`${busy}.lock`))
  const again = await lock.acquire(busy, { timeout: 0 })
  t.ok(again, 'the lock still works after gc removed its file')
  await again.release()
})

t.test('gc looks after the lock files in lockDir when the lock uses another directory', async t => {
  const dir = await tempDir(t)
  const lockDir = await tempDir(t)
  const store = new FileSessionStore({ dir, lockDir, ttl: 5000 })
  const lock = new FileSessionLock({ dir: lockDir })
  t.teardown(() => lock.close())
  const id = generateSessionId()
  await store.create(id, {})
  await (await lock.acquire(id)).release()
  await age(join(dir, `${id}.json`), 6000)
  await age(join(lockDir, `${id}.lock`), 6000)
  t.same(await store.gc(), [id])
  t.same(await readdir(lockDir), [])
})

t.test('gc removes temp files of crashed writes once old, and never reports them', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir, ttl: 5000 })
  const id = generateSessionId()
  const oldTemp = `.${id}.0123456789abcdef.tmp`
  const newTemp = `.${id}.fedcba9876543210.tmp`
  await writeFile(join(dir, oldTemp), '{')
  await writeFile(join(dir, newTemp), '{')
  await age(join(dir, oldTemp), 6000)
  t.equal(await store.load(id), null, 'a temp file is not a session')
  t.same(await store.gc(), [])
  t.same(await readdir(dir), [newTemp])
})

t.test('gc rejects when the directory is gone (the caller logs it)', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir })
  await rm(dir, { recursive: true })
  await t.rejects(store.gc(), { code: 'ENOENT' })
})

t.test('onExpired: gc tells the listeners what it removed (however gc was called), until they stop', async t => {
  const dir = await tempDir(t)
  const store = new FileSessionStore({ dir, ttl: 5000 })
  const [expired, live] = [generateSessionId(), generateSessionId()]
  for (const id of [expired, live]) await store.create(id, {})
  await age(join(dir, `${expired}.json`), 6000)
  const told: string[][] = []
  const stop = store.onExpired((ids) => { told.push(ids) })
  store.onExpired(() => { throw new Error('a listener that throws') })
  t.same(await store.gc(), [expired], 'gc still returns what it removed')
  t.same(told, [[expired]], 'the listener was told, despite the one that throws')
  await store.destroy(live)
  t.same(await store.gc(), [])
  t.same(told, [[expired]], 'destroy() and an empty gc tell nothing')
  stop()
  const later = generateSessionId()
  await store.create(later, {})
  await age(join(dir, `${later}.json`), 6000)
  t.same(await store.gc(), [later])
  t.same(told, [[expired]], 'a listener that stopped is not told')
})
