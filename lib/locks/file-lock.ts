/**
 * `FileSessionLock`: the per-session lock of the workers of one machine. Each session has a lock
 * file `<dir>/<id>.lock` on which the holder takes a kernel lock (open-file-description lock on
 * Linux, flock on macOS, LockFileEx on Windows, through `fs-native-extensions`). The kernel drops
 * it when the holder's process dies, however it dies, so there is no TTL, no renewal and no
 * fencing: the lease can only be lost together with the process that holds it.
 *
 * - Waiting: an in-process FIFO first (one contender per process, arrival order), then
 *   non-blocking `tryLock` polled with backoff. Never `waitForLock`: it parks a thread of a small
 *   pool per waiter and cannot be cancelled.
 * - Lock files are not deleted on release. `FileSessionStore.gc()` removes the lock file of an
 *   expired session, and only while it holds that lock; a waiter that meanwhile locked the removed
 *   file notices (its descriptor no longer names the path) and starts over on the new file.
 * - Acquiring refreshes the lock file's mtime, so gc can tell a live session's file from an
 *   abandoned one.
 * - The addon is an optional dependency, loaded on first use (`new FileSessionLock`, or gc finding
 *   a lock file), never by importing the package: memory and Redis users do not load it, nor need
 *   it installed.
 */
import { accessSync, constants as fsConstants, mkdirSync } from 'node:fs'
import { open, stat, type FileHandle } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { performance } from 'node:perf_hooks'
import { join, resolve } from 'node:path'
import { SteadySet } from '../util/steady-map.js'
import {
  SessionLockError, SessionLockErrorCodes, SessionLockTimeoutError, alreadyHeldError, backendError, closedError
} from './errors.js'
import { KeyedFifo, type FifoRelease } from './keyed-fifo.js'
import { Lease } from './lease.js'
import { isFileSafeKey } from './file-safe-id.js'
import { DEFAULT_LOCK_TIMEOUT, checkTimeout, delay, fullJitter } from './wait.js'
import { signalOf, type AcquireOptions, type SessionLease, type SessionLock } from './session-lock.js'
import { shownId } from '../util/shown-id.js'

interface NativeFileLocks {
  /** Exclusive non-blocking lock on the whole file; false when another descriptor holds it. */
  tryLock (fd: number): boolean
}

const ADDON = 'fs-native-extensions'
let nativeLocks: NativeFileLocks | undefined

/**
 * The kernel-lock addon, loaded once, on first use.
 * @throws {SessionLockError} naming the package when it is not installed or does not load here.
 */
function loadNativeLocks (): NativeFileLocks {
  if (nativeLocks !== undefined) return nativeLocks
  try {
    // CommonJS without type declarations.
    nativeLocks = createRequire(import.meta.url)(ADDON) as NativeFileLocks
  } catch (err) {
    const notInstalled = (err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' &&
      (err as Error).message.startsWith(`Cannot find module '${ADDON}'`)
    throw new SessionLockError(notInstalled
      ? `FileSessionLock needs the optional dependency "${ADDON}", which is not installed ` +
        `(installs with --omit=optional leave it out). Install it: npm install ${ADDON}`
      : `FileSessionLock needs the native addon "${ADDON}", which failed to load on ` +
        `${process.platform}-${process.arch}: ${(err as Error).message}. Reinstall it (npm install ${ADDON}), ` +
        'or use MemorySessionLock or RedisSessionLock where it cannot load.',
    { cause: err })
  }
  return nativeLocks
}

/** First and largest delay between two polls of a busy lock file (ms). */
const POLL_BASE = 2
const POLL_CAP = 50
/** How often tryAcquire starts over when the file it locked was removed under it. */
const TRY_RESTARTS = 3

/** Options of {@link FileSessionLock}. */
export interface FileSessionLockOptions {
  /** Directory of the lock files; created if missing. Usually the `FileSessionStore`'s `dir`. */
  dir: string
  /** Default acquire timeout in milliseconds (default 30,000; `0` tries once). Must be >= 0. */
  timeout?: number
}

/** Outcome of one attempt on a lock file. */
type Attempt = { locked: true, handle: FileHandle } | { locked: false, reason: 'busy' | 'moved' }

/** Session lock for the processes of one machine (kernel lock on a file per session). */
export class FileSessionLock implements SessionLock {
  readonly timeout: number
  /** Absolute directory of the lock files. */
  readonly dir: string
  readonly #fifo = new KeyedFifo()
  /** A lease enters and leaves on every request: a set whose table never empties. */
  readonly #leases = new SteadySet<Lease>()
  readonly #closing = new AbortController()

  /**
   * Loads the `fs-native-extensions` addon, creates the directory and checks it is writable
   * (synchronously: construction only).
   * @throws {RangeError} when `timeout` is negative.
   * @throws {SessionLockError} when the addon is not installed or does not load, or the directory
   * cannot be created or written.
   */
  constructor (options: FileSessionLockOptions) {
    loadNativeLocks()
    this.timeout = checkTimeout(options.timeout ?? DEFAULT_LOCK_TIMEOUT)
    if (typeof options.dir !== 'string' || options.dir === '') throw new TypeError('dir must be a non-empty string.')
    this.dir = resolve(options.dir)
    try {
      mkdirSync(this.dir, { recursive: true })
      accessSync(this.dir, fsConstants.W_OK | fsConstants.X_OK)
    } catch (err) {
      throw new SessionLockError(`Session lock directory ${this.dir} is not writable`, { cause: err })
    }
  }

  /** Sessions held or waited for by this instance right now (0 when idle). */
  get size (): number {
    return this.#fifo.size
  }

  /** Requests of this process queued behind a holder, over all sessions. */
  get pending (): number {
    return this.#fifo.waiting
  }

  /**
   * Path of a session's lock file.
   * @throws {SessionLockError} (`MCP_SESSION_LOCK_INVALID_ID`) unless the id is path-safe.
   */
  pathFor (id: string): string {
    if (!isFileSafeKey(id)) {
      throw new SessionLockError('Invalid session id for a file lock', { code: SessionLockErrorCodes.INVALID_ID })
    }
    return join(this.dir, `${id}.lock`)
  }

  async acquire (id: string, options: AcquireOptions = {}): Promise<SessionLease> {
    if (this.#closing.signal.aborted) throw closedError()
    const timeout = options.timeout === undefined ? this.timeout : checkTimeout(options.timeout)
    const path = this.pathFor(id)
    if (this.#fifo.isHeldBy(id, options.owner)) throw alreadyHeldError(id)
    const deadline = performance.now() + timeout
    const onTimeout = (): Error => new SessionLockTimeoutError(id, timeout)
    const slot = await this.#fifo.acquire(id, { timeout, signal: options.signal, owner: options.owner, front: options.priority, onTimeout })
    try {
      for (let poll = 0; ;) {
        const attempt = await this.#attempt(id, path)
        if (attempt.locked) return this.#lease(id, slot, attempt.handle)
        if (attempt.reason === 'moved') continue
        const remaining = deadline - performance.now()
        if (remaining <= 0) throw onTimeout()
        await delay(Math.max(1, Math.min(remaining, fullJitter(poll++, POLL_BASE, POLL_CAP))),
          signalOf(options.signal), this.#closing.signal)
      }
    } catch (err) {
      slot()
      throw err
    }
  }

  async tryAcquire (id: string, options: Pick<AcquireOptions, 'owner'> = {}): Promise<SessionLease | null> {
    if (this.#closing.signal.aborted) throw closedError()
    const path = this.pathFor(id)
    if (this.#fifo.isHeldBy(id, options.owner)) throw alreadyHeldError(id)
    const slot = this.#fifo.tryAcquire(id, options.owner)
    if (slot === null) return null
    try {
      for (let i = 0; i < TRY_RESTARTS; i++) {
        const attempt = await this.#attempt(id, path)
        if (attempt.locked) return this.#lease(id, slot, attempt.handle)
        if (attempt.reason === 'busy') break
      }
    } catch (err) {
      slot()
      throw err
    }
    slot()
    return null
  }

  /** Rejects waiters and releases held leases (closing their files). Never throws. */
  async close (): Promise<void> {
    if (this.#closing.signal.aborted) return
    this.#closing.abort(closedError())
    this.#fifo.rejectAll(closedError())
    await Promise.all(this.#leases.values().map(lease => lease.revoke(closedError())))
  }

  /**
   * Opens the lock file and tries the kernel lock once. A fresh descriptor per poll (cheap)
   * keeps no descriptor open while waiting; `moved` means the file we locked was removed from the
   * path meanwhile (gc does that, while holding it), so the lock is worthless: try the new file.
   */
  async #attempt (id: string, path: string): Promise<Attempt> {
    let handle: FileHandle
    try {
      handle = await open(path, 'a')
    } catch (err) {
      throw backendError(id, err)
    }
    try {
      if (!loadNativeLocks().tryLock(handle.fd)) {
        await handle.close()
        return { locked: false, reason: 'busy' }
      }
      if (!await namesPath(handle, path)) {
        await handle.close()
        return { locked: false, reason: 'moved' }
      }
      const now = new Date()
      // Best effort: a stale mtime only makes gc try (and fail) to take a held lock.
      await handle.utimes(now, now).catch(() => {})
      return { locked: true, handle }
    } catch (err) {
      await handle.close().catch(() => {})
      throw backendError(id, err)
    }
  }

  #lease (id: string, slot: FifoRelease, handle: FileHandle): Lease {
    const lease: Lease = new Lease(id, async () => {
      this.#leases.delete(lease)
      try {
        // Closing the descriptor drops the kernel lock; the file stays for the next holder.
        await handle.close()
      } catch (err) {
        throw new SessionLockError(`Failed to release the lock of session ${shownId(id)}`, { cause: err })
      } finally {
        slot()
      }
    })
    this.#leases.add(lease)
    return lease
  }
}

/** Whether the open file is still the one at `path` (not removed or replaced since it was opened). */
export async function namesPath (handle: FileHandle, path: string): Promise<boolean> {
  const [opened, current] = await Promise.all([handle.stat(), stat(path).catch(errorUnlessMissing)])
  return current !== undefined && opened.ino === current.ino && opened.dev === current.dev
}

function errorUnlessMissing (err: NodeJS.ErrnoException): undefined {
  if (err.code === 'ENOENT') return undefined
  throw err
}

/**
 * Takes the kernel lock of an existing lock file without waiting, for `FileSessionStore.gc()`:
 * the open handle when locked (close it to unlock), `null` when the file is missing, `false` when
 * it is held (or was replaced meanwhile). Loads the addon only when the file exists.
 * @throws {SessionLockError} when the file exists and the addon is not installed or does not load.
 */
export async function tryLockExistingFile (path: string): Promise<FileHandle | null | false> {
  let handle: FileHandle
  try {
    handle = await open(path, 'r+')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  try {
    if (loadNativeLocks().tryLock(handle.fd) && await namesPath(handle, path)) return handle
  } catch (err) {
    await handle.close().catch(() => {})
    throw err
  }
  await handle.close()
  return false
}
