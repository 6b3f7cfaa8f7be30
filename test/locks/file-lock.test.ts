import assert from 'node:assert/strict'
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, readdir, rm, stat, unlink, utimes, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { SessionLockError, SessionLockTimeoutError } from '../../lib/locks/errors.js'
import { FileSessionLock } from '../../lib/locks/file-lock.js'
import type { SessionLease } from '../../lib/locks/session-lock.js'
import { generateSessionId } from '../../lib/sessions/session-id.js'
import { lockContract, type CaseScope } from '../../lib/testing/contracts/index.js'
import { sleep } from '../helpers/time.js'

const here = dirname(fileURLToPath(import.meta.url))

async function tempDir (t: Pick<Test, 'teardown'>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-file-lock-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

function newLock (t: Pick<Test, 'teardown'>, dir: string, timeout?: number): FileSessionLock {
  const lock = new FileSessionLock({ dir, timeout })
  t.teardown(() => lock.close())
  return lock
}

lockContract({
  test: t.test.bind(t),
  name: 'FileSessionLock',
  // One directory per contract test, shared by the instances that test creates.
  make: (() => {
    const dirs = new WeakMap<CaseScope, Promise<string>>()
    return async ({ timeout }: { timeout?: number }, t: CaseScope) => {
      if (!dirs.has(t)) dirs.set(t, tempDir(t))
      return newLock(t, await (dirs.get(t) as Promise<string>), timeout)
    }
  })(),
  idle: (lock) => {
    assert.equal(lock.size, 0, 'no session held in this process')
    assert.equal(lock.pending, 0, 'no waiter left')
  },
  sharedBackend: true
})

t.test('creates a missing directory; an unwritable one or a negative timeout is refused', async t => {
  const root = await tempDir(t)
  const dir = join(root, 'x', 'locks')
  newLock(t, dir)
  t.ok(existsSync(dir))
  await writeFile(join(root, 'file'), '')
  t.throws(() => new FileSessionLock({ dir: join(root, 'file', 'locks') }), SessionLockError)
  t.throws(() => new FileSessionLock({ dir: join(root, 'file', 'locks') }), { message: /is not writable/ })
  t.throws(() => new FileSessionLock({ dir, timeout: -1 }), new RangeError('timeout must be greater than or equal to 0.'))
})

t.test('the lock file <dir>/<id>.lock exists while held and after release', async t => {
  const dir = await tempDir(t)
  const lock = newLock(t, dir)
  const id = generateSessionId()
  const lease = await lock.acquire(id)
  t.same(await readdir(dir), [`${id}.lock`])
  await lease.release()
  t.same(await readdir(dir), [`${id}.lock`], 'never deleted on release')
})

t.test('acquiring refreshes the mtime of the lock file', async t => {
  const dir = await tempDir(t)
  const lock = newLock(t, dir)
  const id = generateSessionId()
  const path = join(dir, `${id}.lock`)
  await writeFile(path, '')
  const twoHoursAgo = new Date(Date.now() - 2 * 3600_000)
  await utimes(path, twoHoursAgo, twoHoursAgo)
  const lease = await lock.acquire(id)
  t.ok(Date.now() - (await stat(path)).mtimeMs < 60_000, 'less than a minute old')
  await lease.release()
})

t.test('an id that is not path-safe is refused before it touches a path', async t => {
  const root = await tempDir(t)
  const lock = newLock(t, join(root, 'locks'))
  for (const id of ['../escape-xxxxxxxxxxxxx', 'short', 'a/b/cccccccccccccccc']) {
    await t.rejects(lock.acquire(id), { name: 'SessionLockError', code: 'MCP_SESSION_LOCK_INVALID_ID' })
    await t.rejects(lock.tryAcquire(id), { code: 'MCP_SESSION_LOCK_INVALID_ID' })
  }
  t.same(await readdir(root), ['locks'])
  t.same(await readdir(join(root, 'locks')), [])
})

t.test('a backend failure rejects at once with SessionLockError, not after the timeout', async t => {
  const dir = await tempDir(t)
  const lock = newLock(t, dir)
  await rm(dir, { recursive: true })
  const started = performance.now()
  const err = await lock.acquire(generateSessionId(), { timeout: 5000 }).then(() => null, (e: unknown) => e)
  t.ok(performance.now() - started < 500, 'at once')
  t.type(err, SessionLockError)
  t.notOk(err instanceof SessionLockTimeoutError)
  t.match((err as Error).message, /Failed to acquire the lock of session .*ENOENT/)
  t.equal(((err as Error).cause as NodeJS.ErrnoException).code, 'ENOENT', 'cause kept')
  t.equal(lock.size, 0, 'the in-process slot was given back')
})

t.test('the kernel lock dies with its process: after SIGKILL of the holder, acquire succeeds at once', async t => {
  const dir = await tempDir(t)
  const lock = newLock(t, dir)
  const id = generateSessionId()
  const child = spawn(process.execPath, ['--import', 'tsx', join(here, 'fixtures', 'hold-file-lock.ts'), dir, id],
    { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  const exited = new Promise(resolve => child.once('exit', (code, signal) => resolve(signal ?? code)))
  await new Promise<void>((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      if (out.includes(`locked ${id}`)) resolve()
    })
    child.once('exit', code => reject(new Error(`child exited early (${code}): ${out}`)))
  })
  t.equal(await lock.tryAcquire(id), null, 'held by the child')
  await t.rejects(lock.acquire(id, { timeout: 50 }), SessionLockTimeoutError)

  child.kill('SIGKILL')
  t.equal(await exited, 'SIGKILL')
  const started = performance.now()
  const lease = await lock.acquire(id, { timeout: 0 })
  t.ok(performance.now() - started < 1000, 'at once: no TTL to wait for')
  await lease.release()
})

t.test('a waiter on a lock file removed under it starts over on the new file', async t => {
  const dir = await tempDir(t)
  const [one, two, three] = [newLock(t, dir), newLock(t, dir), newLock(t, dir)]
  const id = generateSessionId()
  const path = join(dir, `${id}.lock`)
  const first = await one.acquire(id)
  let granted = false
  const waiting = two.acquire(id, { timeout: 5000 }).then(lease => { granted = true; return lease })
  await sleep(30)
  // gc does this while holding the lock: the file the holder and the waiter know leaves the path.
  await unlink(path)
  // The new file goes to whoever comes first: a newcomer, or the waiter at its next poll.
  const third = await three.tryAcquire(id)
  if (third === null) {
    const second = await waiting
    t.pass('the waiter, polling, locked the new file first')
    t.equal(await three.tryAcquire(id), null, 'and holds it: the newcomer cannot')
    await second.release()
    await first.release()
    return
  }
  t.pass('a newcomer locks the new file')
  await first.release()
  await sleep(200)
  t.equal(granted, false, 'the waiter did not take the removed file: two holders would exist')
  await third.release()
  const second = await waiting
  t.equal(await three.tryAcquire(id), null, 'the waiter now holds the file at the path')
  await second.release()
})

t.test('the inode re-check: a file removed between open and lock is not a lock', async t => {
  // Deterministic version of the race: the lock under test opens the old file, then (before it
  // locks it) the file is removed and a newcomer locks the new one at the path.
  const fsp = await import('node:fs/promises')
  let afterOpen: (() => Promise<void>) | undefined
  const { FileSessionLock: Hooked } = await t.mockImport<typeof import('../../lib/locks/file-lock.js')>(
    '../../lib/locks/file-lock.js', {
    'node:fs/promises': {
      ...fsp,
      open: async (...args: Parameters<typeof fsp.open>) => {
        const handle = await fsp.open(...args)
        const hook = afterOpen
        afterOpen = undefined
        await hook?.()
        return handle
      }
    }
  })
  const dir = await tempDir(t)
  const newcomer = newLock(t, dir)
  const hooked = new Hooked({ dir })
  t.teardown(() => hooked.close())
  const id = generateSessionId()
  await (await newcomer.acquire(id)).release() // the lock file exists
  let newcomerLease: SessionLease | undefined
  afterOpen = async () => {
    await unlink(join(dir, `${id}.lock`))
    newcomerLease = await newcomer.acquire(id, { timeout: 0 })
  }
  // Matched by name and code, not by class: t.mockImport loads the mocked module's whole import
  // graph afresh, so `Hooked` throws its own copy of SessionLockTimeoutError, not this file's.
  await t.rejects(hooked.acquire(id, { timeout: 200 }), { name: 'SessionLockTimeoutError', code: 'MCP_SESSION_LOCK_TIMEOUT' },
    'the removed file was locked, noticed, and the new (held) one waited for')
  t.ok(newcomerLease, 'the newcomer holds the file at the path')
  await newcomerLease?.release()
  const lease = await hooked.acquire(id, { timeout: 200 })
  await lease.release()
})

t.test('close() releases the kernel locks it holds', async t => {
  const dir = await tempDir(t)
  const [one, two] = [newLock(t, dir), newLock(t, dir)]
  const id = generateSessionId()
  await one.acquire(id)
  t.equal(await two.tryAcquire(id), null)
  await one.close()
  const lease = await two.tryAcquire(id)
  t.ok(lease, 'free once the holder closed')
  await lease?.release()
})
