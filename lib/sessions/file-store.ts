/**
 * `FileSessionStore`: one JSON file per session, `<dir>/<id>.json` holding `{version, data}`, for
 * the workers of one machine (pair it with `FileSessionLock` on the same directory).
 *
 * - Writes go to a temporary file that is renamed over the session file, so a reader never sees a
 *   half-written session.
 * - The file's mtime is the idle TTL: `load()` touches it; `gc()` scans the directory.
 * - Ids are checked against `^[A-Za-z0-9_-]{16,128}$` before they touch a path.
 * - Only the construction-time directory check is synchronous; every request-path call is async.
 *
 * A save reads the file, merges the changed keys into what is there now and writes it back; saves,
 * creates and destroys of one session are serialized within the process. Across processes without
 * a lock, two saves of one session are last-writer-wins per file (that is what the lock is for).
 */
import { randomBytes } from 'node:crypto'
import { accessSync, constants as fsConstants, mkdirSync } from 'node:fs'
import { link, open, readdir, rename, stat, unlink, utimes, writeFile } from 'node:fs/promises'
import { basename, join, resolve } from 'node:path'
import { tryLockExistingFile } from '../locks/file-lock.js'
import { KeyedFifo } from '../locks/keyed-fifo.js'
import { DEFAULT_SESSION_TTL, checkTtl } from './ttl.js'
import { isFileSafeKey } from '../locks/file-safe-id.js'
import { ExpiryListeners, type ExpiryListener } from './expiry-listeners.js'
import {
  SessionDataError, encodeSessionValue,
  type CreateOptions, type JsonValue, type SaveResult, type SessionChanges, type SessionRecord, type SessionStore,
  type SessionStoreOptions
} from './session-store.js'
import { shownId } from '../util/shown-id.js'

/** Options of {@link FileSessionStore}. */
export interface FileSessionStoreOptions extends SessionStoreOptions {
  /** Directory of the session files; created if missing. */
  dir: string
  /**
   * Directory of the `FileSessionLock`'s lock files (default: `dir`). `gc()` removes the lock file
   * of an expired session, and lock files left by destroyed sessions, only while it holds their
   * kernel lock (a non-blocking try: a held lock file is left for a later run).
   */
  lockDir?: string
  /** Where gc reports files it could not remove (a Fastify/pino logger fits). */
  log?: { warn (obj: object, msg: string): void }
}

interface SessionFile {
  version: number
  data: Record<string, JsonValue>
  /** An idle TTL of the record's own (`create`'s `ttl`), when it differs from the store's. */
  ttl?: number
}

/** Temporary files: `.<id>.<random>.tmp`, left behind only by a crash between write and rename. */
const TEMP_FILE = /^\.([A-Za-z0-9_~-]{16,170})\.[0-9a-f]{16}\.tmp$/

/** Sessions as JSON files in a directory. */
export class FileSessionStore implements SessionStore {
  readonly ttl: number
  /** Absolute directory of the session files. */
  readonly dir: string
  /** Absolute directory of the lock files gc looks after. */
  readonly lockDir: string
  readonly #log: FileSessionStoreOptions['log']
  /** Serializes this process's read-modify-write of a session (FIFO, nothing kept when idle). */
  readonly #writes = new KeyedFifo()
  readonly #expiry = new ExpiryListeners()

  /**
   * Creates the directory and checks it is writable (synchronously: construction only).
   * @throws {Error} when the directory cannot be created or written.
   */
  constructor (options: FileSessionStoreOptions) {
    this.ttl = checkTtl(options.ttl ?? DEFAULT_SESSION_TTL)
    if (typeof options.dir !== 'string' || options.dir === '') throw new TypeError('dir must be a non-empty string.')
    this.dir = resolve(options.dir)
    this.lockDir = resolve(options.lockDir ?? this.dir)
    this.#log = options.log
    try {
      mkdirSync(this.dir, { recursive: true })
      accessSync(this.dir, fsConstants.W_OK | fsConstants.X_OK)
    } catch (err) {
      throw new Error(`Session directory ${this.dir} is not writable`, { cause: err })
    }
  }

  /**
   * @throws {TypeError} for an id that is not path-safe (the plugin mints only safe ones).
   */
  async create (id: string, data: Record<string, JsonValue>, options: CreateOptions = {}): Promise<void> {
    const path = this.#path(id)
    if (path === undefined) throw new TypeError('Invalid session id for the file store')
    const ttl = options.ttl === undefined || options.ttl === this.ttl ? undefined : checkTtl(options.ttl)
    const text = serialize({ version: 0, data: encodeData(data), ttl })
    await this.#serialized(id, async () => {
      const temp = await this.#writeTemp(id, text)
      try {
        // link() fails when the target exists: an atomic "create unless taken".
        await link(temp, path)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
        if (await this.#isLive(path)) throw new Error(`Session ${shownId(id)} already exists`)
        await rename(temp, path) // an expired file gc has not collected yet: replace it
      } finally {
        await unlink(temp).catch(() => {})
      }
      // Until its first load or save (a save writes a new file: a fresh mtime) it expires by `unusedTtl`.
      const unused = options.unusedTtl === undefined ? undefined : Math.min(checkTtl(options.unusedTtl), ttl ?? this.ttl)
      await this.#touch(path, unused ?? ttl)
    })
  }

  async load (id: string): Promise<SessionRecord | null> {
    const path = this.#path(id)
    if (path === undefined) return null
    const file = await this.#read(path)
    if (file === null) return null
    // Refresh the idle TTL. ENOENT: destroyed just now; the next save will say 'gone'.
    await this.#touch(path, file.ttl).catch(errorUnlessMissing)
    return { data: file.data, version: file.version }
  }

  async save (id: string, changes: SessionChanges): Promise<SaveResult> {
    const path = this.#path(id)
    if (path === undefined) return 'gone'
    const set = encodeData(changes.set)
    return await this.#serialized(id, async () => {
      const file = await this.#read(path)
      if (file === null) return 'gone'
      for (const key of Object.keys(set)) {
        Object.defineProperty(file.data, key, { value: set[key], enumerable: true, writable: true, configurable: true })
      }
      for (const key of changes.delete) delete file.data[key]
      file.version++
      const temp = await this.#writeTemp(id, serialize(file))
      try {
        await rename(temp, path)
      } catch (err) {
        await unlink(temp).catch(() => {})
        throw err
      }
      if (file.ttl !== undefined) await this.#touch(path, file.ttl)
      return 'ok'
    })
  }

  async destroy (id: string): Promise<boolean> {
    const path = this.#path(id)
    if (path === undefined) return false
    return await this.#serialized(id, async () => {
      const existed = await this.#isLive(path)
      await unlink(path).catch(errorUnlessMissing)
      return existed
    })
  }

  async exists (id: string): Promise<boolean> {
    const path = this.#path(id)
    return path !== undefined && await this.#isLive(path)
  }

  /**
   * Removes expired session files (and their lock files), lock files left by destroyed sessions,
   * and temporary files of crashed writes, all older than the TTL. Returns the ids of the expired
   * sessions it removed. Files that do not look like ours are never touched; a file that could not
   * be removed is logged and not reported.
   */
  async gc (): Promise<string[]> {
    const removed: string[] = []
    const names = await readdir(this.dir)
    const sessions = new Set<string>()
    for (const name of names) {
      const id = name.endsWith('.json') ? name.slice(0, -5) : undefined
      if (id !== undefined && isFileSafeKey(id)) {
        sessions.add(id)
        if (await this.#collect(id)) removed.push(id)
        continue
      }
      const temp = TEMP_FILE.exec(name)
      if (temp !== null) await this.#removeIfOld(join(this.dir, name))
    }
    // Told before the lock files are looked at: a failure there must not hide what was removed.
    this.#expiry.report(removed)
    let lockNames: string[]
    try {
      lockNames = this.lockDir === this.dir ? names : await readdir(this.lockDir)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return removed
      throw err
    }
    for (const name of lockNames) {
      const id = name.endsWith('.lock') ? name.slice(0, -5) : undefined
      if (id === undefined || !isFileSafeKey(id) || sessions.has(id)) continue
      await this.#collectOrphanLock(id)
    }
    return removed
  }

  onExpired (listener: ExpiryListener): () => void {
    return this.#expiry.add(listener)
  }

  /** Path of a session file, or undefined for an id that must not touch a path. */
  #path (id: string): string | undefined {
    return isFileSafeKey(id) ? join(this.dir, `${id}.json`) : undefined
  }

  #lockPath (id: string): string {
    return join(this.lockDir, `${id}.lock`)
  }

  /**
   * Marks the file used now. The mtime is the idle TTL's clock for every check (`exists`, `gc`
   * scan only stat): a record with a TTL of its own gets an mtime shifted by the difference, so
   * that "mtime + the store's ttl" is when it expires.
   */
  async #touch (path: string, ttl: number | undefined): Promise<void> {
    const at = new Date(Date.now() + (ttl === undefined ? 0 : ttl - this.ttl))
    await utimes(path, at, at)
  }

  #expired (mtimeMs: number): boolean {
    return Date.now() - mtimeMs > this.ttl
  }

  async #isLive (path: string): Promise<boolean> {
    const st = await stat(path).catch(errorUnlessMissing)
    return st !== undefined && !this.#expired(st.mtimeMs)
  }

  /** The session file's content, or null when missing or expired. A corrupt file is an error. */
  async #read (path: string): Promise<SessionFile | null> {
    let handle
    try {
      handle = await open(path, 'r')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
      throw err
    }
    let text: string
    try {
      if (this.#expired((await handle.stat()).mtimeMs)) return null
      text = await handle.readFile('utf8')
    } finally {
      await handle.close()
    }
    try {
      const file = JSON.parse(text) as SessionFile
      if (typeof file.version !== 'number' || typeof file.data !== 'object' || file.data === null) throw new TypeError('not a session file')
      return file
    } catch (err) {
      const id = basename(path, '.json')
      throw new SessionDataError(id, `Session file ${join(this.dir, shownId(id))}.json is corrupt`, { cause: err })
    }
  }

  async #writeTemp (id: string, text: string): Promise<string> {
    const temp = join(this.dir, `.${id}.${randomBytes(8).toString('hex')}.tmp`)
    try {
      await writeFile(temp, text, { flag: 'wx', mode: 0o600 })
    } catch (err) {
      await unlink(temp).catch(() => {})
      throw err
    }
    return temp
  }

  async #serialized<T> (id: string, fn: () => Promise<T>): Promise<T> {
    const release = await this.#writes.acquire(id, { timeout: Infinity, onTimeout: () => new Error('unreachable') })
    try {
      return await fn()
    } finally {
      release()
    }
  }

  /**
   * Removes an expired session, holding its lock file's kernel lock if there is one (a held lock
   * means a request is using the session right now: leave it). Re-checks the mtime under the lock,
   * since a request may have touched it since the scan.
   */
  async #collect (id: string): Promise<boolean> {
    const path = join(this.dir, `${id}.json`)
    try {
      const seen = await stat(path).catch(errorUnlessMissing)
      if (seen === undefined || !this.#expired(seen.mtimeMs)) return false
      return await this.#serialized(id, async () => {
        const lockPath = this.#lockPath(id)
        const lock = await tryLockExistingFile(lockPath)
        if (lock === false) return false
        try {
          const st = await stat(path).catch(errorUnlessMissing)
          if (st === undefined || !this.#expired(st.mtimeMs)) return false
          await unlink(path)
          // Safe while we hold it: a waiter on this file sees it moved and starts over.
          if (lock !== null) await unlink(lockPath).catch(errorUnlessMissing)
          return true
        } finally {
          await lock?.close()
        }
      })
    } catch (err) {
      this.#log?.warn({ err, sessionId: shownId(id) }, 'session gc could not remove an expired session')
      return false
    }
  }

  /** Removes the lock file of a session that no longer exists, if old and not held. */
  async #collectOrphanLock (id: string): Promise<void> {
    const lockPath = this.#lockPath(id)
    try {
      const st = await stat(lockPath).catch(errorUnlessMissing)
      if (st === undefined || !this.#expired(st.mtimeMs)) return
      const lock = await tryLockExistingFile(lockPath)
      if (lock === null || lock === false) return
      try {
        if (await stat(join(this.dir, `${id}.json`)).catch(errorUnlessMissing) === undefined) {
          await unlink(lockPath).catch(errorUnlessMissing)
        }
      } finally {
        await lock.close()
      }
    } catch (err) {
      this.#log?.warn({ err, sessionId: shownId(id) }, 'session gc could not remove a lock file')
    }
  }

  async #removeIfOld (path: string): Promise<void> {
    try {
      const st = await stat(path).catch(errorUnlessMissing)
      if (st !== undefined && this.#expired(st.mtimeMs)) await unlink(path).catch(errorUnlessMissing)
    } catch (err) {
      this.#log?.warn({ err, file: path }, 'session gc could not remove a temporary file')
    }
  }
}

/** Checks and copies values through JSON, so the file holds exactly what JSON can carry. */
function encodeData (data: Record<string, JsonValue>): Record<string, JsonValue> {
  const entries: Array<[string, JsonValue]> = []
  for (const key of Object.keys(data)) entries.push([key, JSON.parse(encodeSessionValue(key, data[key]))])
  return Object.fromEntries(entries)
}

function serialize (file: SessionFile): string {
  return JSON.stringify(file.ttl === undefined ? { version: file.version, data: file.data } : { version: file.version, data: file.data, ttl: file.ttl })
}

function errorUnlessMissing (err: NodeJS.ErrnoException): undefined {
  if (err.code === 'ENOENT') return undefined
  throw err
}
